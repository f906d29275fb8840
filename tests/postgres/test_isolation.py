"""Row-level security keeps users apart: a statement written without any user condition, in B's
transaction, reads, changes and deletes only B's rows, and B cannot write a row for A or point at A's rows.
Every table with a user_id (read from the catalog) is covered, and each holds rows of both users."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.types.json import Jsonb

from engine import users
from engine.store.postgres.database import Database
from engine.store.postgres.migrations import APP, OWNER, USER_TABLES, WORD_FUNCTIONS, WORDS
from tests.postgres.sample import populate, user_tables


@pytest.fixture
def two(pg_db: Database) -> tuple[Database, int, int]:
    a = pg_db.add_user("alice", users.token_hash(users.make_token()))
    b = pg_db.add_user("bob", users.token_hash(users.make_token()))
    with pg_db.transaction(a) as con:
        populate(con, "Alice")
    with pg_db.transaction(b) as con:
        populate(con, "Bob")
    return pg_db, a, b


def counts(db: Database, user: int, tables: list[str]) -> dict[str, int]:
    with db.transaction(user) as con:
        return {t: con.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(t))).fetchone()[0]
                for t in tables}


def test_every_user_table_is_secured_and_listed(pg_db: Database):
    with pg_db.transaction(0) as con:
        tables = user_tables(con)
        secured = con.execute(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, pg_get_userbyid(c.relowner), "
            "(SELECT array_agg(p.polcmd::text || ' ' || array_to_string(ARRAY(SELECT CASE WHEN r = 0 THEN 'public' "
            "ELSE pg_get_userbyid(r) END FROM unnest(p.polroles) r), ',') || ' ' || pg_get_expr(p.polqual, p.polrelid) "
            "|| ' / ' || coalesce(pg_get_expr(p.polwithcheck, p.polrelid), '-') ORDER BY p.polname) "
            " FROM pg_policy p WHERE p.polrelid = c.oid) "
            "FROM pg_class c WHERE c.relname = ANY(%s) AND c.relnamespace = 'personal_llm'::regnamespace",
            (tables,)).fetchall()
    assert sorted(tables) == sorted(USER_TABLES)  # the forget deletes from each of them
    assert len(tables) >= 20
    for name, enabled, forced, owner, policies in secured:
        assert enabled and forced and owner == OWNER, name
        expected = "(user_id = (current_setting('app.user_id'::text))::bigint)"
        own = f"* public {expected} / {expected}"
        if name in WORD_FUNCTIONS:  # and the word search's functions read through the GIN index (below)
            assert policies == [own, f"r {WORDS} true / -"], name
        else:
            assert policies == [own], name


def test_every_table_holds_both_users_rows(two):
    db, a, b = two
    with db.transaction(a) as con:
        tables = user_tables(con)
    assert all(n > 0 for n in counts(db, a, tables).values()), counts(db, a, tables)
    assert all(n > 0 for n in counts(db, b, tables).values()), counts(db, b, tables)


def test_an_unscoped_select_returns_none_of_the_other_users_rows(two):
    db, a, b = two
    with db.transaction(b) as con:
        for table in user_tables(con):
            rows = con.execute(sql.SQL("SELECT user_id FROM {}").format(sql.Identifier(table))).fetchall()
            assert rows and {r[0] for r in rows} == {b}, table
        # and not by joining, searching words or vectors either
        assert con.execute("SELECT count(*) FROM memories WHERE tsv @@ to_tsquery('english', 'alice')").fetchone()[0] == 0
        near = con.execute("SELECT m.text FROM memory_vectors v JOIN memories m ON m.id = v.memory_id "
                           "ORDER BY v.embedding <=> (SELECT embedding FROM memory_vectors LIMIT 1) LIMIT 10").fetchall()
        assert near and all("Alice" not in t for (t,) in near)


def test_unscoped_updates_and_deletes_touch_only_ones_own_rows(two):
    db, a, b = two
    with db.transaction(a) as con:
        tables = user_tables(con)
    before = counts(db, a, tables)
    with db.transaction(b) as con:
        assert con.execute("UPDATE memories SET text = 'overwritten'").rowcount == 2  # Bob's two
        for table in USER_TABLES:  # children first
            con.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(table)))
    assert counts(db, a, tables) == before
    assert set(counts(db, b, tables).values()) == {0}
    with db.transaction(a) as con:
        assert "overwritten" not in {r[0] for r in con.execute("SELECT text FROM memories")}


def test_no_row_can_be_written_for_another_user(two):
    """Each of B's rows, inserted again with A's user_id: refused by the policy, in every table."""
    db, a, b = two
    with db.transaction(b) as con:
        for table in user_tables(con):
            columns = [r[0] for r in con.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
                "AND NOT attisdropped AND attgenerated = '' ORDER BY attnum", (f"personal_llm.{table}",))]
            row = con.execute(sql.SQL("SELECT {} FROM {} LIMIT 1").format(
                sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(table))).fetchone()
            values = [a if c == "user_id" else Jsonb(v) if isinstance(v, dict | list) else v
                      for c, v in zip(columns, row, strict=True)]
            with pytest.raises(errors.InsufficientPrivilege, match="row-level security"), con.transaction():
                con.execute(sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                    sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)),
                    sql.SQL(", ").join(sql.Placeholder() * len(values))), values)
            # nor can B move a row of theirs over to A
            with pytest.raises(errors.InsufficientPrivilege, match="row-level security"), con.transaction():
                con.execute(sql.SQL("UPDATE {} SET user_id = %s").format(sql.Identifier(table)), (a,))


def test_no_row_can_point_at_another_users_row(two):
    db, a, b = two
    with db.transaction(a) as con:
        alices = con.execute("SELECT id FROM memories ORDER BY id").fetchall()
        alices_chunk = con.execute("SELECT id FROM chunks").fetchone()[0]
    with db.transaction(b) as con:
        node = con.execute("SELECT id FROM nodes LIMIT 1").fetchone()[0]
        for statement, args in [
            ("INSERT INTO derivations(derived_id, source_id) VALUES (%s, %s)", (alices[0][0], alices[1][0])),
            ("INSERT INTO edges(src, rel, dst, memory_id, created_at) VALUES (%s, 'r', %s, %s, 1)",
             (node, node, alices[0][0])),
            ("INSERT INTO chunk_vectors(chunk_id, embedding) VALUES (%s, %s)", (alices_chunk, "[" + "0.1," * 383 + "0.1]")),
        ]:
            with pytest.raises(errors.ForeignKeyViolation), con.transaction():
                con.execute(statement, args)


def test_a_transaction_without_a_user_reads_and_writes_nothing(two):
    """Before any user was set on the connection the setting does not exist; after one, it is empty (the
    setting was local to that transaction): either way a statement fails instead of reading anyone's rows."""
    db, a, b = two
    unset = (errors.UndefinedObject, errors.InvalidTextRepresentation)
    with db.pool().connection() as con:
        with db.transaction(a):
            pass
        with pytest.raises(unset), con.transaction():
            con.execute("SELECT count(*) FROM memories")
        with pytest.raises(unset), con.transaction():
            con.execute("INSERT INTO state(key, value) VALUES ('k', 'v')")
        with pytest.raises(unset), con.transaction():
            con.execute("DELETE FROM memories")
    with psycopg.connect(db.url) as fresh:
        db._configure(fresh)
        with pytest.raises(errors.UndefinedObject), fresh.transaction():
            fresh.execute("SELECT count(*) FROM memories")
    assert all(n == 2 for n in (counts(db, a, ["memories"])["memories"], counts(db, b, ["memories"])["memories"]))


