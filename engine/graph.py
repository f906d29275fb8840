"""Knowledge graph: triples with provenance, admission policy, traversal."""

from __future__ import annotations


class GraphMixin:
    """Engine methods for this area (mixed into engine.Engine)."""
