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
from ...terms import STOPWORDS, WORD, speaker, terms
from ..types import ACTIVITY_SOURCE, Filter, LexicalPlan

TEXT_SEARCH = "english"
_TABLE = {"memories_fts": "memories", "chunks_fts": "chunks"}
LEXICAL_FIRST = 200
BM25_K1 = 1.2
BM25_B = 0.75
DF_DRIFT = 0.02
DF_MAX_AGE = 600.0
PRUNE_SHARE = 0.02
PRUNE_MIN_DF = 2000
SCOPE_SHARE = 0.25
SCOPE_MIN_DF = 20
_LEXEME = re.compile(r"'((?:[^']|'')*)':([0-9A-D,]+)")


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
    q, args = _query([term])
    return int(con.execute(f"SELECT count(*) FROM {_TABLE[fts]} WHERE tsv @@ {q}", args).fetchone()[0])


def _scope(fts: str, projects: frozenset) -> tuple[str, str, list[Any]]:
    named = sorted(p for p in projects if p is not None)
    if fts == "memories_fts":
        frm, col = "memories s", "s.project"
    else:
        frm, col = "chunks t JOIN documents s ON s.user_id = t.user_id AND s.id = t.document_id", "s.project"
    cond = f"({col} = ANY(%s)" + (f" OR {col} IS NULL)" if None in projects else ")")
    return frm, cond, [named]


class DocFreqs:
    """Per-process cache of document frequencies (see DF_DRIFT, DF_MAX_AGE), as on SQLite."""

    def __init__(self) -> None:
        self._df: dict[tuple, tuple[int, int, float]] = {}

    def clear(self) -> None:
        self._df.clear()

    def _get(self, key: tuple, n: int, count: Any) -> int:
        now = time.monotonic()
        hit = self._df.get(key)
        if hit is not None and abs(n - hit[1]) <= DF_DRIFT * hit[1] and now - hit[2] < DF_MAX_AGE:
            return min(hit[0], n)
        value = int(count())
        if len(self._df) > 50_000:
            self._df.clear()
        self._df[key] = (value, n, now)
        return value

    def get(self, con: Any, fts: str, term: str, n: int, projects: frozenset | None = None) -> int:
        if projects is None:
            return self._get((fts, term), n, lambda: _doc_freq(con, fts, term))
        frm, cond, args = _scope(fts, projects)
        alias = "s" if fts == "memories_fts" else "t"
        q, qargs = _query([term])

        def count() -> int:
            return con.execute(f"SELECT count(*) FROM {frm} WHERE {alias}.tsv @@ {q} AND {cond}",
                               [*qargs, *args]).fetchone()[0]
        return self._get((fts, term, projects), n, count)

    def rows(self, con: Any, fts: str, n: int, projects: frozenset) -> int:
        frm, cond, args = _scope(fts, projects)
        return self._get((fts, None, projects), n,
                         lambda: con.execute(f"SELECT count(*) FROM {frm} WHERE {cond}", args).fetchone()[0])


def doc_freqs(store: Any) -> DocFreqs:
    """An empty cache of the document frequencies of the store's full-text indexes."""
    return DocFreqs()


