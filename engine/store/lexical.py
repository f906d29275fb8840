"""The rules of recall's lexical side and of conversation turns that both backends share: which of a
question's terms are searched (`plan`, with the document frequencies `DocFreqs` caches), which name in a
question is what one speaker calls the other (`addressed_names`), and which turns are a turn's neighbours
(`near_turns`). A backend's retrieval module only reads rows for them: its full-text index's counts (a
`DocFreqs` subclass), the turns naming a name, the turns around a candidate (docs/retrieval.md §1, §3f).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from .. import ranking
from ..terms import STOPWORDS, WORD, speaker, terms
from .types import Filter, LexicalPlan

# Document frequencies are cached per (table, term) while the table's row count stays within this share of
# the count they were measured at: an IDF barely moves meanwhile, and counting a common term's rows costs a
# scan of its whole posting list (tens of ms at 100k rows).
DF_DRIFT = 0.02
DF_MAX_AGE = 600.0  # seconds; also bounds how stale a count can get when deletes balance inserts
# Pruning very common terms out of the OR-query (while at least one rarer term remains):
# - for cost: a term in more than PRUNE_MIN_DF rows and more than PRUNE_SHARE of them. FTS5 reads a term's
#   whole posting list for an OR query (and again for bm25()'s IDF), so six such terms cost ~45 ms at 100k
#   rows against ~3 ms without them; their IDF (below log(49) ~ 3.9 at 2%) is the lowest of the query, and
#   the semantic signal still sees them. Small stores (< 2,000 rows per term) are never pruned for cost.
# - for relevance: a term in more than SCOPE_SHARE of the rows of the projects searched (and more than
#   SCOPE_MIN_DF of them). The index's IDF is the whole table's, so a word in half of one project's rows
#   (the name of the person a conversation is with, a project's own name) still weighs like an informative
#   word there, and floods the candidates with rows that share only that word. The semantic signal still
#   sees it.
PRUNE_SHARE = 0.02
PRUNE_MIN_DF = 2000
SCOPE_SHARE = 0.25
SCOPE_MIN_DF = 20  # in a small store every word is in a large share of the rows: nothing is pruned there

# BM25's constants, FTS5's own (fts5_aux.c): PostgreSQL scores its rows the same way.
BM25_K1 = 1.2
BM25_B = 0.75


class DocFreqs:
    """Per-process cache of a full-text index's document frequencies, in a whole table or in some of its
    projects (see DF_DRIFT, DF_MAX_AGE). A backend counts (`indexed_rows`, `count`, `count_in`,
    `count_rows`); the cache decides when to count again. Thread-safe enough: entries are replaced whole,
    and a stale read only means a slightly older IDF."""

    def __init__(self) -> None:
        self._df: dict[tuple, tuple[int, int, float]] = {}

    def clear(self) -> None:
        self._df.clear()

    # -- what a backend counts ---------------------------------------------------------------------------
    def indexed_rows(self, con: Any, fts: str) -> int:
        """Rows the table's full-text index holds."""
        raise NotImplementedError

    def count(self, con: Any, fts: str, term: str) -> int:
        """Rows of the table holding the term."""
        raise NotImplementedError

    def count_in(self, con: Any, fts: str, term: str, projects: frozenset) -> int:
        """Rows of the table in the projects (None inside: no project) holding the term."""
        raise NotImplementedError

    def count_many(self, con: Any, fts: str, terms: list[str]) -> dict[str, int]:
        """{term: rows of the table holding it} (a backend may count them all at once)."""
        return {t: self.count(con, fts, t) for t in terms}

    def count_rows(self, con: Any, fts: str, projects: frozenset) -> int:
        """Rows of the table in the projects."""
        raise NotImplementedError

    # -- the cache -----------------------------------------------------------------------------------------
    def _get(self, key: tuple, n: int, count: Callable[[], int]) -> int:
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
        """Rows of `fts` (n of them in all) holding the term, in the projects if given."""
        if projects is None:
            return self._get((fts, term), n, lambda: self.count(con, fts, term))
        return self._get((fts, term, projects), n, lambda: self.count_in(con, fts, term, projects))

    def get_many(self, con: Any, fts: str, terms: list[str], n: int) -> dict[str, int]:
        """{term: rows of `fts` (n of them in all) holding it}: `get` of each, those to count counted together."""
        now = time.monotonic()
        stale = [t for t in dict.fromkeys(terms) if not (
            (hit := self._df.get((fts, t))) is not None and abs(n - hit[1]) <= DF_DRIFT * hit[1]
            and now - hit[2] < DF_MAX_AGE)]
        counted = self.count_many(con, fts, stale) if stale else {}

        def count(t: str) -> Callable[[], int]:
            return lambda: counted[t] if t in counted else self.count(con, fts, t)

        return {t: self._get((fts, t), n, count(t)) for t in terms}

    def rows(self, con: Any, fts: str, n: int, projects: frozenset) -> int:
        """Rows of `fts` (n of them in all) in the projects."""
        return self._get((fts, None, projects), n, lambda: self.count_rows(con, fts, projects))


