"""Briefcase entry point of Personal LLM (macOS .app, Windows .msi, Briefcase Linux packages).

    Personal LLM                      the desktop app (desktop.app:main)
    Personal LLM --self-test          check the installation (Qt, store, sqlite-vec, bundled model)
    Personal LLM cli COMMAND ...      the `personal-llm` command line, e.g. `cli recall "dentist"`
"""

import importlib.util
import sys


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["cli"]:
        from engine.cli import main as cli_main

        sys.argv = ["personal-llm", *args[1:]]
        return cli_main(args[1:])
    if importlib.util.find_spec("desktop.app") is None:  # a build made before the window existed
        if "--self-test" in args:
            from engine.selftest import main as selftest_main

            return selftest_main([a for a in args if a != "--self-test"])
        sys.stderr.write("This build has no desktop window; run it with `cli --help`.\n")
        return 2
    from desktop.app import main as app_main

    return app_main() or 0


if __name__ == "__main__":
    sys.exit(main())
