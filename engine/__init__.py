"""Personal LLM's memory engine: one encrypted SQLite file, hybrid recall, grounded answers.

    from engine import Engine
    with Engine.open() as eng:
        eng.remember("My sister Alice lives in Lisbon.")
        eng.recall("Which city is my sibling based in?")
"""

from .ask import AskFailed, AskResult, Source
from .engine import Changes, Engine
from .errors import Cancelled, EngineError, NotFound, UserError
from .models import ForgetResult, Hit, Memory, RememberResult, Stats

__all__ = [
    "AskFailed", "AskResult", "Source", "Cancelled", "Changes", "Engine", "EngineError", "ForgetResult", "Hit", "Memory", "NotFound",
    "RememberResult", "Stats", "UserError",
]
__version__ = "0.1.0"
