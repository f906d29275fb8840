"""The store in numbers: counts by kind, what waits to be embedded, extracted or rolled up."""

from __future__ import annotations

from ..context import Context
from ..migrations import SCHEMA_VERSION
from ..models import KINDS, Stats


def collect(ctx: Context, *, pending_extraction: int, embedding_ready: bool, notes: list[str]) -> Stats:
    con = ctx.con
    by_kind = {k: 0 for k in KINDS}
    for kind, count in con.execute(
        "SELECT kind, count(*) FROM memories WHERE archived = 0 AND source IS NOT 'activity' GROUP BY kind "
        "ORDER BY kind"
    ).fetchall():
        by_kind[kind] = count
    one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
    space = con.execute("SELECT model, dimension FROM embedding_space").fetchone()
    return Stats(
        store=str(ctx.store.path),
        schema_version=SCHEMA_VERSION,
        memories=one("SELECT count(*) FROM memories WHERE archived = 0 AND source IS NOT 'activity'"),
        activity=one("SELECT count(*) FROM memories WHERE source = 'activity' AND archived = 0"),
        by_kind=by_kind,
        archived=one("SELECT count(*) FROM memories WHERE archived = 1"),
        conflicts=one("SELECT count(*) FROM memories WHERE conflict_with IS NOT NULL"),
        documents=one("SELECT count(*) FROM documents WHERE status = 'ready'"),
        documents_failed=one("SELECT count(*) FROM documents WHERE status = 'failed'"),
        chunks=one("SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id AND d.status='ready'"),
        nodes=one("SELECT count(*) FROM nodes"),
        edges=one("SELECT count(*) FROM edges"),
        pending_embeddings=ctx.space.pending(con),
        pending_extraction=pending_extraction,
        pending_rollup=one(
            "SELECT count(*) FROM memories WHERE kind = 'episodic' AND processed = 0 AND archived = 0"
        ),
        embedding_model=space[0] if space else (ctx.settings.embedding_model),
        embedding_dimension=space[1] if space else None,
        embedding_ready=embedding_ready,
        notes=notes,
    )
