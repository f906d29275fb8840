"""Counts kept by triggers (the `tallies` table, migration m005): the same cost at any size."""

from __future__ import annotations

from ..types import MemoryTally, Tallies
from .db import Connection


def memory_tallies(con: Connection) -> list[MemoryTally]:
    return [MemoryTally.named(name, n) for name, n in
            con.execute("SELECT name, n FROM tallies WHERE name >= 'm:' AND name < 'm;' AND n != 0").fetchall()]


def read(con: Connection) -> Tallies:
    rows = con.execute("SELECT name, n FROM tallies WHERE n != 0").fetchall()
    # documents being ingested or given up are few: counted by the documents' status index
    held, unextracted, unembedded = con.execute(
        "SELECT count(*), total(c.extracted = 0), total(d.status = 'failed' AND c.embedded_hash IS NULL) "
        "FROM documents d JOIN chunks c ON c.document_id = d.id WHERE d.status IN ('pending', 'failed')").fetchone()
    return Tallies.from_rows(rows, held, unextracted, unembedded)


def unembedded(con: Connection) -> int:
    """Memories and chunks stored without a vector that will get one (Tallies.unembedded)."""
    return read(con).unembedded()
