import sys

from .root import main

sys.exit(main())
