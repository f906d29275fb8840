"""Turning a question into index queries: FTS5 match expressions and the lexical candidate search."""

from __future__ import annotations

import json

from ... import ranking
from ...terms import terms
from .. import lexical
from ..types import ACTIVITY_SOURCE, Filter, LexicalPlan
from .db import Connection, Store, marks, padded

# Memory rows by id: the ids as a JSON array, each looked up by its row id (CROSS JOIN keeps json_each the outer
# loop). With `id IN (?, ...)` the planner weighed the list against its estimate of the table's rows (from
# statistics sampled on ANALYSIS_LIMIT rows: ~2,000 at 10k rows) and from 256-512 ids on read the whole
# table instead: the turns around 100 candidates took 2-3 ms a recall at 10k rows, 0.4 ms looked up.
BY_ID = "json_each(?) AS j CROSS JOIN memories m ON m.id = j.value"


def id_list(ids: list[int]) -> str:
    """The ids to bind to BY_ID's parameter."""
    return json.dumps(ids)


def addressed_names(con: Connection, query: str, f: Filter,
                    cache: DocFreqs | None = None) -> dict[str, tuple[str, str | None]]:
    """{name in the question (lowercased): (the speaker who uses it, the speaker so named or None)}: the rule
    of `lexical.addressed_names`, reading the turns through FTS5."""
    where, args = _filter_sql(f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col=None,
                              archived_col="m.archived", source_col="m.source")

    def naming(low: str, limit: int) -> list[tuple[int, str | None, str]]:
        return con.execute(
            "SELECT m.id, m.project, m.text FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
            "WHERE memories_fts MATCH ? AND m.kind = 'episodic'" + "".join(" AND " + w for w in where)
            + " LIMIT ?", ['"' + low.replace('"', '""') + '"', *args, limit]).fetchall()

    def heads(ids: list[int]) -> list[tuple[int, str | None, str]]:
        return con.execute(f"SELECT id, project, substr(text, 1, 64) FROM memories WHERE kind = 'episodic' AND id IN "
                           f"({marks(ids)})", padded(ids)).fetchall()

    return lexical.addressed_names(con, query, f, cache, naming, heads)


def match_expression(query: str | list[str]) -> str | None:
    """An FTS5 MATCH string: any of the terms (BM25 rewards documents with more of them). Takes the query or
    the terms to search (see `LexicalPlan`)."""
    ts = terms(query) if isinstance(query, str) else query
    if not ts:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in ts)


def _filter_sql(f: Filter, alias: str, *, time_col: str, kind_col: str | None, archived_col: str | None,
                source_col: str | None = None):
    where: list[str] = []
    args: list = []
    if source_col and not f.activity:
        where.append(f"{source_col} IS NOT '{ACTIVITY_SOURCE}'")
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


# Lexical search reads FTS5's best matches by BM25 alone (its own top-k: no row of the content tables is read)
# and then filters those: the filters need the memory's or the chunk's row, and reading the row of every
# match costs a page each. A common term at 1M items matches tens of thousands of rows: filtering them all
# took 0.3-0.5 s a table with the pages not yet in the cache (the first recall after opening), against
# 30-60 ms for FTS5's top 200 and the filter of those. When the filter keeps too few of them, a larger
# share is read once (LEXICAL_GROWTH times as many), and then every match is filtered as before.
LEXICAL_FIRST = 200
LEXICAL_GROWTH = 16


def _lexical(con: Connection, fts: str, expr: str, limit: int, kind: str, f: Filter, everything: str,
             args: list) -> list[tuple[int, float]]:
    """[(row id, bm25)] best first (ties by row id) of the matches of `expr` passing the filter: from FTS5's
    best matches, filtered (`passing`); or by `everything` (the filtered query over every match) when
    those do not hold `limit` rows that pass."""
    take = max(LEXICAL_FIRST, 4 * limit)
    for _ in range(2):
        rows = con.execute(f"SELECT rowid, rank FROM {fts} WHERE {fts} MATCH ? ORDER BY rank LIMIT ?",
                           (expr, take)).fetchall()
        every = len(rows) < take  # every match was read
        ok = {i for _, i in passing(con, [(kind, r[0]) for r in rows], f)}
        # a match not read ranks at or after the last one read: only those strictly before it are sure
        last = rows[-1][1] if rows else 0.0
        hits = sorted((r, i) for i, r in rows if i in ok and (every or r < last))
        if every or len(hits) >= limit:
            return [(i, -r) for r, i in hits[:limit]]
        take *= LEXICAL_GROWTH
    return [(r[0], -r[1]) for r in con.execute(everything, [expr, *args, limit]).fetchall()]


