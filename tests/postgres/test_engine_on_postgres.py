"""The engine's own parts on the PostgreSQL backend: a user's memories stored, recalled by words and by
meaning, forgotten with their vectors, counted; and another user's engine on the same database sees none of
it (row-level security under the parts' own statements)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import Engine, users
from engine.config import Settings
from engine.errors import NotFound
from engine.store import backend_of
from engine.store.postgres.database import Database


@pytest.fixture
def two_engines(pg_db: Database, tmp_path: Path, embedder):
    a = pg_db.add_user("alice", users.token_hash(users.make_token()))
    b = pg_db.add_user("bob", users.token_hash(users.make_token()))
    ea = Engine.for_user(pg_db, a, "alice", home=tmp_path / "server", settings=Settings(), embedder=embedder)
    eb = Engine.for_user(pg_db, b, "bob", home=tmp_path / "server", settings=Settings(), embedder=embedder)
    yield ea, eb
    ea.close()
    eb.close()


def test_a_user_remembers_recalls_and_forgets_on_postgres(two_engines):
    alice, bob = two_engines
    key = alice.remember("The spare key to the garden shed hangs behind the kitchen calendar.")
    alice.remember("Our dentist, Dr Okafor, moved her practice to Elm Street in March.")
    alice.remember("Grandma's apple crumble needs twice the cinnamon the recipe says.")
    assert backend_of(alice.store) == "engine.store.postgres"
    assert alice.get(key.id).text.startswith("The spare key")

    by_words = alice.recall("garden shed key", k=3)
    assert by_words and by_words[0].id == key.id and "fts" in by_words[0].via
    by_meaning = alice.recall("where do we keep the spare key for the outbuilding?", k=3)
    assert by_meaning and by_meaning[0].id == key.id and "vector" in by_meaning[0].via
    assert alice.stats().memories == 3

    # another user of the same database sees nothing of it
    assert bob.recall("garden shed key", k=3) == []
    assert bob.stats().memories == 0
    with pytest.raises(NotFound):
        bob.get(key.id)

    alice.forget(key.id)
    assert [h.id for h in alice.recall("garden shed key", k=3)] != [key.id]
    assert alice.stats().memories == 2
    with alice.store.read() as con:
        assert con.execute("SELECT count(*) FROM memory_vectors").fetchone()[0] == 2
