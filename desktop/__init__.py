"""Personal LLM's desktop app: a PySide6 window, tray icon and quick-capture box in front of `engine`.

`desktop.app` is the composition root; `desktop.bridge` is the only module that calls the engine.
"""

from .qt_support import keep_module_sources_out_of_memory

keep_module_sources_out_of_memory()
