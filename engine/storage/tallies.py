"""Counts kept by triggers (the `tallies` table, migration m005): the same cost at any size."""

from __future__ import annotations

from dataclasses import dataclass

from ..db import Connection


@dataclass(frozen=True)
class MemoryTally:
    kind: str
    archived: bool
    activity: bool
    extracted: bool
    processed: bool
    unembedded: bool
    n: int


def memory_tallies(con: Connection) -> list[MemoryTally]:
    out = []
    for name, n in con.execute("SELECT name, n FROM tallies WHERE name >= 'm:' AND name < 'm;' AND n != 0").fetchall():
        _, kind, *flags = name.split(":")
        archived, activity, extracted, processed, unembedded = (f == "1" for f in flags)
        out.append(MemoryTally(kind, archived, activity, extracted, processed, unembedded, int(n)))
    return out


def tally(con: Connection, name: str) -> int:
    row = con.execute("SELECT n FROM tallies WHERE name = ?", (name,)).fetchone()
    return int(row[0]) if row else 0


def chunk_tallies(con: Connection) -> dict[str, int]:
    """{'c:<extracted>:<unembedded>': n} of every chunk."""
    return {r[0]: int(r[1]) for r in con.execute("SELECT name, n FROM tallies WHERE name >= 'c:' AND name < 'c;'").fetchall()}


def _chunks_of(con: Connection, statuses: str, extra: str = "") -> int:
    """Chunks of the documents in these statuses (an SQL list, e.g. "'failed'"): documents being ingested
    or given up are few, so this is counted by the documents' status index."""
    return int(con.execute("SELECT count(*) FROM documents d JOIN chunks c ON c.document_id = d.id "
                           f"WHERE d.status IN ({statuses}){extra}").fetchone()[0])


def chunk_tally(con: Connection, *, unextracted: bool = False) -> int:
    """Chunks of ready documents (only those not read for triples yet, with unextracted)."""
    total = sum(n for name, n in chunk_tallies(con).items() if not unextracted or name.startswith("c:0:"))
    return total - _chunks_of(con, "'pending', 'failed'", " AND c.extracted = 0" if unextracted else "")


def memories_unextracted(con: Connection) -> int:
    """Memories not archived and not read for triples yet."""
    return sum(t.n for t in memory_tallies(con) if not t.archived and not t.extracted)


def unembedded(con: Connection) -> int:
    """Memories and chunks stored without a vector (embedded_hash NULL) that will get one: not the chunks of
    a given-up document, which nothing embeds (`storage.space.waiting` reads ready documents' only)."""
    chunks = sum(n for name, n in chunk_tallies(con).items() if name.endswith(":1"))
    chunks -= _chunks_of(con, "'failed'", " AND c.embedded_hash IS NULL")
    return sum(t.n for t in memory_tallies(con) if t.unembedded) + chunks
