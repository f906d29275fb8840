"""A user's store in numbers, from the tallies (engine/store/postgres/tallies.py) and two more reads."""

from __future__ import annotations

from typing import Any

from ...models import Stats
from ..types import Tallies
from .migrations import SCHEMA_VERSION


def collect(con: Any, counts: Tallies, *, where: str, model: str, embedding_ready: bool,
            notes: list[str]) -> Stats:
    """The store in numbers from `counts` (tallies.read) and two more reads."""
    conflicts = con.execute(
        "SELECT count(*) FROM memories a JOIN memories b ON b.user_id = a.user_id AND b.uid = a.conflict_with "
        "WHERE a.conflict_with IS NOT NULL AND (a.uid < b.uid OR b.conflict_with IS DISTINCT FROM a.uid)").fetchone()[0]
    space = con.execute("SELECT model, dimension FROM embedding_space").fetchone()
    return counts.stats(where=where, schema_version=SCHEMA_VERSION, conflicts=conflicts, space=space, model=model,
                        embedding_ready=embedding_ready, notes=notes)
