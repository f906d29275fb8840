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


def test_a_users_word_scores_never_take_another_users_average_length(two_engines):
    from engine.store.postgres import retrieval

    alice, bob = two_engines
    note = "The passports are kept in the green folder on the study's bookshelf."
    alice.remember(note, embed="sync")
    for i in range(5):  # alice's memories are long, bob's short: their average lengths differ
        alice.remember(" ".join(f"Shelf {i}.{j} of the archive holds tax papers, sorted by month, in grey boxes."
                                for j in range(30)), embed="sync")
    bob.remember(note, embed="sync")
    bob.remember("The bike lock code is 1234.", embed="sync")

    assert alice.recall("passports green folder", k=1)  # alice's average length is read first
    after_alice = bob.recall("passports green folder", k=1)[0].score
    retrieval._averages.clear()
    assert bob.recall("passports green folder", k=1)[0].score == pytest.approx(after_alice)
