"""Ask: grounded answers with citations from a local LLM (see Engine.ask)."""

from __future__ import annotations


class AskMixin:
    """Engine methods for this area (mixed into engine.Engine)."""
