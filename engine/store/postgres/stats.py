"""A user's store in numbers, from the tallies (engine/store/postgres/tallies.py) and two more reads."""

from __future__ import annotations

from typing import Any

from ...models import KINDS, Stats
from ..types import Tallies
from .migrations import SCHEMA_VERSION


def collect(con: Any, counts: Tallies, *, where: str, model: str, embedding_ready: bool,
            notes: list[str]) -> Stats:
    """The store in numbers from `counts` (tallies.read) and two more reads."""
    by_kind = {k: 0 for k in KINDS}
    memories = activity = archived = 0
    for t in counts.memories:
        if t.archived:
            archived += t.n
        elif t.activity:
            activity += t.n
        else:
            memories += t.n
            by_kind[t.kind] = by_kind.get(t.kind, 0) + t.n
    conflicts = con.execute(
        "SELECT count(*) FROM memories a JOIN memories b ON b.user_id = a.user_id AND b.uid = a.conflict_with "
        "WHERE a.conflict_with IS NOT NULL AND (a.uid < b.uid OR b.conflict_with IS DISTINCT FROM a.uid)").fetchone()[0]
    space = con.execute("SELECT model, dimension FROM embedding_space").fetchone()
    return Stats(
        store=where, schema_version=SCHEMA_VERSION, memories=memories, activity=activity, by_kind=by_kind,
        archived=archived, conflicts=conflicts, documents=counts.tally("d:ready"),
        documents_failed=counts.tally("d:failed"), chunks=counts.chunk_count(), nodes=counts.tally("nodes"),
        edges=counts.tally("edges"), pending_embeddings=counts.unembedded(),
        pending_extraction=counts.pending_extraction(), pending_rollup=counts.waiting()[0],
        embedding_model=space[0] if space else model, embedding_dimension=space[1] if space else None,
        embedding_ready=embedding_ready, notes=notes,
    )
