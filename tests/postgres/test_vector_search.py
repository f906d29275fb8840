"""The vector search on PostgreSQL: a user with few vectors is searched exactly (every distance, no HNSW walk
through a table other users share); a user with many goes through the HNSW index with hnsw.ef_search grown
with their vectors and the candidates asked (engine/store/postgres/vectors.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine import Engine, users
from engine.config import Settings
from engine.memories import Remembered
from engine.store.postgres import vectors
from engine.store.postgres.database import Database
from engine.store.types import Filter

NOTES = [
    ("The spare key to the garden shed hangs behind the kitchen calendar.", "home"),
    ("Our dentist, Dr Okafor, moved her practice to Elm Street in March.", "home"),
    ("Grandma's apple crumble needs twice the cinnamon the recipe says.", "home"),
    ("The quarterly report is due to the finance team on the first Friday.", "work"),
    ("The build server's disk fills up when the nightly logs are not rotated.", "work"),
    ("Priya prefers the meeting notes as a shared document, not by email.", "work"),
]
QUESTION = "where is the key for the shed?"


@pytest.fixture
def alice(pg_db: Database, tmp_path: Path, embedder, monkeypatch):
    monkeypatch.setattr(vectors, "ROWS_TTL", 0.0)  # the count read at each search, not kept from the remembers
    bob = pg_db.add_user("bob", users.token_hash(users.make_token()))
    other = Engine.for_user(pg_db, bob, "bob", home=tmp_path / "server", settings=Settings(), embedder=embedder)
    other.remember_many([Remembered(t, project=p) for t, p in NOTES], embed="sync")  # another user's rows beside
    other.close()
    uid = pg_db.add_user("alice", users.token_hash(users.make_token()))
    eng = Engine.for_user(pg_db, uid, "alice", home=tmp_path / "server", settings=Settings(), embedder=embedder)
    eng.remember_many([Remembered(t, project=p) for t, p in NOTES], embed="sync")
    yield eng
    eng.close()


def exact(con, q: np.ndarray, project: str) -> list[int]:
    """The user's memories of this project by exact cosine to q, best first."""
    rows = con.execute("SELECT v.memory_id, vector_send(v.embedding) FROM memory_vectors v JOIN memories m "
                       "ON m.user_id = v.user_id AND m.id = v.memory_id WHERE m.project = %s", (project,)).fetchall()
    return [i for _, i in sorted((-float(vectors._unpack(b) @ q), i) for i, b in rows)]


def hnsw_scans(con) -> int:
    """Scans of the memories' HNSW index in this transaction."""
    return int(con.execute("SELECT pg_stat_get_xact_numscans('memory_vectors_hnsw'::regclass)").fetchone()[0])


def test_a_user_with_few_vectors_is_searched_exactly_without_the_index(alice, embedder):
    q = embedder.encode([QUESTION])[0]
    index = alice.space.index["memories"]
    with alice.store.read() as con:
        assert index.rows(con) == len(NOTES)  # their own, not the other user's
        con.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off")  # the index, if the order allows
        found = index.search(con, q, 3, Filter(projects={"home"}))
        assert [i for i, _ in found] == exact(con, q, "home")
        assert hnsw_scans(con) == 0


def test_a_user_with_many_vectors_is_searched_through_the_index_with_ef_search_grown(alice, embedder, monkeypatch):
    monkeypatch.setattr(vectors, "EXACT_ROWS", 2)  # six vectors count as many
    q = embedder.encode([QUESTION])[0]
    index = alice.space.index["memories"]
    with alice.store.read() as con:
        con.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off")
        found = index.search(con, q, 3, Filter(projects={"work"}))
        assert [i for i, _ in found] == exact(con, q, "work")  # rescored exactly: the same order
        assert hnsw_scans(con) > 0
        n = max(vectors.MIN_CANDIDATES, vectors.CANDIDATES * 3)
        assert con.execute("SELECT current_setting('hnsw.ef_search')").fetchone()[0] == str(vectors.ef_search(6, n))


def test_ef_search_grows_with_the_users_vectors_and_the_candidates_asked():
    n = vectors.MIN_CANDIDATES
    grown = [vectors.ef_search(rows, n) for rows in (vectors.EXACT_ROWS + 1, 100_000, 1_000_000, 10_000_000)]
    assert grown == sorted(grown) and grown[0] < grown[2]
    assert vectors.ef_search(vectors.EXACT_ROWS + 1, 1) >= vectors.EF_SEARCH
    assert vectors.ef_search(vectors.EXACT_ROWS + 1, 500) == 500  # never fewer than the candidates asked
    assert vectors.ef_search(10**9, n) == vectors.ef_search(10**9, 10**4) == vectors.EF_MAX  # pgvector's limit
