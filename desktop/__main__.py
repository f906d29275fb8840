"""`python -m desktop`: the same as `personal-llm-desktop`."""

from .app import main

raise SystemExit(main())
