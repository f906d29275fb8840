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

# httpx imports its own command-line client (`httpx._main`, with click, rich and pygments: ~100 modules and
# ~6 MB of an open app, docs/performance.md) whenever those are installed, and falls back to a stub `main`
# when they are not. No process of ours runs that client, so its import is refused (a None entry is how
# Python marks an import as blocked) and httpx takes the fallback.
UNUSED_SUBMODULES = ("httpx._main",)
for _name in UNUSED_SUBMODULES:
    sys.modules.setdefault(_name, None)  # type: ignore[arg-type]


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
