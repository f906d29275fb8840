"""Helpers for the tests of the PostgreSQL row modules: two users on the test's database, and rows the
other row modules write (memories, vectors), written as the server writes them."""

from __future__ import annotations

import numpy as np
import psycopg

from engine import users
from engine.store.postgres.database import Database

DIM = 384


def two_users(db: Database) -> tuple[int, int]:
    return (db.add_user("alice", users.token_hash(users.make_token())),
            db.add_user("bob", users.token_hash(users.make_token())))


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def put_vector(con: psycopg.Connection, chunk_id: int, v: np.ndarray) -> None:
    con.execute("INSERT INTO chunk_vectors(chunk_id, embedding) VALUES (%s, %s::vector)",
                (chunk_id, "[" + ",".join(repr(float(x)) for x in v) + "]"))
    con.execute("UPDATE chunks SET embedded_hash = content_hash WHERE id = %s", (chunk_id,))


def memory(con: psycopg.Connection, uid: str, text: str, *, document_id: int | None = None,
           project: str | None = None, archived: bool = False, extracted: bool = False) -> int:
    row = con.execute(
        "INSERT INTO memories(uid, kind, text, content_hash, importance, created_at, updated_at, document_id, "
        "project, archived, extracted) VALUES (%s, 'fact', %s, %s, 0.5, 1, 1, %s, %s, %s, %s) RETURNING id",
        (uid, text, f"h_{uid}", document_id, project, archived, extracted)).fetchone()
    assert row is not None
    return int(row[0])


class Both:
    """One scenario of row calls (a function of a write transaction, returning what it read) run on both
    backends: in a desktop profile's SQLite file, and as Alice on the test's PostgreSQL database, where Bob
    has rows of his own (`bob` writes them first, `after` checks as Bob that Alice's scenario left them as they
    were). `run` asserts both backends gave the same answers, and returns them."""

    def __init__(self, home, db: Database) -> None:
        self.home, self.db = home, db
        self.alice, self.bob = two_users(db)

    def run(self, scenario, *, bob=None, after=None) -> list:
        from engine import Engine
        from engine.embeddings import NoEmbedder
        from engine.store import backend_of

        with Engine.open(self.home, embedder=NoEmbedder()) as eng, eng.store.write() as con:
            on_sqlite = scenario(con)
        if bob is not None:
            with self.db.transaction(self.bob) as con:
                bob(con)
        with self.db.transaction(self.alice) as con:
            assert backend_of(con) == "engine.store.postgres"
            on_postgres = scenario(con)
        if after is not None:
            with self.db.transaction(self.bob) as con:
                after(con)
        assert on_postgres == on_sqlite
        return on_sqlite
