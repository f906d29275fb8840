"""The engine's own types that cross the storage seam (engine/store/__init__.py), whichever backend keeps
the rows: what a search may return (`Filter`), the counts a store keeps (`Tallies`), a lexical search's plan,
and a memory's row (`MemoryRow`, named fields in the order both backends read them)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from ..hits import KINDS, Kind, iso

if TYPE_CHECKING:  # the boundary models (pydantic) load when one is made: a recall makes none
    from ..models import Memory, Stats

ACTIVITY_SOURCE = "activity"  # the app's own events ("Ingested X"), stored as episodic memories of this source


@dataclass
class Filter:
    """What a search may return. `projects`: None = any project; else these (None inside = unscoped)."""

    projects: set[str | None] | None = None
    kinds: set[str] | None = None
    include_archived: bool = False
    since: float | None = None
    until: float | None = None
    activity: bool = False  # also the app's own events (ACTIVITY_SOURCE), as episodic memories


class Stopped(Exception):
    """A load in the background given up: the store is closing."""


@dataclass(frozen=True)
class MemoryTally:
    kind: str
    archived: bool
    activity: bool
    extracted: bool
    processed: bool
    unembedded: bool
    n: int

    @classmethod
    def named(cls, name: str, n: int) -> MemoryTally:
        """The tally of the row named 'm:<kind>:<archived>:<activity>:<extracted>:<processed>:<unembedded>'."""
        _, kind, *flags = name.split(":")
        archived, activity, extracted, processed, unembedded = (f == "1" for f in flags)
        return cls(kind, archived, activity, extracted, processed, unembedded, int(n))


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

    @classmethod
    def from_rows(cls, rows: list[tuple[str, int]], held: int, held_unextracted: int,
                  given_up_unembedded: int) -> Tallies:
        """From the rows (name, n) of the tallies table and the three counts of documents held back."""
        memories, chunks, named = [], {}, {}
        for name, n in rows:
            if name.startswith("m:"):
                memories.append(MemoryTally.named(name, n))
            elif name.startswith("c:"):
                chunks[name] = int(n)
            else:
                named[name] = int(n)
        return cls(tuple(memories), chunks, named, int(held), int(held_unextracted), int(given_up_unembedded))

    def stats(self, *, where: str, schema_version: int, conflicts: int, space: tuple | None, model: str,
              embedding_ready: bool, notes: list[str]) -> Stats:
        """The store in numbers: these counts, the conflicting pairs, and the embedding space (model,
        dimension; None before the first vector: the configured `model` is shown)."""
        from ..models import Stats

        by_kind = {k: 0 for k in KINDS}
        memories = activity = archived = 0
        for t in self.memories:
            if t.archived:
                archived += t.n
            elif t.activity:
                activity += t.n
            else:
                memories += t.n
                by_kind[t.kind] = by_kind.get(t.kind, 0) + t.n
        return Stats(
            store=where, schema_version=schema_version, memories=memories, activity=activity, by_kind=by_kind,
            archived=archived, conflicts=conflicts, documents=self.tally("d:ready"),
            documents_failed=self.tally("d:failed"), chunks=self.chunk_count(), nodes=self.tally("nodes"),
            edges=self.tally("edges"), pending_embeddings=self.unembedded(),
            pending_extraction=self.pending_extraction(), pending_rollup=self.waiting()[0],
            embedding_model=space[0] if space else model, embedding_dimension=space[1] if space else None,
            embedding_ready=embedding_ready, notes=notes,
        )

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


# A flat cost per table, whatever the store's size: FTS5 scores every row a searched term is in (bm25() over
# the whole match list for ORDER BY rank, after counting the list once more for the term's IDF), 2.5-5 us a
# row: a term in 146k of a 1M store's rows took 380 ms, and PRUNE_SHARE keeps terms in up to 2% of the rows.
# So FTS5 searches the kept terms rarest first while the rows they are in sum to at most LEXICAL_BUDGET (a
# term in at most PRUNE_MIN_DF rows always); a term past it is scored only on the rows the other signals
# found (`term_scores`), with its IDF in the sum all the same. Recall sets the budget when it has vectors to
# find those rows; by words alone everything kept is searched as before. Below 100k rows (where PRUNE_SHARE
# is under PRUNE_MIN_DF) only the term kept when nothing else occurs can be past it.
LEXICAL_BUDGET = 10_000

# Recall reads this many characters of a conversation turn to tell who said it and whom it speaks of.
TURN_CHARS = 1000


@dataclass
class LexicalPlan:
    """What to search in one FTS5 table: the terms FTS5 searches (very common ones pruned), the terms scored
    only on the candidates the other signals find (beyond the posting budget), and the IDF sum of both."""

    terms: list[str]
    idf_sum: float
    pruned: list[str]
    costly: list[str] = field(default_factory=list)
    dfs: dict[str, int] = field(default_factory=dict)
    rows: int = 0  # rows of the table the document frequencies were counted among (the N of the IDF)


class MemoryRow(NamedTuple):
    """A memory's row as both backends read it: the stored fields by name (`meta` as JSON text)."""

    id: int
    uid: str
    kind: Kind
    text: str
    project: str | None
    importance: float
    created_at: float
    updated_at: float
    event_at: float | None
    last_accessed_at: float | None
    access_count: int
    archived: int
    source: str
    conflict_with: str | None
    embedded_hash: str | None
    content_hash: str
    meta: str | None


def to_memory(row: MemoryRow) -> Memory:
    """The memory a row holds, as every door shows it."""
    from ..models import Memory

    return Memory(
        id=row.uid, kind=row.kind, text=row.text, project=row.project, importance=round(row.importance, 4),
        created_at=iso(row.created_at), updated_at=iso(row.updated_at), at=iso(row.event_at),
        last_accessed_at=iso(row.last_accessed_at), access_count=row.access_count, archived=bool(row.archived),
        source=row.source, conflict_with=row.conflict_with,
        embedded=row.embedded_hash is not None and row.embedded_hash == row.content_hash,
        meta=json.loads(row.meta or "{}"),
    )