def test_the_server_works_as_the_app_role_even_with_a_superuser_url(two):
    db, a, b = two
    with db.transaction(a) as con:
        me, superuser, bypass = con.execute(
            "SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user").fetchone()
        assert (me, superuser, bypass) == (APP, False, False)
        with pytest.raises(errors.InsufficientPrivilege), con.transaction():
            con.execute("SELECT hash FROM personal_llm.tokens")
        with pytest.raises(errors.InsufficientPrivilege), con.transaction():
            con.execute("SELECT name FROM personal_llm.users")


def test_a_login_role_that_is_only_an_app_member_is_isolated(two, pg_url: str):
    db, a, b = two
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f"DROP ROLE IF EXISTS plm_server; CREATE ROLE plm_server LOGIN; GRANT {APP} TO plm_server")
    url = pg_url.replace("postgresql://postgres@", "postgresql://plm_server@")
    with Database(url) as server:
        with server.transaction(b) as con:
            assert con.execute("SELECT session_user, current_user").fetchone() == ("plm_server", APP)
            assert {r[0] for r in con.execute("SELECT user_id FROM memories")} == {b}
        assert server.token_user(b"\0" * 32) is None


def test_the_word_search_reads_through_the_index_only_the_users_own_rows(two, pg_url: str):
    """The functions that find rows holding words run as a role every row is visible to (so PostgreSQL may use
    the GIN index under row-level security): they return ids of the transaction's user's rows alone, fail
    without a user, may be run by the app role only, and their role reads nothing but the words' columns."""
    db, a, b = two
    with db.transaction(a) as con:
        own = {r[0] for r in con.execute("SELECT id FROM memories")}
    for user in (a, b):
        with db.transaction(user) as con:
            mine = {table: {r[0] for r in con.execute(sql.SQL("SELECT id FROM {}").format(sql.Identifier(table)))}
                    for table in WORD_FUNCTIONS}
            for table, function in WORD_FUNCTIONS.items():
                found = {r[0] for r in con.execute(
                    sql.SQL("SELECT {}(to_tsquery('english', 'train | porto'))").format(
                        sql.Identifier(function)))}
                assert found == mine[table] and found, (table, user)  # every row holds one of them, and only these
            assert own.isdisjoint(mine["memories"]) == (user == b)
    with db.pool().connection() as con:
        with db.transaction(a):
            pass
        with pytest.raises((errors.UndefinedObject, errors.InvalidTextRepresentation)), con.transaction():
            con.execute("SELECT memories_with_words(to_tsquery('english', 'train'))")
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("SET search_path = personal_llm")
        assert not admin.execute("SELECT pg_has_role(%s, %s, 'MEMBER')", (APP, WORDS)).fetchone()[0]
        for table in user_tables(admin):
            columns = {r[0] for r in admin.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
                (table,))}
            readable = {c for c in columns if admin.execute("SELECT has_column_privilege(%s, %s, %s, 'SELECT')",
                                                            (WORDS, table, c)).fetchone()[0]}
            assert readable == ({"id", "user_id", "tsv"} if table in WORD_FUNCTIONS else set()), table
            assert not admin.execute("SELECT has_table_privilege(%s, %s, 'INSERT, UPDATE, DELETE')",
                                     (WORDS, table)).fetchone()[0]
        for function in WORD_FUNCTIONS.values():
            owner, definer, runs = admin.execute(
                "SELECT pg_get_userbyid(proowner), prosecdef, ARRAY(SELECT grantee::regrole::text FROM "
                "aclexplode(proacl) WHERE privilege_type = 'EXECUTE' AND grantee <> proowner) FROM pg_proc "
                "WHERE proname = %s", (function,)).fetchone()
            assert (owner, definer, runs) == (WORDS, True, [APP]), function
        admin.execute(f"DROP ROLE IF EXISTS plm_server; CREATE ROLE plm_server LOGIN; GRANT {APP} TO plm_server")
    url = pg_url.replace("postgresql://postgres@", "postgresql://plm_server@")
    with Database(url) as server, server.transaction(b) as con, pytest.raises(errors.InsufficientPrivilege):
        con.execute(f"SET LOCAL ROLE {WORDS}")
