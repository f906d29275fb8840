"""Frozen entry point of `personal-llm` (the CLI): engine.cli:main, with every command module bundled."""

import sys

import engine.selftest  # noqa: F401  registers `personal-llm self-test` (and makes PyInstaller bundle it)
from engine.cli import main

if __name__ == "__main__":
    sys.exit(main())
