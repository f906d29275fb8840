"""Words rank on PostgreSQL as on SQLite: the same rows found, with the same BM25, for texts without stop
words (PostgreSQL's `english` configuration drops them from a row's length, FTS5 counts them) whose words
both stemmers index alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import store, users
from engine.store.postgres import retrieval as pg_retrieval
from engine.store.postgres.database import Database
from engine.store.types import Filter

FILLER = ["apple", "table", "river", "stone", "cloud", "paper", "glass", "metal", "chair", "bread"]


def texts() -> list[str]:
    """30 rows saying a common word three times, a few saying a rare one once, rows of other lengths."""
    out = [f"garden garden garden {FILLER[i % 10]} {FILLER[(i * 3 + 1) % 10]}" for i in range(30)]
    out += ["garden zebra", "zebra " + " ".join(FILLER[:6]), "zebra bread", "river stone cloud"]
    return out


def insert(con, i: int, text: str) -> None:
    store.memories.insert(
        con, uid=f"mem_{i:03d}", kind="fact", text=text, chash=f"h{i}", importance=0.5, now=1.0, event_at=None,
        project=None, source="user", meta=None, conversation_id=None, document_id=None, done=True,
        dedup_pending=False)


def ranked(con) -> list[tuple[str, float]]:
    found = store.retrieval.lexical_memories(con, ["garden", "zebra"], 3, Filter())
    return [(store.memories.by_id(con, i).uid, s) for i, s in found]


def test_the_best_matches_and_their_bm25_are_the_same_on_both_backends(profile_home: Path, pg_url: str,
                                                                        monkeypatch: pytest.MonkeyPatch):
    from engine import Engine
    from engine.embeddings import NoEmbedder

    with Engine.open(profile_home, embedder=NoEmbedder()) as eng, eng.store.write() as con:
        for i, text in enumerate(texts()):
            insert(con, i, text)
        on_sqlite = ranked(con)
    # PostgreSQL reads its best LEXICAL_FIRST matches before scoring them: few here, so that the 30 rows
    # saying "garden" three times would fill them if the rare word did not weigh more
    monkeypatch.setattr(pg_retrieval, "LEXICAL_FIRST", 4)
    users.add(pg_url, "alice")
    with Database(pg_url) as db:
        with db.transaction(db.users()[0].id) as con:
            for i, text in enumerate(texts()):
                insert(con, i, text)
        with db.transaction(db.users()[0].id) as con:
            on_postgres = ranked(con)
    assert [u for u, _ in on_sqlite] == ["mem_030", "mem_032", "mem_031"]  # the rare word's rows, shortest first
    assert [u for u, _ in on_postgres] == [u for u, _ in on_sqlite]
    assert [s for _, s in on_postgres] == pytest.approx([s for _, s in on_sqlite], rel=1e-6)
