"""Personal LLM's memory engine: one encrypted SQLite file, hybrid recall, grounded answers.

    from engine import Engine
    with Engine.open() as eng:
        eng.remember("My sister Alice lives in Lisbon.")
        eng.recall("Which city is my sibling based in?")
"""

from .agent import AgentInfo, AgentRun, AgentStep, ConfirmRequest
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

__all__ = [
    "AgentInfo", "AgentRun", "AgentStep", "ConfirmRequest",
    "AskFailed", "AskResult", "Source", "Cancelled", "Changes", "Engine", "EngineError", "ForgetResult", "HealthReport",
    "Hit", "KeyMissing", "Memory", "NotFound", "RememberResult", "Remembered", "Settings", "Stats", "UserError", "WrongKey", "__version__", "log_dir", "setup_logging",
    "SUPPORTED_EXTENSIONS",
]
