"""Consolidation: decay, archive, contradictions, episodic roll-up."""

from __future__ import annotations


class ConsolidationMixin:
    """Engine methods for this area (mixed into engine.Engine)."""
