"""Modules imported on first use, so that a short command (a CLI `remember`) does not pay for clients it
never calls: the LLM clients (`ollama`, `httpx` and, through it, its own CLI's `click` and `rich`) and
the agents' schema checker take ~0.4 s to import, more than the rest of a `remember`.

    httpx = lazy_module("httpx")   # a module object; the real import runs on its first attribute access
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType

_lock = threading.Lock()


def lazy_module(name: str) -> ModuleType:
    """`name`, imported when one of its attributes is first read (at once if it is already imported)."""
    with _lock:
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        loader = importlib.util.LazyLoader(spec.loader)
        spec.loader = loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loader.exec_module(module)
        return module