def plan(con: Any, fts: str, query: str, cache: DocFreqs | None = None, projects: set | frozenset | None = None,
         budget: int | None = None, drop: set[str] | frozenset[str] | tuple = ()) -> LexicalPlan:
    """The query's terms to search, very common ones dropped, and their IDF sum (the SQLite backend's rules:
    engine/store/sqlite/retrieval.py `plan`)."""
    ts = terms(query)
    if drop and any(t not in drop for t in ts):
        ts = [t for t in ts if t not in drop]
    if not ts:
        return LexicalPlan([], 0.0, [])
    cache = cache if cache is not None else DocFreqs()
    n = indexed_rows(con, fts)
    dfs = {t: cache.get(con, fts, t, n) for t in ts}
    common = {t for t in ts if dfs[t] > max(PRUNE_MIN_DF, PRUNE_SHARE * n)}
    if projects is None:
        common |= {t for t in ts if dfs[t] > max(SCOPE_MIN_DF, SCOPE_SHARE * n)}
    else:
        scope = frozenset(projects)
        limit = max(SCOPE_MIN_DF, SCOPE_SHARE * cache.rows(con, fts, n, scope))
        common |= {t for t in ts if t not in common and dfs[t] > limit and cache.get(con, fts, t, n, scope) > limit}
    kept = [t for t in ts if t not in common]
    if common and not any(dfs[t] for t in kept):
        kept.append(min(common, key=lambda t: (dfs[t], ts.index(t))))
        kept.sort(key=ts.index)
    costly: list[str] = []
    if budget is not None:
        spent = 0
        for t in sorted(kept, key=lambda t: (dfs[t], ts.index(t))):
            if dfs[t] > PRUNE_MIN_DF and spent + dfs[t] > budget:
                costly.append(t)
            else:
                spent += dfs[t]
    searched = [t for t in kept if t not in costly]
    return LexicalPlan(searched, sum(ranking.bm25_idf(n, dfs[t]) for t in kept), [t for t in ts if t not in kept],
                       [t for t in kept if t in costly], {t: dfs[t] for t in kept})


def _stems(con: Any, ts: list[str]) -> dict[str, list[str]]:
    """{term: the lexemes PostgreSQL indexes it as} (a stop word has none)."""
    out: dict[str, list[str]] = {}
    for t in ts:
        text = con.execute(f"SELECT plainto_tsquery('{TEXT_SEARCH}', %s)::text", (t,)).fetchone()[0] or ""
        out[t] = re.findall(r"'((?:[^']|'')*)'", text)
    return out


def _counts(vector: str) -> tuple[dict[str, int], int]:
    """({lexeme: occurrences}, the row's length in tokens) of a tsvector's text."""
    counts = {m.group(1): len(m.group(2).split(",")) for m in _LEXEME.finditer(vector)}
    return counts, sum(counts.values())


def _average_length(con: Any, fts: str) -> float:
    row = con.execute(f"SELECT avg(length(tsv)) FROM (SELECT tsv FROM {_TABLE[fts]} LIMIT 10000) s").fetchone()
    return float(row[0] or 1.0)


_averages: dict[tuple[str, int], tuple[float, float]] = {}  # (table, rows) -> (average length, when)


