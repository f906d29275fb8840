"""The lexical side of recall on PostgreSQL: full-text search (`tsv`, a generated tsvector with the `english`
configuration, and its GIN index) in the role FTS5 plays on SQLite, ranked by the same BM25.

A search finds the rows whose tsvector matches any of the query's terms (the GIN index), takes the best
LEXICAL_FIRST of them by `ts_rank` normalised by length (the better of PostgreSQL's two rankings for an OR of
a question's words: docs/server.md), and scores those
by BM25 exactly as FTS5's bm25() does (k1 = 1.2, b = 0.75), from each row's term counts and length (read from
its tsvector) and each term's document frequency (counted through the GIN index, cached per process like
SQLite's). So the scores mean what they mean on SQLite: BM25 / the plan's IDF sum is the same absolute measure
of a lexical match, and the relevance floor holds the same way. PostgreSQL's stemmer and stop words (english)
differ a little from FTS5's porter tokenizer: a word both count the same way scores the same.
"""

from __future__ import annotations

import re
import time
from typing import Any

from ... import ranking
from ...terms import terms
from .. import lexical
from ..types import ACTIVITY_SOURCE, Filter, LexicalPlan
from .values import bigints

TEXT_SEARCH = "english"
_TABLE = {"memories_fts": "memories", "chunks_fts": "chunks"}
LEXICAL_FIRST = 200


# The functions that find the user's rows holding a tsquery's words through the GIN index (migration m003):
# a condition `tsv @@ q` on the table itself is checked after the row-level security policy's (`@@` is not
# LEAKPROOF), on every row of the user, so the index goes unused. The rows they name are read under the policy.
_WITH_WORDS = {"memories_fts": "memories_with_words", "chunks_fts": "chunks_with_words"}


def _holding(alias: str, fts: str, q: str) -> str:
    """The condition: row `alias` of the table of `fts` holds the words of the tsquery `q` (through the index)."""
    return f"{alias}.id = ANY(ARRAY(SELECT {_WITH_WORDS[fts]}({q})))"


def _query(ts: list[str]) -> tuple[str, list[str]]:
    """A tsquery matching any of the terms, and its values: `(plainto_tsquery(…) || plainto_tsquery(…))`."""
    return "(" + " || ".join([f"plainto_tsquery('{TEXT_SEARCH}', %s)"] * len(ts)) + ")", list(ts)


def _filter_sql(f: Filter, alias: str, *, time_col: str, kind_col: str | None, archived_col: str | None,
                source_col: str | None = None) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    if source_col and not f.activity:
        where.append(f"{source_col} != '{ACTIVITY_SOURCE}'")
    if f.projects is not None:
        named = [p for p in f.projects if p is not None]
        cond = f"{alias}.project = ANY(%s)"
        args.append(named)
        if None in f.projects:
            cond = f"({cond} OR {alias}.project IS NULL)"
        where.append(cond)
    if f.kinds is not None and kind_col:
        where.append(f"{kind_col} = ANY(%s)")
        args.append(sorted(f.kinds))
    if not f.include_archived and archived_col:
        where.append(f"NOT {archived_col}")
    if f.since is not None:
        where.append(f"{time_col} >= %s")
        args.append(f.since)
    if f.until is not None:
        where.append(f"{time_col} <= %s")
        args.append(f.until)
    return where, args


def indexed_rows(con: Any, fts: str) -> int:
    """Rows of the table (memories or chunks), from the counts kept by triggers."""
    prefix = "m:" if fts == "memories_fts" else "c:"
    row = con.execute("SELECT coalesce(sum(n), 0) FROM tallies WHERE name LIKE %s", (prefix + "%",)).fetchone()
    return int(row[0])


def _doc_freq(con: Any, fts: str, term: str) -> int:
    return _doc_freqs(con, fts, [term])[term]


def _doc_freqs(con: Any, fts: str, ts: list[str]) -> dict[str, int]:
    """{term: rows of the table holding it}, every term counted in one statement (one pass over the rows
    holding any of them, found through the GIN index)."""
    ts = list(dict.fromkeys(ts))
    if not ts:
        return {}
    q, args = _query(ts)
    one = f"plainto_tsquery('{TEXT_SEARCH}', %s)"
    counts = ", ".join(f"count(*) FILTER (WHERE tsv @@ {one})" for _ in ts)
    row = con.execute(f"SELECT {counts} FROM {_TABLE[fts]} t WHERE {_holding('t', fts, q)}", [*ts, *args]).fetchone()
    return {t: int(c) for t, c in zip(ts, row, strict=True)}


