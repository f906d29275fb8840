"""Users and their tokens on a PostgreSQL server: tokens kept only as hashes, removed users locked out,
`--forget` erasing every row of one user and nothing of another's."""

from __future__ import annotations

import hashlib

import numpy as np
import psycopg
import pytest
from psycopg import sql

from engine import users
from engine.errors import NotFound, StoreTooNew, UserError
from engine.store.postgres.database import Database
from engine.store.postgres.migrations import SCHEMA_VERSION, USER_TABLES
from tests.pg_server import bundled_space
from tests.postgres.sample import populate


def every_value(url: str) -> str:
    """Every value of every table of the schema, as text."""
    with psycopg.connect(url) as con:
        tables = [r[0] for r in con.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'personal_llm'::regnamespace AND relkind = 'r'")]
        return "\n".join(str(row) for t in tables for row in con.execute(
            sql.SQL("SELECT * FROM personal_llm.{}").format(sql.Identifier(t))).fetchall())


def test_tokens_are_kept_only_as_hashes(pg_url: str):
    token = users.add(pg_url, "alice")
    assert token.startswith("pllm_") and len(token) >= 40
    assert token not in every_value(pg_url) and token[5:] not in every_value(pg_url)
    with psycopg.connect(pg_url) as con:
        (stored,) = con.execute("SELECT hash FROM personal_llm.tokens").fetchone()
    assert bytes(stored) == hashlib.sha256(token.encode()).digest()
    with Database(pg_url) as db:
        alice = users.authenticate(db, token)
        assert alice is not None
        assert users.authenticate(db, token[:-1] + ("A" if token[-1] != "A" else "B")) is None
        assert users.authenticate(db, "") is None
        assert users.authenticate(db, "pllm_" + "x" * 43) is None


def test_two_users_get_different_tokens_and_names_are_checked(pg_url: str):
    a, b = users.add(pg_url, "alice"), users.add(pg_url, "bob.smith@example.org")
    assert a != b
    with pytest.raises(UserError, match="already a user called 'alice'"):
        users.add(pg_url, "alice")
    for bad in ("", "a b", "-x", "x" * 65, "名前"):
        with pytest.raises(UserError, match="user name"):
            users.add(pg_url, bad)
    assert [u.name for u in users.listing(pg_url)] == ["alice", "bob.smith@example.org"]


def test_removing_a_user_locks_them_out_and_keeps_their_rows(pg_url: str):
    token = users.add(pg_url, "alice")
    with Database(pg_url) as db:
        alice = users.authenticate(db, token)
        assert alice is not None
        with db.transaction(alice) as con:
            populate(con, "Alice")
    assert users.remove(pg_url, "alice", forget=False) == {}
    with Database(pg_url) as db:
        assert users.authenticate(db, token) is None
        with db.transaction(alice) as con:
            assert con.execute("SELECT count(*) FROM memories").fetchone()[0] == 2
    (row,) = users.listing(pg_url)
    assert row.removed and row.tokens == 0
    with pytest.raises(UserError, match="removed user"):
        users.add(pg_url, "alice")
    with pytest.raises(NotFound, match="no user called 'carol'"):
        users.remove(pg_url, "carol", forget=True)


def test_forget_erases_every_row_of_the_user_and_nothing_else(pg_url: str):
    users.add(pg_url, "alice")
    users.add(pg_url, "bob")
    with Database(pg_url) as db:
        ids = {u.name: u.id for u in db.users()}
        for name, uid in ids.items():
            with db.transaction(uid) as con:
                populate(con, name)
    gone = users.remove(pg_url, "alice", forget=True)
    assert set(gone) == set(USER_TABLES) and all(n > 0 for n in gone.values()), gone
    with psycopg.connect(pg_url) as con:  # as the superuser: every user's rows are visible
        left = {t: {r[0] for r in con.execute(sql.SQL("SELECT DISTINCT user_id FROM personal_llm.{}").format(
            sql.Identifier(t)))} for t in USER_TABLES}
        names = [r[0] for r in con.execute("SELECT name FROM personal_llm.users")]
    assert all(who == {ids["bob"]} for who in left.values()), left
    assert names == ["bob"]
    assert "Alice" not in every_value(pg_url)
    assert users.add(pg_url, "alice")  # the name is free again


def test_init_is_idempotent_and_upgrades_an_empty_database(pg_empty_url: str):
    def catalog() -> list:
        with psycopg.connect(pg_empty_url) as con:
            return con.execute(
                "SELECT c.relname, c.relkind, pg_get_userbyid(c.relowner), c.relrowsecurity, c.relforcerowsecurity "
                "FROM pg_class c WHERE c.relnamespace = 'personal_llm'::regnamespace ORDER BY 1").fetchall() + \
                con.execute("SELECT polname FROM pg_policy ORDER BY 1").fetchall()

    with Database(pg_empty_url) as db:
        assert db.schema_version() is None
        first = db.init(bundled_space())
        assert (first.version, first.applied, first.space_changed) == (SCHEMA_VERSION, SCHEMA_VERSION, True)
        before = catalog()
        again = db.init(bundled_space())
        assert (again.version, again.applied, again.space_changed) == (SCHEMA_VERSION, 0, False)
        assert catalog() == before
        assert db.schema_version() == SCHEMA_VERSION


def test_init_upgrades_a_database_of_the_version_before(pg_empty_url: str, monkeypatch: pytest.MonkeyPatch):
    """A server made before the word search's functions (schema 2) gets them from `server init`, its rows kept."""
    from engine.store.postgres import migrations, retrieval
    from engine.store.types import Filter

    with monkeypatch.context() as m:
        m.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:2])
        m.setattr(migrations, "SCHEMA_VERSION", 2)
        with Database(pg_empty_url) as db:
            assert db.init(bundled_space()).version == 2
            alice = db.add_user("alice", users.token_hash(users.make_token()))
            with db.transaction(alice) as con:
                populate(con, "Alice")
                with pytest.raises(psycopg.errors.UndefinedFunction), con.transaction():
                    retrieval.count_memories(con, "train", Filter())
    with Database(pg_empty_url) as db:
        done = db.init(bundled_space())
        assert (done.version, done.applied, done.space_changed) == (SCHEMA_VERSION, SCHEMA_VERSION - 2, False)
        with db.transaction(alice) as con:
            assert retrieval.count_memories(con, "train", Filter()) == 2
            assert [h for h, _ in retrieval.lexical_memories(con, "Porto", 5, Filter())]