def plan(con: Any, fts: str, query: str, cache: DocFreqs, projects: set | frozenset | None = None,
         budget: int | None = None, drop: set[str] | frozenset[str] | tuple = ()) -> LexicalPlan:
    """The query's terms to search in `fts`, very common ones dropped (PRUNE_SHARE / PRUNE_MIN_DF in the table,
    SCOPE_SHARE / SCOPE_MIN_DF in the projects searched) while a kept term occurs in the table, and their IDF
    sum. With a `budget` (LEXICAL_BUDGET), the index searches the kept terms rarest first while their rows sum
    to at most that (a term in at most PRUNE_MIN_DF rows always); the others are `costly`: `term_scores`
    scores them on the candidates the other signals found. `drop`: terms not to search while another is."""
    ts = terms(query)
    if drop and any(t not in drop for t in ts):
        ts = [t for t in ts if t not in drop]
    if not ts:
        return LexicalPlan([], 0.0, [])
    n = cache.indexed_rows(con, fts)
    dfs = cache.get_many(con, fts, ts, n)
    common = {t for t in ts if dfs[t] > max(PRUNE_MIN_DF, PRUNE_SHARE * n)}
    if projects is None:
        common |= {t for t in ts if dfs[t] > max(SCOPE_MIN_DF, SCOPE_SHARE * n)}
    else:
        scope = frozenset(projects)
        limit = max(SCOPE_MIN_DF, SCOPE_SHARE * cache.rows(con, fts, n, scope))
        common |= {t for t in ts if t not in common and dfs[t] > limit and cache.get(con, fts, t, n, scope) > limit}
    kept = [t for t in ts if t not in common]
    if common and not any(dfs[t] for t in kept):  # nothing left that occurs: keep the least common of the pruned terms
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
                       [t for t in kept if t in costly], {t: dfs[t] for t in kept}, n)


def bm25(idf: float, tf: int, length: float, mean: float) -> float:
    """One term's BM25 in a row of `length` tokens (the table's mean: `mean`), as FTS5's bm25() scores it."""
    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / mean)
    return idf * tf * (BM25_K1 + 1) / (tf + norm)


# A name counts as what one speaker calls the other when it is in at least ADDRESS_MIN_TURNS of the turns
# searched, ADDRESS_ONE_SIDE of them by one speaker, and more of them speak to "you" than of "he/she".
ADDRESS_MIN_TURNS = 5
ADDRESS_ONE_SIDE = 0.85
ADDRESS_SAMPLE = 200
_YOU = frozenset({"you", "your", "yours", "yourself", "u", "ur"})
_THIRD = frozenset({"he", "she", "him", "her", "his", "hers", "they", "them", "their"})

# turns naming a name: (name lowercased, how many at most) -> [(row id, project, text)], oldest first
Naming = Callable[[str, int], Iterable[tuple[int, str | None, str]]]
# the first characters of turns: row ids -> [(row id, project, head of its text)]
Heads = Callable[[list[int]], Iterable[tuple[int, str | None, str]]]


def addressed_names(con: Any, query: str, f: Filter, cache: DocFreqs | None, naming: Naming,
                    heads: Heads) -> dict[str, tuple[str, str | None]]:
    """{name in the question (lowercased): (the speaker who uses it, the speaker so named or None)} for the
    question's capitalised words that, in the conversations searched, one speaker uses to speak to the other
    ("Looks incredible Kate. You…"): a name nobody signs their turns with, said almost only by one speaker, in
    turns that say "you" more than "he" or "she". The person so named is the other speaker, who usually
    answers next. Reads at most ADDRESS_SAMPLE turns a name (`naming`); a name in more than PRUNE_MIN_DF rows
    of the whole table is not looked at."""
    names = [w for w in dict.fromkeys(WORD.findall(query)[1:]) if w[0].isupper() and len(w) >= 3
             and w.lower() not in STOPWORDS and not w.isupper()]
    if not names or (f.kinds is not None and "episodic" not in f.kinds):
        return {}
    n_rows = cache.indexed_rows(con, "memories_fts") if cache is not None else 0
    out: dict[str, tuple[str, str | None]] = {}
    for name in names:
        low = name.lower()
        if cache is not None and cache.get(con, "memories_fts", low, n_rows) > PRUNE_MIN_DF:
            continue
        said: dict[str, list[tuple[int, str | None]]] = {}
        you = third = n = 0
        for rid, project, text in naming(low, ADDRESS_SAMPLE):
            who = speaker(text)
            if who is None:
                continue
            if who.split()[0] == low:
                break  # a speaker's own label: named, not addressed
            words = {w.lower() for w in WORD.findall(text)}
            if low not in words:
                continue  # a stemmed match only
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
            # who answers those turns
            after = [(rid + 1, project) for rid, project in said[by]]
            answers: dict[str, int] = {}
            for rid, project, head in heads([r for r, _ in after]):
                if (rid, project) in after and (who := speaker(head)) and who != by:
                    answers[who] = answers.get(who, 0) + 1
            out[low] = (by, max(answers, key=lambda w: answers[w]) if answers else None)
    return out


# Two episodic memories are turns of one conversation when stored one after the other in the same project
# within this many seconds of each other (by event time).
CONTEXT_SECONDS = 6 * 3600


def near_ids(ids: list[int], reach: int) -> list[int]:
    """The row ids whose turns may be neighbours of these (offsets -reach..reach), in order."""
    return sorted({i + d for i in ids for d in range(-reach, reach + 1)})


def near_turns(ids: list[int], info: dict[int, tuple[Any, float | None, Any]], reach: int) -> dict[int, dict[int, int]]:
    """{id: {offset: neighbour id}} for the ids among `info` ({row id: (project, event time, conversation)} of
    the episodic memories around them that pass the filter): the memories stored just before and after
    (offsets -reach..reach) in the same project, within CONTEXT_SECONDS, and in the same conversation when
    both have one."""
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