def _scope(fts: str, projects: frozenset) -> tuple[str, str, list[Any]]:
    named = sorted(p for p in projects if p is not None)
    if fts == "memories_fts":
        frm, col = "memories s", "s.project"
    else:
        frm, col = "chunks t JOIN documents s ON s.user_id = t.user_id AND s.id = t.document_id", "s.project"
    cond = f"({col} = ANY(%s)" + (f" OR {col} IS NULL)" if None in projects else ")")
    return frm, cond, [named]


class DocFreqs(lexical.DocFreqs):
    """The cache of `lexical.DocFreqs`, counting through the GIN index."""

    def indexed_rows(self, con: Any, fts: str) -> int:
        return indexed_rows(con, fts)

    def count(self, con: Any, fts: str, term: str) -> int:
        return _doc_freq(con, fts, term)

    def count_many(self, con: Any, fts: str, terms: list[str]) -> dict[str, int]:
        return _doc_freqs(con, fts, terms)

    def count_in(self, con: Any, fts: str, term: str, projects: frozenset) -> int:
        frm, cond, args = _scope(fts, projects)
        alias = "s" if fts == "memories_fts" else "t"
        q, qargs = _query([term])
        return int(con.execute(f"SELECT count(*) FROM {frm} WHERE {_holding(alias, fts, q)} AND {cond}",
                               [*qargs, *args]).fetchone()[0])

    def count_rows(self, con: Any, fts: str, projects: frozenset) -> int:
        frm, cond, args = _scope(fts, projects)
        return int(con.execute(f"SELECT count(*) FROM {frm} WHERE {cond}", args).fetchone()[0])


def doc_freqs(store: Any) -> DocFreqs:
    """An empty cache of the document frequencies of the store's full-text indexes."""
    return DocFreqs()


def plan(con: Any, fts: str, query: str, cache: DocFreqs | None = None, projects: set | frozenset | None = None,
         budget: int | None = None, drop: set[str] | frozenset[str] | tuple = ()) -> LexicalPlan:
    """The query's terms to search in `fts` and their IDF sum (`lexical.plan`)."""
    return lexical.plan(con, fts, query, cache if cache is not None else DocFreqs(), projects, budget, drop)


# term -> the lexemes PostgreSQL indexes it as: fixed by the text search configuration, the same for every user
_stem_cache: dict[str, list[str]] = {}


def _stems(con: Any, ts: list[str]) -> dict[str, list[str]]:
    """{term: the lexemes PostgreSQL indexes it as} (a stop word has none); the terms not seen before are
    asked in one statement."""
    new = [t for t in dict.fromkeys(ts) if t not in _stem_cache]
    if new:
        if len(_stem_cache) > 50_000:
            _stem_cache.clear()
        for t, text in con.execute(f"SELECT t, plainto_tsquery('{TEXT_SEARCH}', t)::text "
                                   "FROM unnest(%s::text[]) AS t", (new,)).fetchall():
            _stem_cache[str(t)] = [s.replace("''", "'").replace("\\\\", "\\")
                                   for s in re.findall(r"'((?:[^']|'')*)'", text or "")]
    return {t: _stem_cache[t] for t in ts}


def _terms_of(alias: str) -> str:
    """What BM25 needs of a row, computed by PostgreSQL from its tsvector: its length in tokens (its count of
    positions), and the searched lexemes it holds (%s twice: their array) with their occurrences, as two arrays
    in the same order (NULL: none), in one pass over the tsvector: a join giving `TERM_COLUMNS`. (Reading every
    row's whole tsvector as text and parsing it here took over half of a recall's time in the server's
    process; three passes, one for each, cost PostgreSQL half as much again as one.)"""
    return ("CROSS JOIN LATERAL (SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 0)), 0) AS length, "
            "array_agg(u.lexeme) FILTER (WHERE u.lexeme = ANY(%s::text[])) AS lexemes, "
            "array_agg(coalesce(array_length(u.positions, 1), 0)) FILTER (WHERE u.lexeme = ANY(%s::text[])) "
            f"AS occurrences FROM unnest({alias}.tsv) u) w")


TERM_COLUMNS = "w.length, w.lexemes, w.occurrences"


def _lexemes(stems: dict[str, list[str]]) -> list[str]:
    return sorted({s for group in stems.values() for s in group})


def _average_length(con: Any, fts: str) -> float:
    """The mean length of a row in tokens, as `_terms_of` measures a row: its count of positions (`length(tsv)`
    is its count of distinct lexemes, shorter: with it every row looked longer than the mean)."""
    row = con.execute(f"SELECT avg((SELECT sum(coalesce(array_length(u.positions, 1), 1)) FROM unnest(s.tsv) u)) "
                      f"FROM (SELECT tsv FROM {_TABLE[fts]} LIMIT 10000) s").fetchone()
    return float(row[0] or 1.0)


