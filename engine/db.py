"""Opening the encrypted store: SQLCipher with sqlite-vec loaded, FTS5, WAL.

SQLite errors are mapped here, in one place, to errors written for people.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import sqlcipher3
import sqlite_vec

from .errors import (
    DiskFull,
    EngineError,
    StoreCorrupt,
    StoreLocked,
    StoreReadOnly,
    StoreUnavailable,
    WrongKey,
)

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
    try:
        con = sqlcipher3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                 check_same_thread=False)
    except DatabaseError as e:
        raise environment_error(e, path) or explain(e) from e
    try:
        con.execute("PRAGMA cipher_log_level = NONE")  # SQLCipher's own stderr logging
        con.execute(key_pragma)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except DatabaseError as e:
            env = environment_error(e, path)
            if env is not None and not isinstance(env, StoreCorrupt):
                raise env from e  # read-only, full, locked: the key may well be right
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
    except DatabaseError as e:
        con.close()
        raise environment_error(e, path) or explain(e) from e
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
            except BaseException as e:
                with contextlib.suppress(DatabaseError):
                    con.execute("ROLLBACK")
                if isinstance(e, DatabaseError) and (env := environment_error(e, self.path)) is not None:
                    raise env from e  # disk full, read-only, damaged: say so (a bug stays what it is)
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


# SQLite's primary result codes (the low byte of the extended code in e.sqlite_errorcode).
SQLITE_PERM, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_NOMEM, SQLITE_READONLY = 3, 5, 6, 7, 8
SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_NOTADB = 10, 11, 13, 14, 26
SQLITE_IOERR_SHMSIZE = SQLITE_IOERR | (19 << 8)  # the shared-memory (-shm) file could not be grown: no space


def environment_error(e: BaseException, path: Path | str | None = None) -> StoreUnavailable | StoreLocked | None:
    """The error written for people when a SQLite error is the environment's fault (the one place these
    are mapped): the file or disk is read-only, the disk is full, the store is locked or damaged, the file
    can't be opened. An OSError from writing the profile's other files (no space, read-only, no
    permission) maps the same way. None for anything else (a bug, which must stay visible as one)."""
    if isinstance(e, OSError):  # writing the profile's own files (profile.json, settings, logs) beside the store
        code = {errno.ENOSPC: SQLITE_FULL, errno.EDQUOT: SQLITE_FULL, errno.EROFS: SQLITE_READONLY,
                errno.EACCES: SQLITE_PERM, errno.EPERM: SQLITE_PERM}.get(e.errno or 0)
        if code is None:
            return None
        return environment_error(_coded(e, code), path or (Path(e.filename).parent if e.filename else None))
    code = getattr(e, "sqlite_errorcode", None)
    if not isinstance(code, int):
        return _by_message(e, path)
    primary = code & 0xFF
    where = f" at {path}" if path else ""
    if primary in (SQLITE_BUSY, SQLITE_LOCKED):
        return StoreLocked("Your memory store is busy in another program; try again in a moment.")
    if primary == SQLITE_FULL or code == SQLITE_IOERR_SHMSIZE:
        return DiskFull(f"The disk holding your memory store{where} is full. Free some space and try again; "
                        "the change was not saved, and nothing stored before was lost.")
    if primary in (SQLITE_READONLY, SQLITE_PERM):
        return StoreReadOnly(f"Your memory store{where} can't be written: the file, its folder or the disk is "
                             "read-only. Check the permissions (the folder must be writable too: SQLite keeps its "
                             "journal files beside the store) or whether the disk is mounted read-only.")
    if primary == SQLITE_CANTOPEN and path and _read_only_folder(Path(path)):
        return environment_error(_coded(e, SQLITE_READONLY), path)  # WAL files can't be made beside it
    if primary == SQLITE_CANTOPEN:
        return StoreUnavailable(f"Your memory store{where} can't be opened: its folder is missing, not writable or "
                                "on a disk that is not available. Check the folder and its permissions.")
    if primary in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return StoreCorrupt(f"Your memory store{where} looks damaged. Restore it from a backup or an export "
                            "(`personal-llm import`); do not write to it meanwhile.")
    if primary == SQLITE_IOERR and path and _no_space_left(Path(path)):
        return environment_error(_coded(e, SQLITE_FULL), path)  # SQLite often reports ENOSPC as an I/O error
    if primary == SQLITE_IOERR:
        return StoreUnavailable(f"The disk reported an error while reading or writing your memory store{where} "
                                "(a disk I/O error). Check the disk (free space, a removed or failing drive) and "
                                "try again.")
    if primary == SQLITE_NOMEM:
        return StoreUnavailable("The memory store ran out of memory; close other programs and try again.")
    return None


def _coded(e: BaseException, code: int) -> Exception:
    stand_in = DatabaseError(str(e))
    stand_in.sqlite_errorcode = code  # type: ignore[attr-defined]
    return stand_in


def _read_only_folder(path: Path) -> bool:
    """True when the store's folder exists but can't be written (a read-only disk, or no permission)."""
    folder = path if path.is_dir() else path.parent
    try:
        return folder.is_dir() and (bool(os.statvfs(folder).f_flag & os.ST_RDONLY) or not os.access(folder, os.W_OK))
    except (OSError, AttributeError):  # no statvfs on Windows
        return folder.is_dir() and not os.access(folder, os.W_OK)


def _no_space_left(path: Path) -> bool:
    """True when the disk holding path has (almost) no free space: the usual cause of a write's I/O error."""
    import shutil

    try:
        return shutil.disk_usage(path if path.is_dir() else path.parent).free < 256 * 1024
    except OSError:
        return False


def _by_message(e: BaseException, path: Path | str | None) -> StoreUnavailable | StoreLocked | None:
    """For an error without a result code (older drivers): the same mapping, by SQLite's message."""
    msg = str(e).lower()
    for words, code in ((("locked", "busy"), SQLITE_BUSY), (("full",), SQLITE_FULL),
                        (("readonly", "read-only"), SQLITE_READONLY), (("unable to open",), SQLITE_CANTOPEN),
                        (("malformed", "not a database"), SQLITE_CORRUPT), (("disk i/o",), SQLITE_IOERR)):
        if any(w in msg for w in words):
            return environment_error(_coded(e, code), path)
    return None


def explain(e: Exception) -> EngineError:
    """Map a SQLite error to an environment problem (for people) or a bug."""
    if (env := environment_error(e)) is not None:
        return env
    msg = str(e).lower()
    if "locked" in msg or "busy" in msg:
        return StoreLocked("Your memory store is busy in another program; try again in a moment.")
    if "disk i/o" in msg or "full" in msg or "readonly" in msg or "read-only" in msg:
        return EngineError(f"The disk refused a write to your memory store ({e}). Check free space and permissions.")
    if "not a database" in msg or "malformed" in msg:
        return EngineError("Your memory store looks damaged. Restore it from a backup or an export.")
    return EngineError(f"Internal store error: {e}")
