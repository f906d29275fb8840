"""Lexical search reads FTS5's best matches and filters those (engine/store/sqlite/retrieval.py, `_lexical`): whichever
way it gets there (the first read, a larger one, or every match filtered), it returns exactly what ranking
every filtered match by BM25 returns, ties by row id, on a real store."""

from __future__ import annotations

import random

import pytest

from engine import Engine
from engine.embeddings import NoEmbedder
from engine.store import lexical
from engine.store import types as store_types
from engine.store.sqlite import documents as doc_rows
from engine.store.sqlite import memories as memory_rows
from engine.store.sqlite import retrieval
from engine.store.sqlite.vectors import Filter

WORDS = "garden tomato fence shed compost hedge path rain spade soil".split()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """1,200 memories and 600 chunks that all say "garden", of varied lengths, kinds, projects, times,
    archived or not, some of them the app's own events, many with the very same text (equal BM25: ties);
    the chunks in ready documents and in one still pending."""
    home = tmp_path_factory.mktemp("lexical") / "profile"
    rng = random.Random(4)
    eng = Engine.open(home, embedder=NoEmbedder())
    with eng.store.write() as con:
        for i in range(1200):
            n = rng.choice((1, 3, 8, 20))
            text = "garden " + " ".join(rng.choice(WORDS) for _ in range(n)) if i % 5 else "garden tomato"
            project = "rare" if i % 97 == 0 else rng.choice((None, "home", "work"))
            memory_rows.insert(
                con, uid=f"mem_l{i}", kind=rng.choice(("fact", "episodic", "procedural")), text=text,
                chash=f"h{i}", importance=0.5, now=1000.0 + i, event_at=None, project=project,
                source="activity" if i % 13 == 0 else "user", meta=None, conversation_id=None, document_id=None,
                done=True, dedup_pending=False)
        for i in range(400):  # "lantern" rows of 400 different lengths: no two rank the same
            memory_rows.insert(
                con, uid=f"mem_n{i}", kind=("fact", "episodic", "procedural")[i % 3],
                text="lantern " + "word " * i, chash=f"n{i}", importance=0.5, now=3000.0 + i, event_at=None,
                project="rare" if i % 50 == 7 else ("home", "work")[i % 2], source="user", meta=None,
                conversation_id=None, document_id=None, done=True, dedup_pending=False)
        for i in range(60):  # the very same text 60 times: they all rank the same
            memory_rows.insert(
                con, uid=f"mem_b{i}", kind="fact", text="birdbath by the gate", chash=f"b{i}", importance=0.5,
                now=4000.0 + i, event_at=None, project=None, source="user", meta=None, conversation_id=None,
                document_id=None, done=True, dedup_pending=False)
        con.execute("UPDATE memories SET archived = 1 WHERE id % 7 = 0")
        for d in range(6):
            doc = doc_rows.insert(con, uid=f"doc_l{d}", path=None, title=f"Doc {d}", mime="text/plain",
                                  chash=f"d{d}", size=0, mtime=None, project=(None, "home", "rare")[d % 3],
                                  status="pending" if d == 5 else "ready", chunks=100, now=2000.0 + d, meta="{}")
            rows = [(f"chk_l{d}_{p}", doc, p, "garden " + " ".join(rng.choice(WORDS) for _ in range(p % 9)),
                     f"c{d}_{p}", f"p{p}", None, None, 10) for p in range(100)]
            doc_rows.insert_chunks(con, doc, rows)
    yield eng
    eng.close()


def reference(con, table: str, terms: list[str], limit: int, f: Filter) -> list[tuple[int, float]]:
    """Every match filtered, ranked by BM25, ties by id: what the search must return."""
    expr = retrieval.match_expression(terms)
    fts = f"{table}_fts"
    rows = con.execute(f"SELECT rowid, bm25({fts}) FROM {fts} WHERE {fts} MATCH ?", (expr,)).fetchall()
    kind = "m" if table == "memories" else "c"
    ok = {i for _, i in retrieval.passing(con, [(kind, r[0]) for r in rows], f)}
    return [(i, -r) for r, i in sorted((r, i) for i, r in rows if i in ok)][:limit]


