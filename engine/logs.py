"""Logging setup for composition roots (CLI, API, MCP, desktop): a rotating file under the user log dir.

Modules only call `logging.getLogger(__name__)`; they log ids, counts and timings — never memory text,
prompts or keys.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import warnings
from pathlib import Path
from typing import Any

from .locking import FILE_MODE, private_dir, private_file
from .paths import log_dir

_configured = False


class _PrivateLog(logging.handlers.RotatingFileHandler):
    """A rotating log whose files are the owner's alone (0600), whatever the umask."""

    def _open(self) -> Any:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        private_file(Path(self.baseFilename))
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)


def setup_logging(name: str = "personal-llm", level: int = logging.INFO) -> None:
    global _configured
    if _configured:
        return
    _configured = True
    root = logging.getLogger()
    root.setLevel(level)
    logging.raiseExceptions = False  # a full or read-only disk must not print logging tracebacks to the terminal
    try:
        d = log_dir()
        private_dir(d)
        handler: logging.Handler = _PrivateLog(d / f"{name}.log", maxBytes=2_000_000, backupCount=3, encoding="utf-8")
        for old in d.glob(f"{name}.log*"):  # written by older versions with the umask's mode
            private_file(old)
    except OSError:
        handler = logging.NullHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    # third-party chatter stays out of the user's terminal
    for noisy in ("httpx", "httpcore", "sentence_transformers", "transformers", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")


_crash_file: Any = None


def report_crashes(name: str = "personal-llm") -> None:
    """A crash of the process (a segfault, an abort) writes every thread's Python stack to `<name>-crash.log`
    in the log folder (the owner's alone): file names, lines and functions, never data. Kept open for good."""
    global _crash_file
    import faulthandler

    try:
        d = log_dir()
        private_dir(d)
        fd = os.open(d / f"{name}-crash.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        private_file(d / f"{name}-crash.log")
    except OSError:
        return
    _crash_file = os.fdopen(fd, "a", encoding="utf-8")
    faulthandler.enable(_crash_file, all_threads=True)
