"""The store in numbers: counts by kind, what waits to be embedded, extracted or rolled up.

The counts come from `tallies` (migrations m005 and m007), kept by triggers on every insert, delete and change of a
counted flag, so `stats` costs the same at any size; only the chunks of documents being ingested or given
up, and contradiction flags, are counted from their (partial) index.
"""

from __future__ import annotations

from ...models import Stats
from .db import Connection
from .migrations import SCHEMA_VERSION
from .tallies import Tallies


def collect(con: Connection, counts: Tallies, *, where: str, model: str, embedding_ready: bool,
            notes: list[str]) -> Stats:
    """The store in numbers from `counts` (tallies.read) and two more reads, in the snapshot `con` reads
    (`where`: the store's name for people; `model`: the configured embedding model, shown until vectors exist)."""
    # pairs, as `conflicts()` lists them: both facts of a pair carry the flag (by the flagged rows' index)
    conflicts = con.execute(
        "SELECT count(*) FROM memories a JOIN memories b ON b.uid = a.conflict_with "
        "WHERE a.conflict_with IS NOT NULL AND (a.uid < b.uid OR b.conflict_with IS NOT a.uid)").fetchone()[0]
    space = con.execute("SELECT model, dimension FROM embedding_space").fetchone()
    return counts.stats(where=where, schema_version=SCHEMA_VERSION, conflicts=conflicts, space=space, model=model,
                        embedding_ready=embedding_ready, notes=notes)