def test_init_refuses_a_schema_newer_than_it_knows(pg_url: str):
    with psycopg.connect(pg_url) as con:
        con.execute("INSERT INTO personal_llm.schema_version VALUES (%s, 'm999_future', 0)", (SCHEMA_VERSION + 1,))
    with Database(pg_url) as db, pytest.raises(StoreTooNew, match="newer version"):
        db.init(bundled_space())
    with pytest.raises(StoreTooNew):
        users.add(pg_url, "alice")


def test_vectors_take_the_models_dimension_with_hnsw_cosine_indexes(pg_url: str):
    def described() -> dict:
        with psycopg.connect(pg_url) as con:
            types = dict(con.execute(
                "SELECT c.relname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a JOIN pg_class c "
                "ON c.oid = a.attrelid WHERE c.relnamespace = 'personal_llm'::regnamespace "
                "AND c.relkind = 'r' AND a.attname = 'embedding'").fetchall())
            indexes = [r[0] for r in con.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = 'personal_llm' AND indexdef LIKE '%hnsw%' "
                "ORDER BY 1")]
        return {"types": types, "indexes": indexes}

    now = described()
    assert now["types"] == {t: "vector(384)" for t in ("memory_vectors", "memory_windows", "chunk_vectors")}
    assert len(now["indexes"]) == 3 and all("((embedding)::halfvec(384)) halfvec_cosine_ops" in i
                                            for i in now["indexes"])
    users.add(pg_url, "alice")
    with Database(pg_url) as db:
        (alice,) = [u.id for u in db.users()]
        with db.transaction(alice) as con:
            populate(con, "Alice")
            con.execute("UPDATE memories SET embedded_hash = content_hash")
        # another model: every vector goes, every row waits for a new one, the columns change dimension
        assert db.init(("sentence-transformers", "other-model", 8, "v1")).space_changed
        with db.transaction(alice) as con:
            assert con.execute("SELECT count(*) FROM memory_vectors").fetchone()[0] == 0
            assert con.execute("SELECT count(*) FROM memories WHERE embedded_hash IS NOT NULL").fetchone()[0] == 0
            con.execute("INSERT INTO memory_vectors(memory_id, embedding) SELECT id, '[1,0,0,0,0,0,0,0]' FROM memories")
    assert set(described()["types"].values()) == {"vector(8)"} and len(described()["indexes"]) == 3
    assert all("halfvec(8)" in i for i in described()["indexes"])


