"""Query handling: the words that are searched, and FTS5 statistics read from a real FTS5 table."""

from __future__ import annotations

import sqlite3

import pytest

from engine import ranking
from engine.store import lexical
from engine.store.sqlite import retrieval


def test_terms_drop_question_words_and_keep_order():
    assert retrieval.terms("When did Caroline go to the LGBTQ support group?") == [
        "caroline", "go", "lgbtq", "support", "group"
    ]


def test_terms_keep_numbers_and_drop_duplicates():
    assert retrieval.terms("What happened in May 2023, in May?") == ["happened", "may", "2023"]


def test_terms_fall_back_to_all_words_when_only_stopwords():
    assert retrieval.terms("what is it") == ["what", "is", "it"]


def test_match_expression_quotes_terms():
    assert retrieval.match_expression('say "hi" now') == '"say" OR "hi"'
    assert retrieval.match_expression("   ") is None


@pytest.fixture
def fts() -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    con.execute("CREATE VIRTUAL TABLE memories_fts USING fts5(text, tokenize='porter unicode61 remove_diacritics 2')")
    rows = ["the cat sat", "a dog barked", "the cat and the dog", "birds sing", "fish swim"]
    con.executemany("INSERT INTO memories_fts(text) VALUES (?)", [(r,) for r in rows])
    return con


def test_indexed_rows_reads_the_fts5_averages_record(fts):
    assert retrieval.indexed_rows(fts, "memories_fts") == 5  # type: ignore[arg-type]


def test_idf_sum_matches_bm25_of_an_average_row(fts):
    got = retrieval.idf_sum(fts, "memories_fts", "cats?")  # type: ignore[arg-type]
    assert got == pytest.approx(ranking.bm25_idf(5, 2))  # porter: cats -> cat, in 2 of 5 rows
    assert retrieval.idf_sum(fts, "memories_fts", "") == 0.0  # type: ignore[arg-type]


@pytest.fixture
def big_fts() -> sqlite3.Connection:
    """400 rows: "alice" in all of them, "kitten" in 2, "sofa" in 1; projects a (300 rows) and b (100)."""
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE memories(id INTEGER PRIMARY KEY, project TEXT)")
    con.execute("CREATE VIRTUAL TABLE memories_fts USING fts5(text, tokenize='porter unicode61 remove_diacritics 2')")
    for i in range(1, 401):
        text = "alice said hello" + (" kitten" if i in (5, 305) else "") + (" sofa" if i == 7 else "")
        text += " bob" if i > 300 else ""
        con.execute("INSERT INTO memories(id, project) VALUES (?, ?)", (i, "a" if i <= 300 else "b"))
        con.execute("INSERT INTO memories_fts(rowid, text) VALUES (?, ?)", (i, text))
    return con


def test_plan_prunes_terms_common_in_the_scope_while_a_rarer_one_occurs(big_fts):
    p = retrieval.plan(big_fts, "memories_fts", "Did Alice adopt the kitten?")  # type: ignore[arg-type]
    assert p.terms == ["adopt", "kitten"] and p.pruned == ["alice"]
    assert p.idf_sum == pytest.approx(ranking.bm25_idf(400, 0) + ranking.bm25_idf(400, 2))
    # "bob" is in 25% of the table but in every row of project b
    assert retrieval.plan(big_fts, "memories_fts", "bob kitten").terms == ["bob", "kitten"]  # type: ignore[arg-type]
    assert retrieval.plan(big_fts, "memories_fts", "bob kitten", projects={"b"}).terms == ["kitten"]  # type: ignore[arg-type]
    # nothing else occurs: the least common pruned term stays
    assert retrieval.plan(big_fts, "memories_fts", "Alice zebra?").terms == ["alice", "zebra"]  # type: ignore[arg-type]


def test_plan_never_prunes_in_a_small_store(fts):
    assert retrieval.plan(fts, "memories_fts", "the cat and dog").terms == ["cat", "dog"]  # type: ignore[arg-type]


