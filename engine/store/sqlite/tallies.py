"""Counts kept by triggers (the `tallies` table, migration m005): the same cost at any size."""

from __future__ import annotations

from dataclasses import dataclass

from .db import Connection


@dataclass(frozen=True)
class MemoryTally:
    kind: str
    archived: bool
    activity: bool
    extracted: bool
    processed: bool
    unembedded: bool
    n: int


def _memory_tally(name: str, n: int) -> MemoryTally:
    _, kind, *flags = name.split(":")
    archived, activity, extracted, processed, unembedded = (f == "1" for f in flags)
    return MemoryTally(kind, archived, activity, extracted, processed, unembedded, int(n))


def memory_tallies(con: Connection) -> list[MemoryTally]:
    return [_memory_tally(name, n) for name, n in
            con.execute("SELECT name, n FROM tallies WHERE name >= 'm:' AND name < 'm;' AND n != 0").fetchall()]


@dataclass(frozen=True)
class Tallies:
    """Every count of the `tallies` table, and the chunks of documents being ingested or given up, read in two
    statements (`read`): `stats` and the notes beside it answer from one of these instead of reading the
    table once per number (22 statements a call before)."""

    memories: tuple[MemoryTally, ...]
    chunks: dict[str, int]  # 'c:<extracted>:<unembedded>' -> n, every chunk
    named: dict[str, int]  # the other rows ('d:ready', 'd:failed', 'nodes', 'edges', ...)
    held: int  # chunks of documents being ingested or given up (not counted as a ready document's)
    held_unextracted: int  # of those, not read for triples yet
    given_up_unembedded: int  # chunks of given-up documents without a vector (nothing embeds them)

    def tally(self, name: str) -> int:
        return self.named.get(name, 0)

    def chunk_count(self, *, unextracted: bool = False) -> int:
        """Chunks of ready documents (only those not read for triples yet, with unextracted)."""
        total = sum(n for name, n in self.chunks.items() if not unextracted or name.startswith("c:0:"))
        return total - (self.held_unextracted if unextracted else self.held)

    def memories_unextracted(self) -> int:
        """Memories not archived and not read for triples yet."""
        return sum(t.n for t in self.memories if not t.archived and not t.extracted)

    def pending_extraction(self) -> int:
        """Memories and chunks not read for triples yet."""
        return self.memories_unextracted() + self.chunk_count(unextracted=True)

    def unembedded(self) -> int:
        """Memories and chunks stored without a vector (embedded_hash NULL) that will get one: not the chunks
        of a given-up document, which nothing embeds (`storage.space.waiting` reads ready documents' only)."""
        chunks = sum(n for name, n in self.chunks.items() if name.endswith(":1")) - self.given_up_unembedded
        return sum(t.n for t in self.memories if t.unembedded) + chunks

    def waiting(self) -> tuple[int, int]:
        """(unprocessed live events, live facts)."""
        live = [t for t in self.memories if not t.archived]
        return (sum(t.n for t in live if t.kind == "episodic" and not t.processed),
                sum(t.n for t in live if t.kind == "fact"))


def read(con: Connection) -> Tallies:
    memories, chunks, named = [], {}, {}
    for name, n in con.execute("SELECT name, n FROM tallies WHERE n != 0").fetchall():
        if name.startswith("m:"):
            memories.append(_memory_tally(name, n))
        elif name.startswith("c:"):
            chunks[name] = int(n)
        else:
            named[name] = int(n)
    # documents being ingested or given up are few: counted by the documents' status index
    held, unextracted, unembedded = con.execute(
        "SELECT count(*), total(c.extracted = 0), total(d.status = 'failed' AND c.embedded_hash IS NULL) "
        "FROM documents d JOIN chunks c ON c.document_id = d.id WHERE d.status IN ('pending', 'failed')").fetchone()
    return Tallies(tuple(memories), chunks, named, int(held), int(unextracted), int(unembedded))


def unembedded(con: Connection) -> int:
    """Memories and chunks stored without a vector that will get one (Tallies.unembedded)."""
    return read(con).unembedded()
