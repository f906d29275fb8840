"""Imports of the user's history from other tools: ChatGPT and Claude exports, Obsidian vaults.

`chats` and `obsidian` read the formats (pure); `part` writes them into the store (`engine.imports`).
"""

from .chats import ExportError
from .part import ImportReport, Imports

__all__ = ["ExportError", "ImportReport", "Imports"]