def test_schema_version_4_rebuilds_the_hnsw_indexes_in_half_precision(pg_url: str):
    """A database at version 3 (indexes on the single-precision vectors, rows in it) is brought to version 4:
    its indexes become the half-precision ones, its vectors stay."""
    users.add(pg_url, "alice")
    with Database(pg_url) as db:
        (alice,) = [u.id for u in db.users()]
        with db.transaction(alice) as con:
            populate(con, "Alice")
            before = con.execute("SELECT memory_id, embedding::text FROM memory_vectors ORDER BY 1").fetchall()
    with psycopg.connect(pg_url) as con:  # as version 3 left them
        con.execute("SET search_path = personal_llm, public")
        for table in ("memory_vectors", "memory_windows", "chunk_vectors"):
            con.execute(f"DROP INDEX {table}_hnsw")
            con.execute(f"CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops)")
        con.execute("DELETE FROM schema_version WHERE version = 4")
    with Database(pg_url) as db:
        assert db.schema_version() == 3
        assert db.init(bundled_space()).applied == 1
        with db.transaction(alice) as con:
            assert con.execute("SELECT memory_id, embedding::text FROM memory_vectors ORDER BY 1").fetchall() == before
    assert before
    with psycopg.connect(pg_url) as con:
        indexes = [r[0] for r in con.execute("SELECT indexdef FROM pg_indexes WHERE indexname LIKE '%_hnsw'")]
    assert len(indexes) == 3 and all("halfvec(384)) halfvec_cosine_ops" in i for i in indexes), indexes


def test_a_vector_search_walks_the_hnsw_index(pg_url: str, monkeypatch):
    """The search of a user with more vectors than are searched exactly orders by the expression the index is
    built on, so the HNSW index can give its order (another expression could only be sorted after computing
    every row's distance)."""
    from engine.store.postgres import vectors
    from engine.store.types import Filter

    monkeypatch.setattr(vectors, "EXACT_ROWS", 1000)  # alice's 2,000 vectors are past it
    users.add(pg_url, "alice")
    plans: list[str] = []

    class Explaining:
        """The transaction, explaining each search statement before running it."""

        def __init__(self, con: psycopg.Connection) -> None:
            self.con = con

        def execute(self, query: str, params=()):  # noqa: ANN001
            if "ORDER BY" in query and "<=>" in query:
                plans.append("\n".join(r[0] for r in self.con.execute("EXPLAIN " + query, params)))
            return self.con.execute(query, params)

    rng = np.random.default_rng(1)
    with Database(pg_url) as db:
        (alice,) = [u.id for u in db.users()]
        with db.transaction(alice) as con:
            ids = [int(r[0]) for r in con.execute(
                "INSERT INTO memories(uid, kind, text, content_hash, importance, created_at, updated_at) "
                "SELECT 'mem_' || i, 'fact', 'note ' || i, 'h' || i, 0.5, 1, 1 FROM generate_series(1, 2000) i "
                "RETURNING id")]
            vecs = rng.standard_normal((len(ids), 384)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            vectors.put(con, "memories", ids, vecs)
            con.execute("UPDATE memories SET embedded_hash = content_hash")  # counted as embedded
            # a table this small is cheaper to sort than to search by its index: price sorting out, so that
            # the plan shows whether the index can serve the search's order at all
            con.execute("SET LOCAL enable_sort = off")
            found = vectors.VectorIndex("memories", 384).search(Explaining(con), vecs[7], 10, Filter())
    assert found[0][0] == ids[7] and found[0][1] == pytest.approx(1.0, abs=1e-5)
    assert len(plans) == 2 and "Index Scan using memory_vectors_hnsw" in plans[0], plans
    assert "Index Scan using memory_windows_hnsw" in plans[1] and "Sort" not in "".join(plans), plans


def test_words_are_searched_through_the_generated_tsvector(pg_url: str):
    users.add(pg_url, "alice")
    with Database(pg_url) as db:
        (alice,) = [u.id for u in db.users()]
        with db.transaction(alice) as con:
            populate(con, "Alice")
            q = "SELECT uid FROM memories WHERE tsv @@ websearch_to_tsquery('english', 'trains booking')"
            assert [r[0] for r in con.execute(q)] == ["mem_Alice"]  # stems: booked ~ booking, train ~ trains
            assert con.execute("SELECT count(*) FROM chunks WHERE tsv @@ websearch_to_tsquery('english', "
                               "'Porto')").fetchone()[0] == 1
            indexes = {r[0] for r in con.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = 'personal_llm' "
                                                 "AND indexdef LIKE '%USING gin (tsv)'")}
            assert len(indexes) == 2


def test_the_servers_statements_start_no_parallel_workers(pg_url: str):
    """Each statement of the server's connections runs in its own backend: a parallel worker started for each
    search of a user's vectors (an exact search over a table of 20,000) cost 43 ms where the backend alone took
    3, while the other requests waited for the same cores. The settings of a session outside the pool stay the
    server's own."""
    users.add(pg_url, "alice")
    with Database(pg_url) as db:
        (alice,) = [u.id for u in db.users()]
        with db.transaction(alice) as con:
            assert con.execute("SELECT current_setting('max_parallel_workers_per_gather')").fetchone()[0] == "0"
    with psycopg.connect(pg_url) as con:
        assert con.execute("SELECT current_setting('max_parallel_workers_per_gather')").fetchone()[0] != "0"