# (database, user, table, rows / 100) -> (average length, when): each user's own rows (row-level security)
_averages: dict[tuple[str, str, str, int], tuple[float, float]] = {}


def _sizes(con: Any, fts: str, ts: list[str] | tuple = ()) -> tuple[int, tuple[str, str], dict[str, int]]:
    """(rows of the table, from the counts kept by triggers; (database, user) the transaction acts for;
    {term: rows holding it} for the terms `ts`, as `_doc_freqs` counts them), in one statement."""
    prefix = "m:" if fts == "memories_fts" else "c:"
    head = ("(SELECT coalesce(sum(n), 0) FROM tallies WHERE name LIKE %s), current_database(), "
            "current_setting('app.user_id', true)")
    ts = list(dict.fromkeys(ts))
    if not ts:
        row = con.execute(f"SELECT {head}", (prefix + "%",)).fetchone()
        return int(row[0]), (str(row[1]), str(row[2])), {}
    q, args = _query(ts)
    one = f"plainto_tsquery('{TEXT_SEARCH}', %s)"
    counts = ", ".join(f"count(*) FILTER (WHERE tsv @@ {one})" for _ in ts)
    row = con.execute(f"SELECT {head}, {counts} FROM {_TABLE[fts]} t WHERE {_holding('t', fts, q)}",
                      [prefix + "%", *ts, *args]).fetchone()
    return int(row[0]), (str(row[1]), str(row[2])), {t: int(c) for t, c in zip(ts, row[3:], strict=True)}


