"""Frozen entry point of `personal-llm-desktop`: desktop.app:main.

`--self-test` is handled by desktop.app itself (it checks Qt as well, then calls engine.selftest.main()).
While a build has no desktop.app yet (the window is written separately), this launcher still answers
`--self-test` with the engine's checks so the whole installer pipeline can be verified.
"""

import importlib.util
import sys


def main() -> int:
    if importlib.util.find_spec("desktop.app") is not None:
        from desktop.app import main as app_main

        return app_main() or 0
    if "--self-test" in sys.argv[1:]:
        from engine.selftest import main as selftest_main

        rest = [a for a in sys.argv[1:] if a != "--self-test"]
        return selftest_main(rest)
    sys.stderr.write("This build of Personal LLM has no desktop window; use the `personal-llm` command.\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
