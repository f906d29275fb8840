"""Counts kept by triggers (the `tallies` table, one row per user and name: migrations.m001_initial), read
as the SQLite backend reads them: the same names, the same types."""

from __future__ import annotations

import psycopg

from ..types import MemoryTally, Tallies

Connection = psycopg.Connection


def memory_tallies(con: Connection) -> list[MemoryTally]:
    return [MemoryTally.named(name, n) for name, n in
            con.execute("SELECT name, n FROM tallies WHERE starts_with(name, 'm:') AND n <> 0").fetchall()]


def read(con: Connection) -> Tallies:
    rows = con.execute("SELECT name, n FROM tallies WHERE n <> 0").fetchall()
    # documents being ingested or given up are few: counted by the documents' status index
    row = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE NOT c.extracted), "
        "count(*) FILTER (WHERE d.status = 'failed' AND c.embedded_hash IS NULL) "
        "FROM documents d JOIN chunks c ON c.user_id = d.user_id AND c.document_id = d.id "
        "WHERE d.status IN ('pending', 'failed')").fetchone()
    held, unextracted, unembedded = row if row else (0, 0, 0)
    return Tallies.from_rows(rows, held, unextracted, unembedded)


def unembedded(con: Connection) -> int:
    """Memories and chunks stored without a vector that will get one (Tallies.unembedded)."""
    return read(con).unembedded()
