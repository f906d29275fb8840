"""Query handling: the words that are searched, and FTS5 statistics read from a real FTS5 table."""

from __future__ import annotations

import sqlite3

import pytest

from engine import ranking, retrieval


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
