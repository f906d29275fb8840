"""The store in numbers: counts by kind, what waits to be embedded, extracted or rolled up.

The counts come from `tallies` (migrations m005 and m007), kept by triggers on every insert, delete and change of a
counted flag, so `stats` costs the same at any size; only the chunks of documents being ingested or given
up, and contradiction flags, are counted from their (partial) index.
"""

from __future__ import annotations

from ..context import Context
from ..db import Connection
from ..migrations import SCHEMA_VERSION
from ..models import KINDS, Stats
from .tallies import chunk_tally, memory_tallies, tally


def collect(ctx: Context, *, pending_extraction: int, embedding_ready: bool, notes: list[str]) -> Stats:
    con = ctx.con
    with ctx.store.read():
        return _collect(ctx, con, pending_extraction, embedding_ready, notes)


def _collect(ctx: Context, con: Connection, pending_extraction: int, embedding_ready: bool,
             notes: list[str]) -> Stats:
    by_kind = {k: 0 for k in KINDS}
    memories = activity = archived = pending_rollup = 0
    for t in memory_tallies(con):
        if t.archived:
            archived += t.n
            continue
        if t.activity:
            activity += t.n
        else:
            memories += t.n
            by_kind[t.kind] = by_kind.get(t.kind, 0) + t.n
        if t.kind == "episodic" and not t.processed:
            pending_rollup += t.n
    one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
    space = con.execute("SELECT model, dimension FROM embedding_space").fetchone()
    return Stats(
        store=str(ctx.store.path),
        schema_version=SCHEMA_VERSION,
        memories=memories,
        activity=activity,
        by_kind=by_kind,
        archived=archived,
        # pairs, as `conflicts()` lists them: both facts of a pair carry the flag (by the flagged rows' index)
        conflicts=one("SELECT count(*) FROM memories a JOIN memories b ON b.uid = a.conflict_with "
                      "WHERE a.conflict_with IS NOT NULL AND (a.uid < b.uid OR b.conflict_with IS NOT a.uid)"),
        documents=tally(con, "d:ready"),
        documents_failed=tally(con, "d:failed"),
        chunks=chunk_tally(con),
        nodes=tally(con, "nodes"),
        edges=tally(con, "edges"),
        pending_embeddings=ctx.space.pending(con),
        pending_extraction=pending_extraction,
        pending_rollup=pending_rollup,
        embedding_model=space[0] if space else (ctx.settings.embedding_model),
        embedding_dimension=space[1] if space else None,
        embedding_ready=embedding_ready,
        notes=notes,
    )
