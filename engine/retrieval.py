"""Turning a question into index queries: FTS5 match expressions and the lexical candidate search."""

from __future__ import annotations

import re

from .db import Connection
from .vectors import Filter

_WORD = re.compile(r"\w+", re.UNICODE)

# Question and function words: matching them says nothing about relevance.
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her
    here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not
    now of off on once only or other our ours ourselves out over own same she should so some such than that
    the their theirs them themselves then there these they this those through to too under until up very was
    we were what when where which while who whom why will with would you your yours yourself yourselves
    did does tell know remember ever anything something thing things much many kind sort yes
    """.split()
)


def terms(query: str) -> list[str]:
    """The query's meaningful words, lowercased, in order, without duplicates."""
    words = [w.lower() for w in _WORD.findall(query)]
    kept = [w for w in words if w not in STOPWORDS and not (len(w) == 1 and not w.isdigit())]
    out: list[str] = []
    for w in kept or words:
        if w not in out:
            out.append(w)
    return out


def match_expression(query: str) -> str | None:
    """An FTS5 MATCH string: any of the terms (BM25 rewards documents with more of them)."""
    ts = terms(query)
    if not ts:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in ts)


def _filter_sql(f: Filter, alias: str, *, time_col: str, kind_col: str | None, archived_col: str | None):
    where: list[str] = []
    args: list = []
    if f.projects is not None:
        named = [p for p in f.projects if p is not None]
        parts = []
        if named:
            parts.append(f"{alias}.project IN ({','.join('?' * len(named))})")
            args.extend(named)
        if None in f.projects:
            parts.append(f"{alias}.project IS NULL")
        where.append("(" + " OR ".join(parts) + ")" if parts else "0")
    if f.kinds is not None and kind_col:
        where.append(f"{kind_col} IN ({','.join('?' * len(f.kinds))})")
        args.extend(sorted(f.kinds))
    if not f.include_archived and archived_col:
        where.append(f"{archived_col} = 0")
    if f.since is not None:
        where.append(f"{time_col} >= ?")
        args.append(f.since)
    if f.until is not None:
        where.append(f"{time_col} <= ?")
        args.append(f.until)
    return where, args


def lexical_memories(con: Connection, query: str, limit: int, f: Filter) -> list[tuple[int, float]]:
    """[(memory row id, bm25)] best first."""
    expr = match_expression(query)
    if expr is None or limit <= 0:
        return []
    where, args = _filter_sql(
        f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col="m.kind", archived_col="m.archived"
    )
    sql = (
        "SELECT m.id, bm25(memories_fts) AS r FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
        "WHERE memories_fts MATCH ?" + "".join(" AND " + w for w in where) + " ORDER BY r, m.id LIMIT ?"
    )
    return [(r[0], -r[1]) for r in con.execute(sql, [expr, *args, limit]).fetchall()]


def lexical_chunks(con: Connection, query: str, limit: int, f: Filter) -> list[tuple[int, float]]:
    """[(chunk row id, bm25)] best first."""
    expr = match_expression(query)
    if expr is None or limit <= 0:
        return []
    if f.kinds is not None and "chunk" not in f.kinds:
        return []
    g = Filter(projects=f.projects, since=f.since, until=f.until, include_archived=True)
    where, args = _filter_sql(g, "d", time_col="d.created_at", kind_col=None, archived_col=None)
    sql = (
        "SELECT c.id, bm25(chunks_fts) AS r FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid "
        "JOIN documents d ON d.id = c.document_id AND d.status = 'ready' WHERE chunks_fts MATCH ?"
        + "".join(" AND " + w for w in where)
        + " ORDER BY r, c.id LIMIT ?"
    )
    return [(r[0], -r[1]) for r in con.execute(sql, [expr, *args, limit]).fetchall()]