def lexical_memories(con: Connection, query: str | list[str], limit: int, f: Filter,
                     plan: LexicalPlan | None = None) -> list[tuple[int, float]]:
    """[(memory row id, bm25)] best first (`query`: the question, or the terms to search). FTS5's bm25() counts
    for itself: a `plan`'s counts are not needed."""
    expr = match_expression(query)
    if expr is None or limit <= 0:
        return []
    where, args = _filter_sql(
        f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col="m.kind", archived_col="m.archived",
        source_col="m.source",
    )
    sql = (
        "SELECT m.id, bm25(memories_fts) AS r FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
        "WHERE memories_fts MATCH ?" + "".join(" AND " + w for w in where) + " ORDER BY r, m.id LIMIT ?"
    )
    return _lexical(con, "memories_fts", expr, limit, "m", f, sql, args)


def count_memories(con: Connection, query: str | list[str], f: Filter) -> int:
    """How many memories passing the filter hold any of the query's words (what a search by words matches)."""
    expr = match_expression(query)
    if expr is None:
        return 0
    where, args = _filter_sql(
        f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col="m.kind", archived_col="m.archived",
        source_col="m.source",
    )
    return int(con.execute(
        "SELECT count(*) FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid WHERE memories_fts MATCH ?"
        + "".join(" AND " + w for w in where), [expr, *args]).fetchone()[0])


def lexical_chunks(con: Connection, query: str | list[str], limit: int, f: Filter,
                   plan: LexicalPlan | None = None) -> list[tuple[int, float]]:
    """[(chunk row id, bm25)] best first (`query`: the question, or the terms to search); as lexical_memories."""
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
    return _lexical(con, "chunks_fts", expr, limit, "c", f, sql, args)


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


def _averages(con: Connection, fts: str) -> tuple[int, int] | None:
    """(rows, tokens) an FTS5 table indexes, from its averages record (O(1)); None when it holds none yet."""
    row = con.execute(f"SELECT block FROM {fts}_data WHERE id = 1").fetchone()
    if row is not None and row[0]:
        block = bytes(row[0])
        try:
            rows, pos = _varint(block, 0)
            return rows, _varint(block, pos)[0]
        except IndexError:
            pass
    return None


def indexed_rows(con: Connection, fts: str) -> int:
    """How many rows an FTS5 table indexes, read from its averages record (O(1)), else counted."""
    averages = _averages(con, fts)
    if averages is not None:
        return averages[0]
    return con.execute(f"SELECT count(*) FROM {fts}").fetchone()[0]


def _doc_freq(con: Connection, fts: str, term: str) -> int:
    return con.execute(f"SELECT count(*) FROM {fts} WHERE {fts} MATCH ?", ('"' + term.replace('"', '""') + '"',)
                       ).fetchone()[0]


def idf_sum(con: Connection, fts: str, query: str) -> float:
    """The sum of FTS5's IDF over the query's terms in one table: the BM25 a row of average length holding
    each term once would score, so BM25 / idf_sum is an absolute measure of lexical match."""
    ts = terms(query)
    if not ts:
        return 0.0
    n = indexed_rows(con, fts)
    return sum(ranking.bm25_idf(n, _doc_freq(con, fts, t)) for t in ts)


def _scope_sql(fts: str, projects: frozenset) -> tuple[str, str, list]:
    """(join, where, args) restricting rows of `fts` to the projects (None inside = no project)."""
    if fts == "memories_fts":
        join, col = "JOIN memories s ON s.id = {fts}.rowid", "s.project"
    else:
        join, col = "JOIN chunks c ON c.id = {fts}.rowid JOIN documents s ON s.id = c.document_id", "s.project"
    named = sorted(p for p in projects if p is not None)
    parts = [f"{col} IN ({','.join('?' * len(named))})"] if named else []
    if None in projects:
        parts.append(f"{col} IS NULL")
    return join.format(fts=fts), "(" + (" OR ".join(parts) or "0") + ")", named


