"""One recall on PostgreSQL runs a bounded number of statements, whatever the number of words in the question:
each statement is a round trip to the server, and they were most of a recall's time (docs/server.md)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import psycopg
import pytest

from engine import Engine, users
from engine.config import Settings
from engine.store.postgres.database import Database

# A warm recall (its words' counts cached) runs 24 statements here, three of them while its question is being
# encoded (the turns around the words' candidates and their vectors, read before the rest's: 21 in all before);
# 25 when each search by words counted its words again after the plan had (42, and 62 for the longer question,
# when each word was counted and stemmed in a statement of its own).
MAX_STATEMENTS = 26


@pytest.fixture
def alice(pg_db: Database, tmp_path: Path, embedder):
    uid = pg_db.add_user("alice", users.token_hash(users.make_token()))
    eng = Engine.for_user(pg_db, uid, "alice", home=tmp_path / "server", settings=Settings(), embedder=embedder)
    yield eng
    eng.close()


def statements(monkeypatch, fn) -> tuple[object, Counter]:
    """What fn() returns, and the statements it ran (by text)."""
    seen: Counter = Counter()
    execute = psycopg.Cursor.execute

    def counting(self, query, params=None, **kw):
        seen[query if isinstance(query, str) else repr(query)] += 1
        return execute(self, query, params, **kw)

    with monkeypatch.context() as m:
        m.setattr(psycopg.Cursor, "execute", counting)
        return fn(), seen


def test_one_recall_runs_a_few_statements_whatever_its_words(alice, monkeypatch, tmp_path):
    key = alice.remember("The spare key to the garden shed hangs behind the kitchen calendar.", embed="sync")
    alice.remember("Our dentist, Dr Okafor, moved her practice to Elm Street in March.", embed="sync")
    alice.remember("Grandma's apple crumble needs twice the cinnamon the recipe says.", embed="sync")
    doc = tmp_path / "shed.md"
    doc.write_text("# The shed\n\nThe garden shed holds the mower, the spare tiles and the bicycle pump.\n")
    assert alice.ingest([doc])[0].status == "added"
    short = "garden shed key"
    long = "where is the spare key of the garden shed behind the kitchen calendar hanging now"
    for q in (short, long):  # the words' counts are cached by then, as on a server in use
        alice.recall(q, k=5)

    hits, few = statements(monkeypatch, lambda: alice.recall(short, k=5))
    assert hits and hits[0].id == key.id
    hits, many = statements(monkeypatch, lambda: alice.recall(long, k=5))
    assert hits and hits[0].id == key.id
    assert sum(many.values()) <= MAX_STATEMENTS, many.most_common(5)
    assert sum(many.values()) == sum(few.values()), (many - few).most_common(5)
    # words never asked before are counted in one statement per table, not one per word
    _, cold = statements(monkeypatch, lambda: alice.recall("spare tiles mower bicycle pump kitchen calendar", k=5))
    assert sum(cold.values()) <= MAX_STATEMENTS + 2, cold.most_common(5)
