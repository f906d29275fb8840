"""Export and import of everything a user owns (JSON Lines)."""

from __future__ import annotations


class TransferMixin:
    """Engine methods for this area (mixed into engine.Engine)."""
