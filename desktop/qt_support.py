"""A work-around for PySide6 itself, applied once when the desktop package is imported (desktop/__init__.py).

PySide6's import hook (`shibokensupport.feature.feature_imported`) asks of every module imported after
PySide6 whether its source mentions "PySide6" (such a module may select `__feature__` options), and asks it
through `inspect.getsource`, which reads the module's whole file into `linecache` and leaves it there for the
life of the process. In the app that is every module imported after Qt: ~1,100 files, 16 M characters,
~36 MB of line strings after an ingest has imported the document parsers (docs/performance.md, "Memory and
size"). Freeing them later gives little back: they sit among the modules' own objects. So the question is
answered the same way from the module's loader (`get_source`, which keeps nothing) before they are read.
"""

from __future__ import annotations

import logging
from types import ModuleType

log = logging.getLogger(__name__)


def mentions_pyside(module: ModuleType) -> bool:
    """What PySide6's `_mod_uses_pyside` answers (the module's source contains "PySide6"; False when it has
    none), without caching the source."""
    loader = getattr(module, "__loader__", None)
    get_source = getattr(loader, "get_source", None)
    if get_source is None:
        return False
    try:
        source = get_source(module.__name__)
    except (ImportError, OSError, SyntaxError, UnicodeDecodeError, TypeError, ValueError):
        return False
    return bool(source) and "PySide6" in source


def keep_module_sources_out_of_memory() -> bool:
    """Replace PySide6's source check with `mentions_pyside`. False when this PySide6 has no such check (a
    newer one may not), in which case nothing is changed."""
    import PySide6.QtCore  # noqa: F401  loads shiboken6, which installs the import hook

    try:
        import shibokensupport.feature as feature  # type: ignore[import-not-found]  # PySide6's own, built in
    except ImportError:
        return False
    if not callable(getattr(feature, "_mod_uses_pyside", None)):
        return False
    feature._mod_uses_pyside = mentions_pyside
    return True