def _mean_length(con: Any, fts: str, n: int) -> float:
    key = (fts, n // 100)
    hit = _averages.get(key)
    if hit is not None and time.monotonic() - hit[1] < DF_MAX_AGE:
        return hit[0]
    mean = _average_length(con, fts)
    _averages[key] = (mean, time.monotonic())
    return mean


def _bm25(con: Any, fts: str, ts: list[str], rows: list[tuple[int, str]], dfs: dict[str, int]) -> dict[int, float]:
    """{row id: BM25 of the terms} for rows given with their tsvector text, as FTS5's bm25() scores."""
    n = indexed_rows(con, fts)
    mean = _mean_length(con, fts, n) or 1.0
    stems = _stems(con, ts)
    out: dict[int, float] = {}
    for rid, vector in rows:
        counts, length = _counts(vector)
        norm = BM25_K1 * (1 - BM25_B + BM25_B * (length or mean) / mean)
        score = 0.0
        for t in ts:
            tf = max((counts.get(s, 0) for s in stems[t]), default=0)
            if tf:
                score += ranking.bm25_idf(n, dfs.get(t, 0)) * tf * (BM25_K1 + 1) / (tf + norm)
        if score > 0:
            out[rid] = score
    return out


def _lexical(con: Any, fts: str, ts: list[str], limit: int, join: str, where: list[str], args: list[Any],
             alias: str, cache: DocFreqs | None = None) -> list[tuple[int, float]]:
    if not ts or limit <= 0:
        return []
    q, qargs = _query(ts)
    rows = con.execute(
        f"SELECT {alias}.id, {alias}.tsv::text FROM {_TABLE[fts]} {alias} {join} WHERE {alias}.tsv @@ {q}"
        + "".join(" AND " + w for w in where)
        + f" ORDER BY ts_rank({alias}.tsv, {q}, 1) DESC, {alias}.id LIMIT %s",
        [*qargs, *args, *qargs, max(LEXICAL_FIRST, 4 * limit)]).fetchall()
    cache = cache or DocFreqs()
    n = indexed_rows(con, fts)
    dfs = {t: cache.get(con, fts, t, n) for t in ts}
    scored = _bm25(con, fts, ts, [(int(r[0]), str(r[1])) for r in rows], dfs)
    return sorted(scored.items(), key=lambda x: (-x[1], x[0]))[:limit]


def lexical_memories(con: Any, query: str | list[str], limit: int, f: Filter) -> list[tuple[int, float]]:
    """[(memory row id, bm25)] best first (`query`: the question, or the terms to search)."""
    ts = terms(query) if isinstance(query, str) else list(query)
    where, args = _filter_sql(f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col="m.kind",
                              archived_col="m.archived", source_col="m.source")
    return _lexical(con, "memories_fts", ts, limit, "", where, args, "m")


def lexical_chunks(con: Any, query: str | list[str], limit: int, f: Filter) -> list[tuple[int, float]]:
    """[(chunk row id, bm25)] best first (`query`: the question, or the terms to search)."""
    ts = terms(query) if isinstance(query, str) else list(query)
    if f.kinds is not None and "chunk" not in f.kinds:
        return []
    g = Filter(projects=f.projects, since=f.since, until=f.until, include_archived=True)
    where, args = _filter_sql(g, "d", time_col="d.created_at", kind_col=None, archived_col=None)
    join = "JOIN documents d ON d.user_id = c.user_id AND d.id = c.document_id AND d.status = 'ready'"
    return _lexical(con, "chunks_fts", ts, limit, join, where, args, "c")


def term_scores(con: Any, fts: str, terms: list[str], ids: list[int], dfs: dict[str, int]) -> dict[int, float]:
    """{row id: bm25 of `terms` in the row} for the rows of `ids` holding any of them, with the document
    frequencies given."""
    if not terms or not ids:
        return {}
    rows = con.execute(f"SELECT id, tsv::text FROM {_TABLE[fts]} WHERE id = ANY(%s)", (sorted(set(ids)),)).fetchall()
    return _bm25(con, fts, terms, [(int(r[0]), str(r[1])) for r in rows], dfs)


def passing(con: Any, keys: list[tuple[str, int]], f: Filter) -> list[tuple[str, int]]:
    """The keys ("m"/"c", row id) whose memory or chunk passes the filter, in the given order."""
    ok: set[tuple[str, int]] = set()
    mids = [i for t, i in keys if t == "m"]
    cids = [i for t, i in keys if t == "c"] if f.kinds is None or "chunk" in f.kinds else []
    if mids:
        where, args = _filter_sql(f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col="m.kind",
                                  archived_col="m.archived", source_col="m.source")
        ok.update(("m", int(r[0])) for r in con.execute(
            "SELECT m.id FROM memories m WHERE m.id = ANY(%s)" + "".join(" AND " + w for w in where),
            [mids, *args]).fetchall())
    if cids:
        g = Filter(projects=f.projects, since=f.since, until=f.until, include_archived=True)
        where, args = _filter_sql(g, "d", time_col="d.created_at", kind_col=None, archived_col=None)
        ok.update(("c", int(r[0])) for r in con.execute(
            "SELECT c.id FROM chunks c JOIN documents d ON d.user_id = c.user_id AND d.id = c.document_id "
            "AND d.status = 'ready' WHERE c.id = ANY(%s)" + "".join(" AND " + w for w in where),
            [cids, *args]).fetchall())
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


CONTEXT_SECONDS = 6 * 3600


def neighbours(con: Any, ids: list[int], f: Filter, reach: int = 2) -> dict[int, dict[int, int]]:
    """For episodic memories among `ids`: {id: {offset: neighbour id}} for the memories stored just before
    and after (offsets -reach..reach) in the same project and within CONTEXT_SECONDS (turns of one talk)."""
    if not ids or (f.kinds is not None and "episodic" not in f.kinds):
        return {}
    where, args = _filter_sql(f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col=None,
                              archived_col="m.archived", source_col="m.source")
    want = sorted({i + d for i in ids for d in range(-reach, reach + 1)})
    info = {int(r[0]): r[1:] for r in con.execute(
        "SELECT m.id, m.project, coalesce(m.event_at, m.created_at), m.conversation_id FROM memories m "
        "WHERE m.kind = 'episodic' AND m.id = ANY(%s)" + "".join(" AND " + w for w in where),
        [want, *args]).fetchall()}
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


_YOU = frozenset({"you", "your", "yours", "yourself", "u", "ur"})
_THIRD = frozenset({"he", "she", "him", "her", "his", "hers", "they", "them", "their"})
ADDRESS_MIN_TURNS = 5
ADDRESS_ONE_SIDE = 0.85
ADDRESS_SAMPLE = 200


def addressed_names(con: Any, query: str, f: Filter, cache: DocFreqs | None = None) -> dict[str, tuple[str, str | None]]:
    """{name in the question (lowercased): (the speaker who uses it, the speaker so named or None)}: the SQLite
    backend's rule (engine/store/sqlite/retrieval.py `addressed_names`) on PostgreSQL's full-text index."""
    names = [w for w in dict.fromkeys(WORD.findall(query)[1:]) if w[0].isupper() and len(w) >= 3
             and w.lower() not in STOPWORDS and not w.isupper()]
    if not names or (f.kinds is not None and "episodic" not in f.kinds):
        return {}
    n_rows = indexed_rows(con, "memories_fts")
    where, args = _filter_sql(f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col=None,
                              archived_col="m.archived", source_col="m.source")
    out: dict[str, tuple[str, str | None]] = {}
    for name in names:
        low = name.lower()
        if cache is not None and cache.get(con, "memories_fts", low, n_rows) > PRUNE_MIN_DF:
            continue
        said: dict[str, list[tuple[int, str | None]]] = {}
        you = third = n = 0
        q, qargs = _query([low])
        for rid, project, text in con.execute(
                f"SELECT m.id, m.project, m.text FROM memories m WHERE m.tsv @@ {q} AND m.kind = 'episodic'"
                + "".join(" AND " + w for w in where) + " ORDER BY m.id LIMIT %s",
                [*qargs, *args, ADDRESS_SAMPLE]).fetchall():
            who = speaker(text)
            if who is None:
                continue
            if who.split()[0] == low:
                break
            words = {w.lower() for w in WORD.findall(text)}
            if low not in words:
                continue
            n += 1
            said.setdefault(who, []).append((int(rid), project))
            you += bool(words & _YOU)
            third += bool(words & _THIRD)
        else:
            if n < ADDRESS_MIN_TURNS or you <= third:
                continue
            by = max(said, key=lambda w: len(said[w]))
            if len(said[by]) < ADDRESS_ONE_SIDE * n:
                continue
            after = [(rid + 1, project) for rid, project in said[by]]
            answers: dict[str, int] = {}
            for rid, project, head in con.execute(
                    "SELECT id, project, substr(text, 1, 64) FROM memories WHERE kind = 'episodic' AND id = ANY(%s)",
                    ([r for r, _ in after],)).fetchall():
                if (rid, project) in after and (who := speaker(head)) and who != by:
                    answers[who] = answers.get(who, 0) + 1
            out[low] = (by, max(answers, key=lambda w: answers[w]) if answers else None)
    return out
