"""Document ingest: files into chunks with provenance (see Engine.ingest)."""

from __future__ import annotations


class IngestMixin:
    """Engine methods for this area (mixed into engine.Engine)."""
