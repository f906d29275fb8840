"""Personal LLM's memory engine: one encrypted SQLite file, hybrid recall, grounded answers.

    from engine import Engine
    with Engine.open() as eng:
        eng.remember("My sister Alice lives in Lisbon.")
        eng.recall("Which city is my sibling based in?")
"""

from .ask import AskFailed, AskResult, Source
from .config import Settings, log_dir
from .context import Changes
from .engine import Engine
from .errors import Cancelled, EngineError, KeyMissing, NotFound, UserError, WrongKey
from .logs import setup_logging
from .memories import Remembered
from .models import ForgetResult, HealthReport, Hit, Memory, RememberResult, Stats
from .parsers import SUPPORTED_EXTENSIONS
from .version import __version__

_LAZY = {"AgentInfo", "AgentRun", "AgentStep", "ConfirmRequest"}  # engine/agent loads when first used


def __getattr__(name: str):
    if name in _LAZY:
        from . import agent

        return getattr(agent, name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")

__all__ = [
    "AgentInfo", "AgentRun", "AgentStep", "ConfirmRequest",
    "AskFailed", "AskResult", "Source", "Cancelled", "Changes", "Engine", "EngineError", "ForgetResult", "HealthReport",
    "Hit", "KeyMissing", "Memory", "NotFound", "RememberResult", "Remembered", "Settings", "Stats", "UserError", "WrongKey", "__version__", "log_dir", "setup_logging",
    "SUPPORTED_EXTENSIONS",
]
