"""A test's own look at an engine's rows, written once for both storage backends (tests/integration/conftest.py
runs a test taking `eng` on each): the tables the parts share have the same names and columns on both; the
indexes of words and vectors are each backend's own."""

from __future__ import annotations

from typing import Any


def on_postgres(eng: Any) -> bool:
    return eng.profile is None  # a user of a server's database has no desktop profile


def rows(eng: Any, query: str, params: tuple | list | None = None) -> list[tuple]:
    """The rows of `query` (SQLite's `?` placeholders; written as `%s` for PostgreSQL). Outside a transaction
    of the test's own it reads through the engine's connection (on PostgreSQL: the user's short transaction)."""
    if on_postgres(eng) and params is not None:
        query = query.replace("?", "%s")
    return list(eng.con.execute(query, params).fetchall() if params is not None else eng.con.execute(query).fetchall())


def one(eng: Any, query: str, params: tuple | list | None = None) -> Any:
    """The first column of the first row of `query` (None when it has none)."""
    found = rows(eng, query, params)
    return found[0][0] if found else None


def execute(con: Any, query: str, params: tuple | list | None = None) -> Any:
    """Run `query` in a transaction the test holds (`with eng.store.write() as con:`), on either backend."""
    if params is None:
        return con.execute(query)
    if type(con).__module__.startswith("psycopg"):
        query = query.replace("?", "%s")
    return con.execute(query, params)


def word_count(eng: Any, table: str, word: str) -> int:
    """How many rows of `table` (memories or chunks) the backend's index of words finds `word` in."""
    if on_postgres(eng):
        return int(one(eng, f"SELECT count(*) FROM {table} WHERE tsv @@ plainto_tsquery('english', ?)", (word,)))
    return int(one(eng, f"SELECT count(*) FROM {table}_fts WHERE {table}_fts MATCH ?", (word,)))


def indexed_count(eng: Any, table: str) -> int:
    """How many rows of `table` (memories or chunks) the backend's index of words holds."""
    if on_postgres(eng):  # the words are a generated column of the row itself
        return int(one(eng, f"SELECT count(*) FROM {table} WHERE tsv IS NOT NULL"))
    return int(one(eng, f"SELECT count(*) FROM {table}_fts_docsize"))


def vector_count(eng: Any, table: str) -> int:
    """How many vectors of `table` (memories or chunks) the backend keeps (0 before its first vector table)."""
    if on_postgres(eng):
        return int(one(eng, f"SELECT count(*) FROM {dict(memories='memory_vectors', chunks='chunk_vectors')[table]}"))
    if not one(eng, "SELECT count(*) FROM sqlite_master WHERE name = ?", (f"vec_{table}",)):
        return 0
    return int(one(eng, f"SELECT count(*) FROM vec_{table}"))
