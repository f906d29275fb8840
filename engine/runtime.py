"""The profile's running API server, as other programs of the profile find it: `serving.json` in the profile.

`personal-llm serve` (and so the desktop app, whose API is that command run as a child process) writes it
once its socket listens: its pid and port, nothing secret, private mode (0600). It removes the file when it
stops. A file left by a server that died without removing it names a process that is gone: `find` ignores
it (the next server writes over it). A pid that was reused by another program is caught by the caller, whose request then
finds no server of this profile at that port (refused, or not answered with this profile's token).

Standard library only: the CLI reads it before it imports anything heavy (docs/performance.md).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .paths import write_atomic

log = logging.getLogger(__name__)

SERVER_FILE = "serving.json"  # a profile that lives on a server is named by connection.json (engine/remote.py)


@dataclass(frozen=True)
class RunningServer:
    pid: int
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if sys.platform == "win32":  # os.kill(pid, 0) would end the process there: the request decides
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user has that pid now: not our server
        return False
    return True


def announce(home: Path, port: int, pid: int | None = None) -> Path:
    """Write the profile's server file (0600, atomically) for a server listening on `port`."""

    path = home / SERVER_FILE
    write_atomic(path, json.dumps({"pid": os.getpid() if pid is None else pid, "port": port}))
    return path


def withdraw(home: Path, pid: int | None = None) -> None:
    """Remove the server file if it still names this process (another server may have replaced it)."""
    path = home / SERVER_FILE
    server = _read(path)
    if server is not None and server.pid == (os.getpid() if pid is None else pid):
        try:
            path.unlink()
        except OSError:
            pass


def _read(path: Path) -> RunningServer | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        pid, port = data["pid"], data["port"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(pid, int) or not isinstance(port, int) or not 0 < port < 65536:
        return None
    return RunningServer(pid, port)


def find(home: Path) -> RunningServer | None:
    """The server running for this profile, or None (no file, an unreadable one, or one left by a server
    that is gone)."""
    path = home / SERVER_FILE
    server = _read(path)
    if server is None:
        return None
    if not _alive(server.pid):
        log.info("a server file of a process that is gone was ignored")
        return None
    return server
