"""Opening the encrypted store: SQLCipher with sqlite-vec loaded, FTS5, WAL.

SQLite errors are mapped here, in one place (`explain`, by result code): an environment problem (busy,
disk full, read-only, damaged file) becomes an error written for people; anything else is our bug and
is raised as it is. Every connection the store opens is a `MappedConnection`, so every statement's
errors pass through `explain`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlcipher3
import sqlite_vec

from .errors import EngineError, StoreDamaged, StoreLocked, StoreUnavailable, WrongKey
from .models import StoreDiagnostics

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from sqlite3 import Connection  # sqlcipher3 keeps sqlite3's API and ships no type information
else:
    Connection = sqlcipher3.Connection
DatabaseError = sqlcipher3.DatabaseError
OperationalError = sqlcipher3.OperationalError
IntegrityError = sqlcipher3.IntegrityError

BUSY_TIMEOUT_MS = 10_000
# Page cache sized for the vector data: with SQLCipher's default cache every page is decrypted again on
# each scan. 256 MB upper bound (negative = KiB); pages are only allocated when used.
CACHE_KIB = 262_144


# primary result codes (https://sqlite.org/rescode.html)
SQLITE_PERM, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_NOMEM, SQLITE_READONLY = 3, 5, 6, 7, 8
SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_PROTOCOL = 10, 11, 13, 14, 15
SQLITE_NOTADB = 26
_ENVIRONMENT = {
    SQLITE_PERM: "the operating system refused access to it",
    SQLITE_NOMEM: "the computer ran out of memory",
    SQLITE_READONLY: "it can only be read (a read-only disk or file)",
    SQLITE_IOERR: "the disk reported an input/output error",
    SQLITE_FULL: "the disk is full",
    SQLITE_CANTOPEN: "the file cannot be opened (check that its folder exists and is writable)",
    SQLITE_PROTOCOL: "another program holds a lock it should not",
}


def explain(e: Exception) -> EngineError | None:
    """Map a SQLite error by its result code: an environment problem becomes an error for people; None
    means it is a bug (a wrong statement, a broken constraint), to be raised as it is."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is None:
        return None
    primary = code & 0xFF
    if primary in (SQLITE_BUSY, SQLITE_LOCKED):
        return StoreLocked("Your memory store is busy in another program; try again in a moment.")
    if primary in _ENVIRONMENT:
        return StoreUnavailable(f"Your memory store could not be used: {_ENVIRONMENT[primary]}. Nothing was changed.")
    if primary in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return StoreDamaged("Your memory store looks damaged. Restore it from a backup or an export.")
    return None


class MappedConnection(sqlcipher3.Connection):
    """A connection whose statements raise `explain`ed errors for environment problems."""

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        try:
            return super().execute(sql, parameters)
        except DatabaseError as e:
            mapped = explain(e)
            if mapped is None:
                raise
            raise mapped from e

    def executemany(self, sql: str, seq: Any, /) -> Any:
        try:
            return super().executemany(sql, seq)
        except DatabaseError as e:
            mapped = explain(e)
            if mapped is None:
                raise
            raise mapped from e

    def executescript(self, script: str, /) -> Any:
        try:
            return super().executescript(script)
        except DatabaseError as e:
            mapped = explain(e)
            if mapped is None:
                raise
            raise mapped from e


def connect(path: Path, key_pragma: str) -> Connection:
    """Open (or create) the store and prove the key with one read. Never logs the key."""
    try:
        con = sqlcipher3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                 check_same_thread=False, factory=MappedConnection)
    except DatabaseError as e:
        mapped = explain(e)
        if mapped is None:
            raise
        raise mapped from e
    try:
        con.execute("PRAGMA cipher_log_level = NONE")  # SQLCipher's own stderr logging
        con.execute(key_pragma)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except (DatabaseError, StoreDamaged) as e:
            raise WrongKey(
                f"This key does not open the store at {path} (or the file is not a Personal LLM store). "
                "Nothing was changed."
            ) from e
        con.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        con.execute("PRAGMA journal_mode = WAL")
        con.execute("PRAGMA synchronous = NORMAL")
        con.execute("PRAGMA foreign_keys = ON")
        con.execute("PRAGMA temp_store = MEMORY")
        con.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        con.enable_load_extension(True)
        sqlite_vec.load(con)
        con.enable_load_extension(False)
    except BaseException:
        con.close()
        raise
    return con


class Store:
    """Per-thread connections to one encrypted file, and one writer at a time in this process."""

    def __init__(self, path: Path, key_pragma: str):
        self.path = path
        self._key_pragma = key_pragma
        self._local = threading.local()
        self._all: list[tuple[threading.Thread, Connection]] = []
        self._all_lock = threading.Lock()
        self.write_lock = threading.RLock()
        _ = self.con  # open now so a wrong key fails at once

    @property
    def con(self) -> Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = connect(self.path, self._key_pragma)
            self._local.con = con
            with self._all_lock:
                self._close_orphans()
                self._all.append((threading.current_thread(), con))
        return con

    def _close_orphans(self) -> None:
        """Close the connections of threads that have ended (thread pools come and go)."""
        alive = []
        for thread, con in self._all:
            if thread.is_alive():
                alive.append((thread, con))
            else:
                with contextlib.suppress(Exception):
                    con.close()
        self._all = alive

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """One transaction under the process-wide write lock; rolled back on any error."""
        with self.write_lock:
            con = self.con
            if con.in_transaction:  # nested: join the outer transaction
                yield con
                return
            try:
                con.execute("BEGIN IMMEDIATE")
            except StoreLocked as e:
                raise StoreLocked(
                    "Another program is writing to your memory store and did not finish in time; try again."
                ) from e
            try:
                yield con
                con.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(DatabaseError, EngineError):
                    con.execute("ROLLBACK")
                raise

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A consistent snapshot for several reads."""
        con = self.con
        if con.in_transaction:
            yield con
            return
        con.execute("BEGIN")
        try:
            yield con
        finally:
            with contextlib.suppress(DatabaseError, EngineError):
                con.execute("COMMIT")

    def close(self) -> None:
        with self._all_lock:
            for _, con in self._all:
                with contextlib.suppress(Exception):
                    con.close()
            self._all.clear()
        self._local = threading.local()


def diagnose(con: Connection, *, expected_schema: int) -> StoreDiagnostics:
    """How this store is built: schema version, SQLCipher, sqlite-vec (for the self-test)."""
    cipher = con.execute("PRAGMA cipher_version").fetchone()
    length = con.execute("SELECT vec_length(vec_f32(?))", (json.dumps([0.5, 0.25, 0.125]),)).fetchone()[0]
    return StoreDiagnostics(
        schema_version=con.execute("PRAGMA user_version").fetchone()[0], expected_schema_version=expected_schema,
        cipher_version=cipher[0] if cipher and cipher[0] else None,
        vec_version=con.execute("SELECT vec_version()").fetchone()[0], vec_length_ok=length == 3,
    )