def _mean_length(con: Any, fts: str, n: int, who: tuple[str, str]) -> float:
    key = (who[0], who[1], fts, n // 100)
    hit = _averages.get(key)
    if hit is not None and time.monotonic() - hit[1] < lexical.DF_MAX_AGE:
        return hit[0]
    mean = _average_length(con, fts)
    _averages[key] = (mean, time.monotonic())
    return mean


def _bm25(con: Any, fts: str, ts: list[str], stems: dict[str, list[str]], rows: list[tuple], dfs: dict[str, int],
          n: int, who: tuple[str, str]) -> dict[int, float]:
    """{row id: BM25 of the terms} for rows given as (id, length, lexemes, their occurrences) (`_terms_of`), as
    FTS5's bm25() scores (`n`, `who`: `_sizes`)."""
    mean = _mean_length(con, fts, n, who) or 1.0
    idfs = [ranking.bm25_idf(n, dfs.get(t, 0)) for t in ts]
    owners: dict[str, list[int]] = {}  # lexeme -> the terms (their places in ts) it is a stem of
    for j, t in enumerate(ts):
        for s in stems[t]:
            owners.setdefault(s, []).append(j)
    out: dict[int, float] = {}
    for rid, length, lexemes, occurrences in rows:
        if not lexemes:
            continue
        tfs: dict[int, int] = {}  # a term's count: its most frequent stem's (only the row's own lexemes are read)
        for s, c in zip(lexemes, occurrences, strict=True):
            for j in owners.get(s, ()):
                if c > tfs.get(j, 0):
                    tfs[j] = c
        if not tfs:
            continue
        size = int(length) or mean
        score = 0.0
        for j in sorted(tfs):  # the terms' order, as FTS5 adds them up
            score += lexical.bm25(idfs[j], tfs[j], size, mean)
        if score > 0:
            out[int(rid)] = score
    return out


def _lexical(con: Any, fts: str, ts: list[str], limit: int, join: str, where: list[str], args: list[Any],
             alias: str, plan: LexicalPlan | None = None) -> list[tuple[int, float]]:
    """[(row id, bm25)] best first of the rows matching any of the terms and passing the filter: the best
    LEXICAL_FIRST (at least 4 × limit) by each term's `ts_rank` (normalised by length) weighted by the
    term's IDF, scored by BM25. `ts_rank` over the whole OR-query weighs a common word like a rare one, and
    its best 200 missed rows BM25 ranks among its best 50. The terms' counts are the `plan`'s when it has
    them (recall's plan counted them, or took them from its cache, a moment before), else counted here."""
    if not ts or limit <= 0:
        return []
    who: tuple[str, str] | None = None
    if plan is not None and plan.rows and all(t in plan.dfs for t in ts):
        n, dfs = plan.rows, plan.dfs
    else:
        n, who, dfs = _sizes(con, fts, ts)
    q, qargs = _query(ts)
    stems = _stems(con, ts)
    lexemes = _lexemes(stems)
    one = f"plainto_tsquery('{TEXT_SEARCH}', %s)"
    order = " + ".join(f"%s * ts_rank({alias}.tsv, {one}, 1)" for _ in ts)
    order_args = [a for t in ts for a in (ranking.bm25_idf(n, dfs[t]), t)]
    found = con.execute(  # the best rows first, then what BM25 needs of those only (and who they are of)
        f"SELECT s.id, {TERM_COLUMNS}, current_database(), current_setting('app.user_id', true) "
        f"FROM (SELECT {alias}.id, {alias}.tsv FROM {_TABLE[fts]} {alias} {join} "
        f"WHERE {_holding(alias, fts, q)}" + "".join(" AND " + w for w in where)
        + f" ORDER BY {order} DESC, {alias}.id LIMIT %s) s {_terms_of('s')}",
        [*qargs, *args, *order_args, max(LEXICAL_FIRST, 4 * limit), lexemes, lexemes]).fetchall()
    if not found:
        return []
    who = who or (str(found[0][4]), str(found[0][5]))
    scored = _bm25(con, fts, ts, stems, [r[:4] for r in found], dfs, n, who)
    return sorted(scored.items(), key=lambda x: (-x[1], x[0]))[:limit]


def lexical_memories(con: Any, query: str | list[str], limit: int, f: Filter,
                     plan: LexicalPlan | None = None) -> list[tuple[int, float]]:
    """[(memory row id, bm25)] best first (`query`: the question, or the terms to search; `plan`: the
    recall's, whose counts of the terms BM25 takes)."""
    ts = terms(query) if isinstance(query, str) else list(query)
    where, args = _filter_sql(f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col="m.kind",
                              archived_col="m.archived", source_col="m.source")
    return _lexical(con, "memories_fts", ts, limit, "", where, args, "m", plan)


def count_memories(con: Any, query: str | list[str], f: Filter) -> int:
    """How many memories passing the filter hold any of the query's words (what a search by words matches)."""
    ts = terms(query) if isinstance(query, str) else list(query)
    if not ts:
        return 0
    where, args = _filter_sql(f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col="m.kind",
                              archived_col="m.archived", source_col="m.source")
    q, qargs = _query(ts)
    return int(con.execute(f"SELECT count(*) FROM memories m WHERE {_holding('m', 'memories_fts', q)}"
                           + "".join(" AND " + w for w in where),
                           [*qargs, *args]).fetchone()[0])


def lexical_chunks(con: Any, query: str | list[str], limit: int, f: Filter,
                   plan: LexicalPlan | None = None) -> list[tuple[int, float]]:
    """[(chunk row id, bm25)] best first (as lexical_memories)."""
    ts = terms(query) if isinstance(query, str) else list(query)
    if f.kinds is not None and "chunk" not in f.kinds:
        return []
    g = Filter(projects=f.projects, since=f.since, until=f.until, include_archived=True)
    where, args = _filter_sql(g, "d", time_col="d.created_at", kind_col=None, archived_col=None)
    join = "JOIN documents d ON d.user_id = c.user_id AND d.id = c.document_id AND d.status = 'ready'"
    return _lexical(con, "chunks_fts", ts, limit, join, where, args, "c", plan)


def term_scores(con: Any, fts: str, terms: list[str], ids: list[int], dfs: dict[str, int]) -> dict[int, float]:
    """{row id: bm25 of `terms` in the row} for the rows of `ids` holding any of them, with the document
    frequencies given."""
    if not terms or not ids:
        return {}
    stems = _stems(con, terms)
    lexemes = _lexemes(stems)
    rows = con.execute(f"SELECT t.id, {TERM_COLUMNS} FROM {_TABLE[fts]} t {_terms_of('t')} WHERE t.id = ANY(%s::bigint[])",
                       (lexemes, lexemes, bigints(sorted(set(ids))))).fetchall()
    return _bm25(con, fts, terms, stems, rows, dfs, *_sizes(con, fts)[:2])


def passing(con: Any, keys: list[tuple[str, int]], f: Filter) -> list[tuple[str, int]]:
    """The keys ("m"/"c", row id) whose memory or chunk passes the filter, in the given order."""
    ok: set[tuple[str, int]] = set()
    mids = [i for t, i in keys if t == "m"]
    cids = [i for t, i in keys if t == "c"] if f.kinds is None or "chunk" in f.kinds else []
    if mids:
        where, args = _filter_sql(f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col="m.kind",
                                  archived_col="m.archived", source_col="m.source")
        ok.update(("m", int(r[0])) for r in con.execute(
            "SELECT m.id FROM memories m WHERE m.id = ANY(%s::bigint[])" + "".join(" AND " + w for w in where),
            [bigints(mids), *args]).fetchall())
    if cids:
        g = Filter(projects=f.projects, since=f.since, until=f.until, include_archived=True)
        where, args = _filter_sql(g, "d", time_col="d.created_at", kind_col=None, archived_col=None)
        ok.update(("c", int(r[0])) for r in con.execute(
            "SELECT c.id FROM chunks c JOIN documents d ON d.user_id = c.user_id AND d.id = c.document_id "
            "AND d.status = 'ready' WHERE c.id = ANY(%s::bigint[])" + "".join(" AND " + w for w in where),
            [bigints(cids), *args]).fetchall())
    return [key for key in keys if key in ok]


def activity_events(con: Any, f: Filter, cue: Any, limit: int) -> list[tuple[int, float]]:
    """[(memory row id, event time)] of the app's own events passing the filter, newest first; inside the
    cue's window when the question names a time."""
    g = Filter(projects=f.projects, kinds=None, include_archived=f.include_archived, since=f.since,
               until=f.until, activity=True)
    where, args = _filter_sql(g, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col=None,
                              archived_col="m.archived")
    where.append("m.source = %s")
    args.append(ACTIVITY_SOURCE)
    if cue is not None and cue.window:
        where.append("coalesce(m.event_at, m.created_at) >= %s AND coalesce(m.event_at, m.created_at) < %s")
        args += [cue.since, cue.until]
    return [(int(r[0]), float(r[1])) for r in con.execute(
        "SELECT m.id, coalesce(m.event_at, m.created_at) AS t FROM memories m WHERE " + " AND ".join(where)
        + " ORDER BY t DESC, m.id DESC LIMIT %s", [*args, limit]).fetchall()]


WINDOW_READ = 500


def in_window(con: Any, f: Filter, since: float, until: float, limit: int = WINDOW_READ) -> list[int]:
    """Row ids of the memories (not the app's own events) passing the filter whose event time is in
    [since, until), at most `limit`, oldest first."""
    where, args = _filter_sql(f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col="m.kind",
                              archived_col="m.archived", source_col="m.source")
    where.append("coalesce(m.event_at, m.created_at) >= %s AND coalesce(m.event_at, m.created_at) < %s")
    return [int(r[0]) for r in con.execute(
        "SELECT m.id FROM memories m WHERE " + " AND ".join(where)
        + " ORDER BY coalesce(m.event_at, m.created_at), m.id LIMIT %s", [*args, since, until, limit]).fetchall()]


def neighbours(con: Any, ids: list[int], f: Filter, reach: int = 2) -> dict[int, dict[int, int]]:
    """For episodic memories among `ids`: {id: {offset: neighbour id}} for the turns of one talk around them
    (`lexical.near_turns`). Neighbours must pass the filter too."""
    if not ids or (f.kinds is not None and "episodic" not in f.kinds):
        return {}
    where, args = _filter_sql(f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col=None,
                              archived_col="m.archived", source_col="m.source")
    info = {int(r[0]): r[1:] for r in con.execute(
        "SELECT m.id, m.project, coalesce(m.event_at, m.created_at), m.conversation_id FROM memories m "
        "WHERE m.kind = 'episodic' AND m.id = ANY(%s::bigint[])" + "".join(" AND " + w for w in where),
        [bigints(lexical.near_ids(ids, reach)), *args]).fetchall()}
    return lexical.near_turns(ids, info, reach)


def addressed_names(con: Any, query: str, f: Filter, cache: DocFreqs | None = None) -> dict[str, tuple[str, str | None]]:
    """{name in the question (lowercased): (the speaker who uses it, the speaker so named or None)}: the rule
    of `lexical.addressed_names`, reading the turns through the full-text index."""
    where, args = _filter_sql(f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col=None,
                              archived_col="m.archived", source_col="m.source")

    def naming(low: str, limit: int) -> list[tuple[int, str | None, str]]:
        q, qargs = _query([low])
        return con.execute(f"SELECT m.id, m.project, m.text FROM memories m WHERE {_holding('m', 'memories_fts', q)} "
                           "AND m.kind = 'episodic'"
                           + "".join(" AND " + w for w in where) + " ORDER BY m.id LIMIT %s",
                           [*qargs, *args, limit]).fetchall()

    def heads(ids: list[int]) -> list[tuple[int, str | None, str]]:
        return con.execute("SELECT id, project, substr(text, 1, 64) FROM memories WHERE kind = 'episodic' "
                           "AND id = ANY(%s::bigint[])", (bigints(ids),)).fetchall()

    return lexical.addressed_names(con, query, f, cache, naming, heads)