FILTERS = [
    Filter(),
    Filter(activity=True, include_archived=True),
    Filter(projects={"home"}),
    Filter(projects={"rare"}),  # ~1% of the rows: needs more than the first read
    Filter(projects={"rare", None}, kinds={"fact"}),
    Filter(kinds={"episodic", "chunk"}, since=1300.0, until=1900.0),
    Filter(projects={"nowhere"}),
]


@pytest.mark.parametrize("first", [retrieval.LEXICAL_FIRST, 20])
@pytest.mark.parametrize("terms", [["garden"], ["tomato", "shed"], ["spade"], ["lantern", "tomato"], ["birdbath"]])
def test_lexical_search_is_exactly_every_filtered_match_ranked(store, monkeypatch, first, terms):
    monkeypatch.setattr(retrieval, "LEXICAL_FIRST", first)
    con = store.con
    for f in FILTERS:
        for limit in (1, 5, 50):
            assert retrieval.lexical_memories(con, terms, limit, f) == reference(con, "memories", terms, limit, f)
            want = reference(con, "chunks", terms, limit, f) if f.kinds is None or "chunk" in f.kinds else []
            assert retrieval.lexical_chunks(con, terms, limit, f) == want


def test_each_way_to_the_answer_is_taken(store, monkeypatch):
    """The first read answers an unfiltered search; a selective filter reads a larger share; one that keeps
    almost nothing filters every match; ties at the end of a read read on (the statements SQLite runs say
    which)."""
    monkeypatch.setattr(retrieval, "LEXICAL_FIRST", 20)
    con = store.con
    seen: list[str] = []
    con.set_trace_callback(seen.append)
    try:
        def ways(f: Filter) -> tuple[int, bool]:
            seen.clear()
            assert retrieval.lexical_memories(con, ["lantern"], 5, f) == reference(con, "memories", ["lantern"], 5, f)
            reads = [s for s in seen if "ORDER BY rank LIMIT" in s]
            return len(reads), any("JOIN memories m ON m.id = memories_fts.rowid" in s for s in seen)

        assert ways(Filter()) == (1, False)
        assert ways(Filter(projects={"home"}, kinds={"fact"})) == (2, False)  # 1 in 6 kept: 20 read, then 320
        assert ways(Filter(projects={"rare"}, kinds={"episodic"})) == (2, True)  # 3 of 400: every match filtered
        # the 20 "birdbath" rows read first all rank the same as the last of them: none is sure to be among
        # the first of that rank by id, so it reads on (and the larger read holds all 60)
        seen.clear()
        got = retrieval.lexical_memories(con, ["birdbath"], 5, Filter())
        assert got == reference(con, "memories", ["birdbath"], 5, Filter())
        assert len({s for _, s in got}) == 1 and [i for i, _ in got] == sorted(i for i, _ in got)
        assert len([s for s in seen if "ORDER BY rank LIMIT" in s]) == 2
    finally:
        con.set_trace_callback(None)


@pytest.mark.parametrize("table", ["memories", "chunks"])
@pytest.mark.parametrize("terms", [["garden"], ["tomato", "shed"], ["lantern", "word"], ["birdbath", "gate"], ["absent"]])
def test_term_scores_are_fts5s_own_bm25_on_the_rows_asked_about_only(store, table, terms):
    """A term past the posting budget is scored on the candidates alone (retrieval.term_scores): the same
    BM25 as FTS5's bm25() gives those rows (term counts up to 400 a row, rows of every length), and no
    statement reads the term's rows beyond the ones asked about."""
    con = store.con
    fts = f"{table}_fts"
    everything = dict(con.execute(f"SELECT rowid, -bm25({fts}) FROM {fts} WHERE {fts} MATCH ?",
                                  (retrieval.match_expression(terms),)).fetchall())
    rowids = [r[0] for r in con.execute(f"SELECT id FROM {table} ORDER BY id").fetchall()]
    asked = rowids[::3] + [max(rowids) + 10]  # and a row that does not exist
    dfs = {t: retrieval._doc_freq(con, fts, t) for t in terms}
    seen: list[str] = []
    con.set_trace_callback(seen.append)
    try:
        got = retrieval.term_scores(con, fts, terms, asked, dfs)
    finally:
        con.set_trace_callback(None)
    want = {i: s for i, s in everything.items() if i in set(asked)}
    assert sorted(got) == sorted(want)
    assert all(got[i] == pytest.approx(want[i], rel=1e-9) for i in want)
    matching = [s for s in seen if "MATCH" in s]
    assert len(matching) == len(terms) and all("rowid IN" in s and "bm25" not in s for s in matching)


