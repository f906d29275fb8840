"""Personal LLM's memory engine: one encrypted SQLite file, hybrid recall, grounded answers.

    from engine import Engine
    with Engine.open() as eng:
        eng.remember("My sister Alice lives in Lisbon.")
        eng.recall("Which city is my sibling based in?")

The names below are imported on first use: `import engine.cli` (or any submodule) imports this package first,
and a short command (a CLI `recall` asking the running server) must not pay for the whole engine.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .agent import AgentInfo, AgentRun, AgentStep, ConfirmRequest
    from .ask import AskFailed, AskResult, Source
    from .config import Settings, log_dir
    from .context import Changes
    from .engine import Engine
    from .errors import Cancelled, EngineError, KeyMissing, NotFound, UserError, WrongKey
    from .hits import Hit
    from .logs import report_crashes, setup_logging
    from .memories import Remembered
    from .models import ForgetResult, HealthReport, Memory, MemoryPage, RememberResult, Stats
    from .parsers import SUPPORTED_EXTENSIONS
    from .remote import (
        CertificateRefused,
        ServerUnreachable,
        TokenRefused,
        check_server,
        connect_profile,
        disconnect_profile,
        read_server_profile,
    )
    from .remote_app import Connection, copy_to_local, push_to_server
    from .version import __version__

_WHERE = {
    "AgentInfo": "agent", "AgentRun": "agent", "AgentStep": "agent", "ConfirmRequest": "agent",
    "AskFailed": "ask", "AskResult": "ask", "Source": "ask",
    "Settings": "config", "log_dir": "config",
    "Changes": "context",
    "Engine": "engine",
    "Cancelled": "errors", "EngineError": "errors", "KeyMissing": "errors", "NotFound": "errors",
    "UserError": "errors", "WrongKey": "errors",
    "report_crashes": "logs", "setup_logging": "logs",
    "Remembered": "memories",
    "ForgetResult": "models", "HealthReport": "models", "Hit": "hits", "Memory": "models", "MemoryPage": "models",
    "RememberResult": "models", "Stats": "models",
    "SUPPORTED_EXTENSIONS": "parsers",
    "CertificateRefused": "remote", "ServerUnreachable": "remote", "TokenRefused": "remote", "check_server": "remote",
    "connect_profile": "remote", "disconnect_profile": "remote", "read_server_profile": "remote",
    "Connection": "remote_app", "copy_to_local": "remote_app", "push_to_server": "remote_app",
    "__version__": "version",
}


def __getattr__(name: str):
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{where}", __name__), name)
    globals()[name] = value
    return value


def open_profile(home=None, *, actor: str = "sdk", **engine_options):  # noqa: ANN001, ANN201 - see below
    """The profile at `home` (default: the user's) as a program that stays open uses it: the engine of its
    local store (`Engine.open(home, actor=…, **engine_options)`), or, for a profile that lives on a server, the
    server's client with the same methods (engine/remote_app.py). The caller need not know which."""
    from pathlib import Path

    from .config import home_dir
    from .remote import read_server_profile

    where = Path(home).expanduser().resolve() if home else home_dir()
    server = read_server_profile(where)
    if server is not None:
        from .remote_app import RemoteApp

        return RemoteApp(server, actor=actor, passphrase=engine_options.get("passphrase"),
                         interactive=bool(engine_options.get("interactive", False)))
    from .engine import Engine

    return Engine.open(where, actor=actor, **engine_options)


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = [
    "AgentInfo", "AgentRun", "AgentStep", "ConfirmRequest",
    "AskFailed", "AskResult", "Source", "Cancelled", "Changes", "Engine", "EngineError", "ForgetResult", "HealthReport",
    "Hit", "KeyMissing", "Memory", "MemoryPage", "NotFound", "RememberResult", "Remembered", "Settings", "Stats", "UserError", "WrongKey", "__version__", "log_dir", "report_crashes", "setup_logging",
    "SUPPORTED_EXTENSIONS", "CertificateRefused", "Connection", "ServerUnreachable", "TokenRefused", "check_server",
    "connect_profile", "disconnect_profile", "open_profile", "read_server_profile", "copy_to_local",
    "push_to_server",
]
