"""Turning a question into index queries: FTS5 match expressions and the lexical candidate search."""

from __future__ import annotations

import re

from . import ranking
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


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """SQLite's big-endian varint (as FTS5 writes its records)."""
    v = 0
    for i in range(9):
        b = buf[pos + i]
        if i == 8:
            return (v << 8) | b, pos + 9
        v = (v << 7) | (b & 0x7F)
        if not b & 0x80:
            return v, pos + i + 1
    return v, pos + 9  # pragma: no cover


def indexed_rows(con: Connection, fts: str) -> int:
    """How many rows an FTS5 table indexes, read from its averages record (O(1)), else counted."""
    row = con.execute(f"SELECT block FROM {fts}_data WHERE id = 1").fetchone()
    if row is not None and row[0]:
        try:
            return _varint(bytes(row[0]), 0)[0]
        except IndexError:
            pass
    return con.execute(f"SELECT count(*) FROM {fts}").fetchone()[0]


def idf_sum(con: Connection, fts: str, query: str) -> float:
    """The sum of FTS5's IDF over the query's terms in one table: the BM25 a row of average length holding
    each term once would score, so BM25 / idf_sum is an absolute measure of lexical match."""
    ts = terms(query)
    if not ts:
        return 0.0
    n = indexed_rows(con, fts)
    total = 0.0
    for t in ts:
        df = con.execute(f"SELECT count(*) FROM {fts} WHERE {fts} MATCH ?", ('"' + t.replace('"', '""') + '"',)
                         ).fetchone()[0]
        total += ranking.bm25_idf(n, df)
    return total


# Two episodic memories are turns of one conversation when stored one after the other in the same project
# within this many seconds of each other (by event time).
CONTEXT_SECONDS = 6 * 3600


def neighbours(con: Connection, ids: list[int], f: Filter, reach: int = 2) -> dict[int, dict[int, int]]:
    """For episodic memories among `ids`: {id: {offset: neighbour id}} for the memories stored just before
    and after (offsets -reach..reach) in the same project and within CONTEXT_SECONDS (turns of one talk).
    Neighbours must pass the filter too."""
    if not ids or (f.kinds is not None and "episodic" not in f.kinds):
        return {}
    where, args = _filter_sql(
        f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col=None, archived_col="m.archived"
    )
    cond = "".join(" AND " + w for w in where)
    want = sorted({i + d for i in ids for d in range(-reach, reach + 1)})
    info: dict[int, tuple] = {}
    for p in range(0, len(want), 500):
        part = want[p : p + 500]
        for r in con.execute(
            "SELECT m.id, m.project, coalesce(m.event_at, m.created_at), m.conversation_id FROM memories m "
            f"WHERE m.kind = 'episodic' AND m.id IN ({','.join('?' * len(part))}){cond}", [*part, *args]
        ).fetchall():
            info[r[0]] = r[1:]
    out: dict[int, dict[int, int]] = {}
    for i in ids:
        me = info.get(i)
        if me is None:
            continue
        near = {}
        for d in range(1, reach + 1):
            for off in (-d, d):
                other = info.get(i + off)
                if other is None or other[0] != me[0] or abs((other[1] or 0) - (me[1] or 0)) > CONTEXT_SECONDS:
                    continue
                if me[2] is not None and other[2] is not None and me[2] != other[2]:
                    continue
                near[off] = i + off
        if near:
            out[i] = near
    return out
