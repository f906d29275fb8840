"""Frozen entry point of the one executable of the bundle; the program is chosen by the name it is run as.

    personal-llm-desktop …   desktop.app:main   (/usr/bin/personal-llm-desktop → /opt/personal-llm/personal-llm-desktop,
                                                 a hard link to /opt/personal-llm/personal-llm)
    anything else …          engine.cli:main    (`personal-llm`)
    personal-llm --parse-worker   engine.parse_worker:main (a helper reading documents for the app or `serve`)

One executable instead of two: each PyInstaller executable embeds its own copy of the Python archive (~80 MB).
The desktop program is a hard link rather than a symlink inside /opt so that code resolving `sys.argv[0]`
(desktop.autostart.launch_command) still sees the desktop name.

`--self-test` through the desktop name is handled by desktop.app itself. While a build has no desktop.app
(the window is written separately), the desktop name still answers `--self-test` with the engine's checks.
"""

import os
import sys

import engine.parse_worker  # noqa: F401  (static, so PyInstaller bundles it)
import engine.selftest  # noqa: F401  (static, so PyInstaller bundles it)

DESKTOP_NAME = "personal-llm-desktop"


def is_desktop(argv0: str) -> bool:
    name = os.path.basename(argv0)
    if name.lower().endswith(".exe"):
        name = name[:-4]
    return name == DESKTOP_NAME


def desktop_main() -> int:
    import importlib.util

    if importlib.util.find_spec("desktop.app") is not None:
        from desktop.app import main as app_main

        return app_main() or 0
    if "--self-test" in sys.argv[1:]:
        from engine.selftest import main as selftest_main

        return selftest_main([a for a in sys.argv[1:] if a != "--self-test"])
    sys.stderr.write("This build of Personal LLM has no desktop window; use the `personal-llm` command.\n")
    return 2


def main() -> int:
    if sys.argv[1:2] == [engine.parse_worker.WORKER_FLAG]:
        return engine.parse_worker.main()
    if is_desktop(sys.argv[0] if sys.argv else ""):
        return desktop_main()
    from engine.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