class DocFreqs(lexical.DocFreqs):
    """The cache of `lexical.DocFreqs`, counting with FTS5."""

    def indexed_rows(self, con: Connection, fts: str) -> int:
        return indexed_rows(con, fts)

    def count(self, con: Connection, fts: str, term: str) -> int:
        return _doc_freq(con, fts, term)

    def count_in(self, con: Connection, fts: str, term: str, projects: frozenset) -> int:
        join, where, args = _scope_sql(fts, projects)
        return con.execute(f"SELECT count(*) FROM {fts} {join} WHERE {fts} MATCH ? AND {where}",
                           ('"' + term.replace('"', '""') + '"', *args)).fetchone()[0]

    def count_rows(self, con: Connection, fts: str, projects: frozenset) -> int:
        _, where, args = _scope_sql(fts, projects)
        if fts == "memories_fts":
            return con.execute(f"SELECT count(*) FROM memories s WHERE {where}", args).fetchone()[0]
        return con.execute(f"SELECT count(*) FROM chunks c JOIN documents s ON s.id = c.document_id WHERE {where}",
                           args).fetchone()[0]


def doc_freqs(store: Store) -> DocFreqs:
    """An empty cache of the document frequencies of `store`'s full-text indexes."""
    return DocFreqs()


def plan(con: Connection, fts: str, query: str, cache: DocFreqs | None = None,
         projects: set | frozenset | None = None, budget: int | None = None,
         drop: set[str] | frozenset[str] | tuple = ()) -> LexicalPlan:
    """The query's terms to search in `fts` and their IDF sum (`lexical.plan`)."""
    return lexical.plan(con, fts, query, cache if cache is not None else DocFreqs(), projects, budget, drop)


def term_scores(con: Connection, fts: str, terms: list[str], ids: list[int], dfs: dict[str, int]) -> dict[int, float]:
    """{row id: bm25 of `terms` in the row} for the rows of `ids` holding any of them, as FTS5's bm25() scores
    it (positive) but with the document frequencies given: from each row's count of each term (highlight()
    marks them) and its length (the table's docsize record). No term's whole list of rows is read, so the
    cost is that of the rows asked about, whatever the table's size (bm25() itself counts every row a term
    is in, for its IDF)."""
    averages = _averages(con, fts)
    ids = sorted(set(ids))
    if not terms or not ids or averages is None or not averages[0]:
        return {}
    n, tokens = averages
    mean = tokens / n or 1.0
    in_ids, bound = marks(ids), padded(ids)
    tfs: dict[int, dict[str, int]] = {}
    for t in terms:
        for rid, marked, text in con.execute(
                f"SELECT rowid, highlight({fts}, 0, char(1), char(2)), text FROM {fts} WHERE {fts} MATCH ? "
                f"AND rowid IN ({in_ids})", ('"' + t.replace('"', '""') + '"', *bound)):
            # the marks highlight() added (a text may hold the character itself)
            tfs.setdefault(rid, {})[t] = (marked or "").count("\x01") - (text or "").count("\x01")
    if not tfs:
        return {}
    lengths = {rid: _varint(bytes(sz), 0)[0] for rid, sz in con.execute(
        f"SELECT id, sz FROM {fts}_docsize WHERE id IN ({marks(tfs)})", padded(tfs)) if sz}
    out = {}
    for rid, counts in tfs.items():
        out[rid] = sum(lexical.bm25(ranking.bm25_idf(n, dfs.get(t, 0)), tf, lengths.get(rid, mean), mean)
                       for t, tf in counts.items() if tf)
    return {rid: s for rid, s in out.items() if s > 0}


