"""One user's view of a server's database: the `Store` the engine's parts use on PostgreSQL.

It offers what the parts ask of a store (engine/store/__init__.py): `write()` (one transaction; a write inside
another on the same thread joins it), `read()` (a consistent snapshot), `con` (this thread's transaction when
it is in one, otherwise a reader that runs each statement in a short transaction of its own) and `path`, the
name people are shown. Every transaction acts for the store's user (`Database.transaction`): row-level
security keeps every statement to that user's rows, whatever it says.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg

from ..seam import register
from .database import Database, explain


class Rows:
    """What a statement of `Reader` returns: its rows, read at once (the transaction has ended)."""

    def __init__(self, rows: list[tuple], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def fetchone(self) -> tuple | None:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[tuple]:
        rows, self._rows = self._rows, []
        return rows

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.fetchall())


class Reader:
    """A thread's connection outside any transaction of its own: each statement runs in a short transaction
    for the store's user, its rows read at once (so that no pooled connection is held between statements)."""

    def __init__(self, store: PgStore) -> None:
        self._store = store

    def execute(self, query: Any, params: Sequence[Any] | dict[str, Any] | None = None) -> Rows:
        with self._store._transaction() as con:
            cur = con.execute(query, params)
            return Rows(cur.fetchall() if cur.description is not None else [], cur.rowcount)


class PgStore:
    """A user's store on a server's database (see the module doc)."""

    def __init__(self, db: Database, user_id: int, user_name: str) -> None:
        self.db = db
        self.user_id = user_id
        self.path = f"{db.where} (user {user_name})"  # shown to people: never the URL's password
        self.after_write: Callable[[], None] | None = None
        self.read_only: Exception | None = None  # why writes are refused (a SQLite file on a full disk); never here
        self._local = threading.local()
        self._reader = Reader(self)

    def _current(self) -> psycopg.Connection | None:
        return getattr(self._local, "con", None)

    @contextlib.contextmanager
    def _transaction(self, *, snapshot: bool = False) -> Iterator[psycopg.Connection]:
        current = self._current()
        if current is not None:  # nested: join the outer transaction
            yield current
            return
        try:
            with self.db.transaction(self.user_id, snapshot=snapshot) as con:
                self._local.con = con
                try:
                    yield con
                finally:
                    self._local.con = None
        except psycopg.Error as e:
            raise explain(e, self.db.url) from e

    def write(self, *, busy_ms: int | None = None) -> contextlib.AbstractContextManager[psycopg.Connection]:
        """One transaction for the user; committed when the block ends, rolled back when it raises."""
        return self._transaction()

    def read(self) -> contextlib.AbstractContextManager[psycopg.Connection]:
        """A consistent snapshot for several reads (REPEATABLE READ: an export's counts and its records, a
        page and its count, agree however the user writes meanwhile); inside a write, that write's
        transaction."""
        return self._transaction(snapshot=True)

    @property
    def con(self) -> psycopg.Connection | Reader:
        """This thread's transaction when it is in one; a reader of short transactions otherwise."""
        return self._current() or self._reader

    @property
    def small(self) -> psycopg.Connection | Reader:
        return self.con

    @property
    def changes(self) -> int:
        return 0

    def keep_cached(self, reads: Callable[[Any], list[tuple[str, tuple]]]) -> None:
        """A SQLite store keeps some pages in its writer's cache; PostgreSQL's buffer cache does that itself."""

    def optimize(self) -> None:
        """Planner statistics are autovacuum's (ANALYZE) on PostgreSQL."""

    def close(self) -> None:
        """The database's pool is shared by every user's store: `Database.close()` closes it."""


register(__package__ or "engine.store.postgres", psycopg.Connection, Reader, PgStore, errors=(psycopg.Error,))