@pytest.mark.sqlite_only("FTS5's own statements, traced")
def test_recall_scores_a_term_past_the_budget_on_its_candidates_as_fts5_would(eng, monkeypatch):
    """With vectors to find candidates, a term in more rows than the posting budget is not searched by FTS5
    (which would score each of its rows); it is scored on the candidates. Where those are every row (a
    small store), recall returns exactly what searching it returns: the same hits, scores and signals."""
    rng = random.Random(9)
    extra = "tomato fence compost hedge path rain spade soil".split()
    for i in range(30):
        eng.remember(f"In the garden {i}: " + " ".join(rng.choice(extra) for _ in range(1 + i % 6))
                     + (" and the shed roof" if i % 10 == 3 else ""), embed="now")
    for i in range(10):
        eng.remember(f"Meeting {i} with the bank about the mortgage rate", embed="now")
    monkeypatch.setattr(lexical, "PRUNE_MIN_DF", 5)  # "garden" (30 rows) is over it, "shed" (3) is not
    monkeypatch.setattr(lexical, "PRUNE_SHARE", 1.0)  # and neither is pruned: "garden" is in 75% of the rows
    monkeypatch.setattr(lexical, "SCOPE_SHARE", 1.0)
    seen: list[str] = []

    def run(budget: int, q: str):
        monkeypatch.setattr(store_types, "LEXICAL_BUDGET", budget)
        seen.clear()
        eng.con.set_trace_callback(seen.append)
        try:
            return [(h.id, round(h.score, 12), round(h.similarity, 12), h.via) for h in eng.recall(q, k=40)]
        finally:
            eng.con.set_trace_callback(None)

    for q in ("garden", "what is in the garden shed?"):
        searched = run(10**9, q)
        assert any("memories_fts MATCH '\"garden" in s and "ORDER BY rank" in s for s in seen)
        bounded = run(10, q)
        assert not any("memories_fts MATCH '\"garden" in s and "ORDER BY rank" in s for s in seen)
        assert any('"garden"' in s and "rowid IN" in s for s in seen)
        assert bounded == searched and sum("fts" in via for *_, via in bounded) >= 30


def test_term_scores_count_the_terms_not_a_marker_the_text_already_holds(tmp_path):
    """term_scores counts a term by the marks highlight() adds; a text that holds the mark's character
    itself (a control character pasted in, a document's stray byte) scores as FTS5 scores it."""
    eng = Engine.open(tmp_path / "profile", embedder=NoEmbedder())
    try:
        for text in ("garden \x01\x01 shed", "garden garden \x01", "the shed \x01 door", "garden path"):
            eng.remember(text)
        con, fts = eng.con, "memories_fts"
        for terms in (["garden"], ["shed"], ["garden", "shed"]):
            want = dict(con.execute(f"SELECT rowid, -bm25({fts}) FROM {fts} WHERE {fts} MATCH ?",
                                    (retrieval.match_expression(terms),)).fetchall())
            ids = [r[0] for r in con.execute("SELECT id FROM memories").fetchall()]
            dfs = {t: retrieval._doc_freq(con, fts, t) for t in terms}
            got = retrieval.term_scores(con, fts, terms, ids, dfs)
            assert sorted(got) == sorted(want) and all(got[i] == pytest.approx(want[i], rel=1e-9) for i in want)
    finally:
        eng.close()