def passing(con: Connection, keys: list[tuple[str, int]], f: Filter) -> list[tuple[str, int]]:
    """The keys ("m"/"c", row id) whose memory or chunk passes the filter, in the given order."""
    ok: set[tuple[str, int]] = set()
    mids = [i for t, i in keys if t == "m"]
    cids = [i for t, i in keys if t == "c"] if f.kinds is None or "chunk" in f.kinds else []
    where, args = _filter_sql(
        f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col="m.kind", archived_col="m.archived",
        source_col="m.source",
    )
    if mids:
        ok.update(("m", r[0]) for r in con.execute(
            "SELECT m.id FROM " + BY_ID + "".join((" WHERE " if i == 0 else " AND ") + w for i, w in enumerate(where)),
            [id_list(mids), *args]).fetchall())
    g = Filter(projects=f.projects, since=f.since, until=f.until, include_archived=True)
    where, args = _filter_sql(g, "d", time_col="d.created_at", kind_col=None, archived_col=None)
    for p in range(0, len(cids), 500):
        part = cids[p : p + 500]
        ok.update(("c", r[0]) for r in con.execute(
            "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id AND d.status = 'ready' "
            f"WHERE c.id IN ({marks(part)})" + "".join(" AND " + w for w in where),
            [*padded(part), *args]).fetchall())
    return [key for key in keys if key in ok]


def activity_events(con: Connection, f: Filter, cue, limit: int) -> list[tuple[int, float]]:
    """[(memory row id, event time)] of the app's own events passing the filter, newest first; inside the
    cue's window when the question names a time (a timecues.TimeCue or None)."""
    g = Filter(projects=f.projects, kinds=None, include_archived=f.include_archived, since=f.since,
               until=f.until, activity=True)
    where, args = _filter_sql(g, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col=None,
                              archived_col="m.archived")
    where.append("m.source = ?")
    args.append(ACTIVITY_SOURCE)
    if cue is not None and cue.window:
        where.append("coalesce(m.event_at, m.created_at) >= ? AND coalesce(m.event_at, m.created_at) < ?")
        args += [cue.since, cue.until]
    return [(r[0], r[1]) for r in con.execute(
        "SELECT m.id, coalesce(m.event_at, m.created_at) AS t FROM memories m WHERE " + " AND ".join(where)
        + " ORDER BY t DESC, m.id DESC LIMIT ?", [*args, limit]).fetchall()]


# A question naming a day (or a few): that many memories of then, at most, are read for their cosine.
WINDOW_READ = 500


def in_window(con: Connection, f: Filter, since: float, until: float, limit: int = WINDOW_READ) -> list[int]:
    """Row ids of the memories (not the app's own events) passing the filter whose event time is in
    [since, until), at most `limit`, oldest first."""
    where, args = _filter_sql(f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col="m.kind",
                              archived_col="m.archived", source_col="m.source")
    where.append("coalesce(m.event_at, m.created_at) >= ? AND coalesce(m.event_at, m.created_at) < ?")
    return [r[0] for r in con.execute(
        "SELECT m.id FROM memories m WHERE " + " AND ".join(where)
        + " ORDER BY coalesce(m.event_at, m.created_at), m.id LIMIT ?", [*args, since, until, limit]).fetchall()]


def neighbours(con: Connection, ids: list[int], f: Filter, reach: int = 2) -> dict[int, dict[int, int]]:
    """For episodic memories among `ids`: {id: {offset: neighbour id}} for the turns of one talk around them
    (`lexical.near_turns`). Neighbours must pass the filter too. The candidates' own rows are read first, then
    the rows around those that are turns: a candidate that is not one has no turns around it to look up."""
    if not ids or (f.kinds is not None and "episodic" not in f.kinds):
        return {}
    where, args = _filter_sql(
        f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col=None, archived_col="m.archived",
        source_col="m.source",
    )
    sql = ("SELECT m.id, m.project, coalesce(m.event_at, m.created_at), m.conversation_id FROM " + BY_ID
           + " WHERE m.kind = 'episodic'" + "".join(" AND " + w for w in where))
    asked = sorted(set(ids))
    info: dict[int, tuple] = {r[0]: r[1:] for r in con.execute(sql, [id_list(asked), *args]).fetchall()}
    around = sorted(set(lexical.near_ids(list(info), reach)).difference(asked))
    if around:
        info.update((r[0], r[1:]) for r in con.execute(sql, [id_list(around), *args]).fetchall())
    return lexical.near_turns(ids, info, reach)