def test_plan_prunes_for_cost_in_a_large_table(big_fts, monkeypatch):
    monkeypatch.setattr(lexical, "PRUNE_MIN_DF", 100)
    monkeypatch.setattr(lexical, "SCOPE_SHARE", 1.0)
    assert retrieval.plan(big_fts, "memories_fts", "alice kitten").terms == ["kitten"]  # type: ignore[arg-type]


def test_plan_searches_the_rarest_terms_within_the_posting_budget_and_scores_the_rest_on_candidates(big_fts, monkeypatch):
    monkeypatch.setattr(lexical, "PRUNE_MIN_DF", 1)
    monkeypatch.setattr(lexical, "PRUNE_SHARE", 1.0)
    monkeypatch.setattr(lexical, "SCOPE_SHARE", 1.0)
    q = "alice kitten sofa"  # in 400, 2 and 1 rows
    p = retrieval.plan(big_fts, "memories_fts", q, budget=10)  # type: ignore[arg-type]
    assert (p.terms, p.costly, p.pruned) == (["kitten", "sofa"], ["alice"], [])
    assert p.idf_sum == pytest.approx(sum(ranking.bm25_idf(400, d) for d in (400, 2, 1)))  # every kept term
    assert p.dfs == {"alice": 400, "kitten": 2, "sofa": 1}
    assert retrieval.plan(big_fts, "memories_fts", q, budget=2).costly == ["alice", "kitten"]  # type: ignore[arg-type]  # in the question's order
    assert retrieval.plan(big_fts, "memories_fts", q).costly == []  # type: ignore[arg-type]  # no budget: all searched
    monkeypatch.setattr(lexical, "PRUNE_MIN_DF", 400)  # a term in at most PRUNE_MIN_DF rows is always searched
    assert retrieval.plan(big_fts, "memories_fts", q, budget=2).costly == []  # type: ignore[arg-type]


def test_the_term_kept_when_nothing_else_occurs_is_costly_past_the_budget(big_fts, monkeypatch):
    monkeypatch.setattr(lexical, "PRUNE_MIN_DF", 100)
    p = retrieval.plan(big_fts, "memories_fts", "Alice zebra?", budget=100)  # type: ignore[arg-type]
    assert (p.terms, p.costly) == (["zebra"], ["alice"])
    assert retrieval.plan(big_fts, "memories_fts", "Alice zebra?", budget=400).costly == []  # type: ignore[arg-type]


def test_doc_freqs_are_cached_until_the_table_grows(big_fts):
    cache = retrieval.DocFreqs()
    assert cache.get(big_fts, "memories_fts", "kitten", 400) == 2  # type: ignore[arg-type]
    big_fts.execute("INSERT INTO memories_fts(rowid, text) VALUES (401, 'kitten')")
    assert cache.get(big_fts, "memories_fts", "kitten", 401) == 2  # type: ignore[arg-type]  # within DF_DRIFT
    assert cache.get(big_fts, "memories_fts", "kitten", 420) == 3  # type: ignore[arg-type]  # recounted
    assert cache.get(big_fts, "memories_fts", "kitten", 420, frozenset({"b"})) == 1  # type: ignore[arg-type]
    assert cache.rows(big_fts, "memories_fts", 420, frozenset({"a", None})) == 300  # type: ignore[arg-type]


def test_match_expression_takes_a_term_list():
    assert retrieval.match_expression(["kitten", "sofa"]) == '"kitten" OR "sofa"'


def test_focus_picks_the_sentence_with_the_questions_words():
    from engine.terms import focus

    window = ("The boiler was serviced in September. Recycling goes out on Tuesdays. "
              "The passports are kept in the green folder in the study. The porch light is on a timer.")
    assert focus(window, "Where is my passport?") == "The passports are kept in the green folder in the study."
    assert focus(window, "When is the boiler serviced?") == "The boiler was serviced in September."
    # a short best sentence reads on into the next one
    assert focus("Intro text here. Keys: hook. The hook is by the door. End.", "keys") == (
        "Keys: hook. The hook is by the door.")
    # no word in common: the whole passage, never an arbitrary sentence
    assert focus(window, "travel documents abroad") == window
    assert focus("One sentence only about passports", "passport") == "One sentence only about passports"
