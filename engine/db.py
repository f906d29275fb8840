"""Opening the encrypted store: SQLCipher with sqlite-vec loaded, FTS5, WAL.

SQLite errors are mapped here, in one place, to errors written for people.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import sqlcipher3
import sqlite_vec

from .errors import EngineError, StoreLocked, WrongKey

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


def connect(path: Path, key_pragma: str) -> Connection:
    """Open (or create) the store and prove the key with one read. Never logs the key."""
    con = sqlcipher3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    try:
        con.execute("PRAGMA cipher_log_level = NONE")  # SQLCipher's own stderr logging
        con.execute(key_pragma)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except DatabaseError as e:
            raise WrongKey(
                f"This key does not open the store at {path} (or the file is not a Personal LLM store). "
                "Nothing was changed."
            ) from e
        con.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        con.execute("PRAGMA secure_delete = ON")  # deleted cells and freed pages are zeroed (engine.erasure)
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
            except OperationalError as e:
                raise StoreLocked(
                    "Another program is writing to your memory store and did not finish in time; try again."
                ) from e
            try:
                yield con
                con.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(DatabaseError):
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
            with contextlib.suppress(DatabaseError):
                con.execute("COMMIT")

    def close(self) -> None:
        with self._all_lock:
            for _, con in self._all:
                with contextlib.suppress(Exception):
                    con.close()
            self._all.clear()
        self._local = threading.local()


def explain(e: Exception) -> EngineError:
    """Map a SQLite error to an environment problem (for people) or a bug."""
    msg = str(e).lower()
    if "locked" in msg or "busy" in msg:
        return StoreLocked("Your memory store is busy in another program; try again in a moment.")
    if "disk i/o" in msg or "full" in msg or "readonly" in msg or "read-only" in msg:
        return EngineError(f"The disk refused a write to your memory store ({e}). Check free space and permissions.")
    if "not a database" in msg or "malformed" in msg:
        return EngineError("Your memory store looks damaged. Restore it from a backup or an export.")
    return EngineError(f"Internal store error: {e}")
