"""Opening the encrypted store: SQLCipher with sqlite-vec loaded, FTS5, WAL.

SQLite errors are mapped here, in one place (`explain`, by result code): an environment problem (busy,
disk full, read-only, damaged file, a folder that can't be opened; also the OSErrors of writing the
profile's own files) becomes an error written for people; anything else is our bug and is raised as it
is. Every connection the store opens is a `MappedConnection`, so every statement's errors pass through
`explain`; `Store.write` and the entry points' last-resort handlers (through `Engine.explain`) use it too.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import sqlcipher3
import sqlite_vec

from ...errors import (
    DiskFull,
    EngineError,
    StoreCorrupt,
    StoreLocked,
    StoreReadOnly,
    StoreUnavailable,
    WrongKey,
)
from ..seam import register
from . import mirror_layout

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from sqlite3 import Connection  # sqlcipher3 keeps sqlite3's API and ships no type information

    from ...models import StoreDiagnostics
else:
    Connection = sqlcipher3.Connection
DatabaseError = sqlcipher3.DatabaseError
OperationalError = sqlcipher3.OperationalError
ProgrammingError = sqlcipher3.ProgrammingError
IntegrityError = sqlcipher3.IntegrityError

BUSY_TIMEOUT_MS = 10_000
# Page cache sized for the vector data: with SQLCipher's default cache every page is decrypted again on
# each scan. 256 MB upper bound (negative = KiB); pages are only allocated when used.
CACHE_KIB = 262_144
SMALL_CACHE_KIB = 1024  # Store.small: a poll's connection
# Planner statistics are refreshed (`PRAGMA optimize`) when the store opens and after the writer's writes
# changed this many rows since the last refresh; ANALYZE reads at most ANALYSIS_LIMIT rows of each index.
OPTIMIZE_AFTER_CHANGES = 20_000
ANALYSIS_LIMIT = 1000
# Prepared statements a connection keeps. sqlcipher3's cache (pysqlite's) orders its entries by use and,
# once full, gives a statement not seen before only its last slot: the next new one takes it. IN lists of
# every length filled the default 100 after a few recalls, and from then on every statement a process had
# not used by then (the six of `stats`, say) was prepared again on each run, 2x the time of a short one.
# So: room enough, and IN lists of few lengths (`marks`/`padded`), so that the statements are a bounded set.
CACHED_STATEMENTS = 1024


# SQLite's primary result codes (the low byte of the extended code in e.sqlite_errorcode;
# https://sqlite.org/rescode.html)
SQLITE_PERM, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_NOMEM, SQLITE_READONLY = 3, 5, 6, 7, 8
SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_PROTOCOL = 10, 11, 13, 14, 15
SQLITE_NOTADB = 26
SQLITE_IOERR_SHMSIZE = SQLITE_IOERR | (19 << 8)  # the shared-memory (-shm) file could not be grown: no space
_OS_ERRORS = {errno.ENOSPC: SQLITE_FULL, errno.EDQUOT: SQLITE_FULL, errno.EROFS: SQLITE_READONLY,
              errno.EACCES: SQLITE_PERM, errno.EPERM: SQLITE_PERM}


def explain(e: BaseException, path: Path | str | None = None) -> StoreUnavailable | StoreLocked | None:
    """The error written for people when a SQLite error is the environment's fault (the one place these
    are mapped, by result code): the store is busy or locked, the disk is full, the file, its folder or
    the disk is read-only, the file is damaged or can't be opened, the disk reported an I/O error. An
    OSError from writing the profile's other files (no space, read-only, no permission) maps the same
    way. None for anything else: a bug (a wrong statement, a broken constraint), to be raised as it is.
    ``path`` (the store file) is named in the message when known."""
    if isinstance(e, OSError):  # writing the profile's own files (profile.json, settings, logs) beside the store
        code = _OS_ERRORS.get(e.errno or 0)
        if code is None:
            return None
        return explain(_coded(e, code), path or (Path(e.filename).parent if e.filename else None))
    if not isinstance(e, DatabaseError):
        return None
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
        return explain(_coded(e, SQLITE_READONLY), path)  # WAL files can't be made beside it
    if primary == SQLITE_CANTOPEN:
        return StoreUnavailable(f"Your memory store{where} can't be opened: its folder is missing, not writable or "
                                "on a disk that is not available. Check the folder and its permissions.")
    if primary in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return StoreCorrupt(f"Your memory store{where} looks damaged. Restore it from a backup or an export "
                            "(`personal-llm import`); do not write to it meanwhile.")
    if primary == SQLITE_IOERR and path and _no_space_left(Path(path)):
        return explain(_coded(e, SQLITE_FULL), path)  # SQLite often reports ENOSPC as an I/O error
    if primary == SQLITE_IOERR:
        return StoreUnavailable(f"The disk reported an error while reading or writing your memory store{where} "
                                "(a disk I/O error). Check the disk (free space, a removed or failing drive) and "
                                "try again.")
    if primary == SQLITE_NOMEM:
        return StoreUnavailable("The memory store ran out of memory; close other programs and try again.")
    if primary == SQLITE_PROTOCOL:
        return StoreUnavailable(f"Your memory store{where} could not be used: another program holds a lock it "
                                "should not. Nothing was changed; close other programs using it and try again.")
    return None


def _coded(e: BaseException, code: int) -> Exception:
    stand_in = DatabaseError(str(e))
    stand_in.sqlite_errorcode = code  # type: ignore[attr-defined]
    return stand_in


def read_only_folder(path: Path) -> StoreReadOnly | None:
    """The error for a store whose folder or disk can't be written (checked before opening it), else None."""
    if not _read_only_folder(path):
        return None
    error = explain(_coded(DatabaseError("read-only"), SQLITE_READONLY), path)
    return error if isinstance(error, StoreReadOnly) else None


def _read_only_folder(path: Path) -> bool:
    """True when the store's folder exists but can't be written (a read-only disk, or no permission)."""
    folder = path if path.is_dir() else path.parent
    try:
        return folder.is_dir() and (bool(os.statvfs(folder).f_flag & os.ST_RDONLY) or not os.access(folder, os.W_OK))
    except (OSError, AttributeError):  # no statvfs on Windows
        return folder.is_dir() and not os.access(folder, os.W_OK)


def _no_space_left(path: Path) -> bool:
    """True when the disk holding path has (almost) no free space: the usual cause of a write's I/O error."""
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
            return explain(_coded(e, code), path)
    return None


class MappedConnection(sqlcipher3.Connection):
    """A connection whose statements raise `explain`ed errors for environment problems."""

    def __init__(self, database: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(database, *args, **kwargs)
        self._store_path = database
        self.cipher: tuple[str, ...] = ()  # the page settings it opened with (CIPHERS)

    def _mapped(self, e: Exception) -> EngineError | None:
        return explain(e, self._store_path)

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        try:
            return super().execute(sql, parameters)
        except DatabaseError as e:
            mapped = self._mapped(e)
            if mapped is None:
                raise
            raise mapped from e

    def executemany(self, sql: str, seq: Any, /) -> Any:
        try:
            return super().executemany(sql, seq)
        except DatabaseError as e:
            mapped = self._mapped(e)
            if mapped is None:
                raise
            raise mapped from e

    def executescript(self, script: str, /) -> Any:
        try:
            return super().executescript(script)
        except DatabaseError as e:
            mapped = self._mapped(e)
            if mapped is None:
                raise
            raise mapped from e


# How the pages are encrypted. SQLCipher 4 (AES-256-CBC, a random IV and an HMAC per page) with HMAC-SHA256
# and 8 KiB pages for stores made now: reading pages (a big store's first search reads hundreds of MB) runs
# 1.9x as fast as with SQLCipher 4's defaults (HMAC-SHA512, 4 KiB pages), which stores made before keep
# (docs/security.md; bench: docs/performance.md). The settings are not written anywhere: a store opens with
# the first that proves the key, and a copy of a store (a snapshot) must be made with its store's.
CIPHER_CURRENT: tuple[str, ...] = ("PRAGMA cipher_page_size = 8192", "PRAGMA cipher_hmac_algorithm = HMAC_SHA256")
CIPHER_LEGACY: tuple[str, ...] = ()  # SQLCipher 4's defaults
CIPHERS = (CIPHER_CURRENT, CIPHER_LEGACY)
_cipher_seen: dict[str, tuple[str, ...]] = {}  # path -> the settings it last opened with (tried first)


def _cipher_order(path: Path, key_pragma: str) -> list[tuple[str, ...]]:
    """The settings to try: what this file opened with last, else the current ones first (an empty file
    takes the first settings tried, so a new store always gets them), except for a key SQLCipher derives
    from a passphrase: only stores from before wrapped keys have one, and they were made with the defaults."""
    try:
        empty = path.stat().st_size == 0
    except OSError:
        empty = True
    order = list(CIPHERS)
    if not empty and "x'" not in key_pragma:
        order.reverse()
    seen = _cipher_seen.get(str(path))
    if seen is not None and not empty:
        order.remove(seen)
        order.insert(0, seen)
    return order


def connect(path: Path, key_pragma: str, cipher: tuple[str, ...] | None = None, *,
            read_only: bool = False) -> Connection:
    """Open (or create) the store and prove the key with one read. Never logs the key. `cipher`: the page
    settings to use (a new copy of a store takes its store's, `cipher_of`); by default each of
    CIPHERS is tried (see `_cipher_order`). `read_only`: open it for reading only, writing nothing beside it
    (see `Store`)."""
    order = [cipher] if cipher is not None else _cipher_order(path, key_pragma)
    for i, settings in enumerate(order):
        try:
            con = _connect_read_only(path, key_pragma, settings) if read_only else _connect(path, key_pragma, settings)
        except WrongKey:
            if i == len(order) - 1:
                raise
            continue
        _cipher_seen[str(path)] = settings
        return con
    raise AssertionError("no cipher settings to try")


def cipher_of(con: Connection) -> tuple[str, ...]:
    """The page settings (one of CIPHERS) a connection opened its store with."""
    return getattr(con, "cipher", CIPHER_LEGACY)


MAX_VARIABLES = 32_766  # SQLite's bound on the values of one statement (SQLITE_MAX_VARIABLE_NUMBER)


def _in_list_length(n: int) -> int:
    """Powers of two up to 1,024, then multiples of 1,024 (never past what a statement may bind)."""
    if n <= 1024:
        return 0 if n == 0 else 1 << (n - 1).bit_length()
    up = -(-n // 1024) * 1024
    return up if up <= MAX_VARIABLES else n


def marks(values: Sized) -> str:
    """The `?` marks of an SQL IN list of these values: as many as `padded(values)` binds (the next power of
    two; past 1,024 the next multiple of it), so that a statement's text takes one of a few forms whatever
    the list's length (CACHED_STATEMENTS)."""
    return ",".join("?" * _in_list_length(len(values)))


def padded(values: Iterable[Any]) -> list[Any]:
    """The values to bind to `marks(values)`: the last one repeated up to its length (an IN list means the same
    with a value twice)."""
    out = list(values)
    return out + out[-1:] * (_in_list_length(len(out)) - len(out))


def _connect_read_only(path: Path, key_pragma: str, cipher: tuple[str, ...]) -> Connection:
    """The store opened for reading only, writing nothing beside it. First with `readonly_shm`: SQLite uses
    the -shm file without writing it or, when that file can't be used (a full or read-only disk), reads the
    write-ahead log into memory. When there is no -shm and none can be made (a read-only disk) and no log
    to read, as `immutable`: nothing can change the file meanwhile, and there is nothing else to read."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        return _connect(path, key_pragma, cipher, uri + "&readonly_shm=1")
    except (StoreReadOnly, StoreUnavailable, DiskFull):
        wal = path.with_name(path.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise
        return _connect(path, key_pragma, cipher, uri + "&immutable=1")


def _connect(path: Path, key_pragma: str, cipher: tuple[str, ...], uri: str | None = None) -> Connection:
    try:
        con = sqlcipher3.connect(uri or str(path), uri=uri is not None,
                                 timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                 check_same_thread=False, factory=MappedConnection,
                                 cached_statements=CACHED_STATEMENTS)
    except DatabaseError as e:
        mapped = explain(e, path)
        if mapped is None:
            raise
        raise mapped from e
    try:
        con.execute("PRAGMA cipher_log_level = NONE")  # SQLCipher's own stderr logging
        con.execute(key_pragma)
        for pragma in cipher:
            con.execute(pragma)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except (DatabaseError, StoreCorrupt) as e:  # read-only, full, locked: raised as they are (the key may be right)
            raise WrongKey(
                f"This key does not open the store at {path} (or the file is not a Personal LLM store). "
                "Nothing was changed."
            ) from e
        con.cipher = cipher
        con.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        con.execute("PRAGMA secure_delete = ON")  # deleted cells and freed pages are zeroed (engine.erasure)
        if uri is None:
            con.execute("PRAGMA journal_mode = WAL")
        con.execute("PRAGMA synchronous = NORMAL")
        con.execute("PRAGMA foreign_keys = ON")
        con.execute("PRAGMA temp_store = MEMORY")
        con.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        con.enable_load_extension(True)
        sqlite_vec.load(con)
        con.enable_load_extension(False)
        mirror_layout.register(con)  # called by the vector mirror's delete triggers (engine/store/sqlite/vectors.py)
    except DatabaseError as e:
        con.close()
        mapped = explain(e, path)
        if mapped is None:
            raise
        raise mapped from e
    except BaseException:
        con.close()
        raise
    return con


class Store:
    """Per-thread connections to one encrypted file for reads, and one connection for every write transaction
    in this process (`write`), one at a time.

    One writer keeps its page cache: SQLite empties a connection's cache whenever another connection has
    committed, so with a connection per thread each write emptied the cache of the next thread's write and
    every write read its pages again (at 1M memories those were often on disk, docs/performance.md). What a
    write reads stays cached from one write to the next, whichever thread makes it; `keep_cached` names
    pages the writer should hold even before a write needs them, read again after another connection's
    commit emptied its cache.

    Opened `read_only` (when a full or read-only disk refused the normal open, engine/unlock.py), its
    connections read through `_read_only_uri`: recall, listing, export and backup to another disk work,
    and every write raises the error that made it read-only."""

    def __init__(self, path: Path, key_pragma: str, *, read_only: EngineError | None = None):
        self.path = path
        self._key_pragma = key_pragma
        # why the store could only be opened for reading (a full or read-only disk), or None: reads work,
        # each write raises this error again, and nothing is written beside the file
        self.read_only = read_only
        self._local = threading.local()
        self._small = threading.local()
        self._all: list[tuple[threading.Thread, Connection]] = []
        self._all_lock = threading.Lock()
        self.write_lock = threading.RLock()
        self.cipher: tuple[str, ...] | None = None  # the page settings (CIPHERS), known once it opened
        self.after_write: Callable[[], None] | None = None  # called after each committed write transaction
        self._writer: Connection | None = None
        self._writing: int | None = None  # the thread whose write transaction the writer holds
        self._optimized_at = 0  # the writer's total_changes at the last `optimize`
        self._seen_version: int | None = None  # the writer's `PRAGMA data_version` after its last transaction
        self._cached_reads: Callable[[Connection], list[tuple[str, tuple]]] | None = None
        self._warmer: threading.Thread | None = None
        self._warm_again = False
        self._closing = False
        self.warm_rounds = 0  # rounds of `keep_cached`'s reads finished (tests, benchmarks)
        _ = self.con  # open now so a wrong key fails at once

    @property
    def writer(self) -> Connection:
        """The connection every write transaction of this process runs on (use it under `write_lock`)."""
        if self._writer is not None:
            return self._writer
        with self._all_lock:
            if self._writer is None:
                self._writer = self.connect()
                self.cipher = cipher_of(self._writer)
            return self._writer

    def optimize(self) -> None:
        """Refresh the planner's statistics where they are missing or stale (`PRAGMA optimize`: cheap, it
        analyses only tables whose size changed a lot, each on at most ANALYSIS_LIMIT rows). The hot
        statements do not depend on it (they have plans that are right without statistics,
        tests/integration/test_query_plans.py); it keeps the others' choices good. Skipped when another
        program is writing (statistics are a hint, never worth a wait)."""
        if self.read_only is not None:
            return
        with self.write_lock:
            self._optimize(self.writer)

    def _optimize(self, con: Connection) -> None:
        if con.in_transaction:
            return
        try:
            con.execute("PRAGMA busy_timeout = 0")
            con.execute(f"PRAGMA analysis_limit = {ANALYSIS_LIMIT}")
            con.execute("PRAGMA optimize = 0x10002")
        except (DatabaseError, EngineError) as e:
            log.info("planner statistics not refreshed now: %s", type(e).__name__)
        finally:
            with contextlib.suppress(DatabaseError, EngineError):
                con.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self._optimized_at = con.total_changes

    def connect(self) -> Connection:
        """A new connection to the store that is not this thread's (the caller closes it): a thread reading in
        the background, a save with its own busy timeout, a re-key."""
        return connect(self.path, self._key_pragma, self.cipher, read_only=self.read_only is not None)

    @property
    def con(self) -> Connection:
        """This thread's connection; the writer while this thread is in a write transaction (so what it
        reads there includes what it wrote)."""
        if self._writing == threading.get_ident():
            return self.writer
        con = getattr(self._local, "con", None)
        if con is None:
            con = self.connect()
            self.cipher = cipher_of(con)
            self._local.con = con
            self._keep(con)
        return con

    @property
    def small(self) -> Connection:
        """This thread's connection with a small page cache, for a poll that runs after other connections'
        writes: SQLite empties a connection's cache when another one has committed, at a cost that grows with
        what the cache holds (6.5 ms for a 256 MB cache full of pages, docs/performance.md)."""
        con = getattr(self._small, "con", None)
        if con is None:
            con = self.connect()
            con.execute(f"PRAGMA cache_size = -{SMALL_CACHE_KIB}")
            self._small.con = con
            self._keep(con)
        return con

    def _keep(self, con: Connection) -> None:
        """A connection of this thread's, closed with the store or once the thread has ended."""
        with self._all_lock:
            self._close_orphans()
            self._all.append((threading.current_thread(), con))

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

    @property
    def changes(self) -> int:
        """Rows this process's writes have changed since the store opened (the writer's total_changes; 0
        before its first write): a count that moves when this process writes."""
        writer = self._writer
        return writer.total_changes if writer is not None else 0

    @contextlib.contextmanager
    def write(self, *, busy_ms: int | None = None) -> Iterator[Connection]:
        """One transaction on the writer, under the process-wide write lock; rolled back on any error. A
        write inside another on the same thread joins it. `busy_ms`: how long to wait for another program's
        write (BUSY_TIMEOUT_MS by default; work in the background gives way sooner)."""
        if self.read_only is not None:
            raise type(self.read_only)(str(self.read_only))
        with self.write_lock:
            con = self.writer
            if con.in_transaction:  # nested: join the outer transaction
                yield con
                return
            try:
                if busy_ms is not None:
                    con.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
                try:
                    con.execute("BEGIN IMMEDIATE")
                finally:
                    if busy_ms is not None:
                        con.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            except StoreLocked as e:
                raise StoreLocked(
                    "Another program is writing to your memory store and did not finish in time; try again."
                ) from e
            self._writing = threading.get_ident()
            try:
                self._check_cache(con)
                yield con
                con.execute("COMMIT")
            except BaseException as e:
                with contextlib.suppress(DatabaseError, EngineError):
                    con.execute("ROLLBACK")
                if isinstance(e, DatabaseError) and (env := explain(e, self.path)) is not None:
                    raise env from e  # disk full, read-only, damaged: say so (a bug stays what it is)
                raise
            finally:
                self._writing = None
            if con.total_changes - self._optimized_at >= OPTIMIZE_AFTER_CHANGES:
                self._optimize(con)  # a large write: the statistics follow (still under the write lock)
        if self.after_write is not None:
            self.after_write()

    def _check_cache(self, con: Connection) -> None:
        """In a write transaction: when another connection has committed since the writer's last transaction,
        SQLite has just emptied the writer's page cache, and the pages `keep_cached` names are read again."""
        version = con.execute("PRAGMA data_version").fetchone()[0]
        if version != self._seen_version:
            if self._seen_version is not None and self._cached_reads is not None:
                self._warm_soon()
            self._seen_version = version

    def keep_cached(self, reads: Callable[[Connection], list[tuple[str, tuple]]]) -> None:
        """Have the writer hold some pages in its cache: `reads(con)` gives the statements that read them
        (each short: a write waits for at most one). They run now, on a thread of their own, and again
        whenever another connection's commit has emptied the writer's cache."""
        self._cached_reads = reads
        self._warm_soon()

    def _warm_soon(self) -> None:
        with self._all_lock:
            if self._closing:
                return
            if self._warmer is not None and self._warmer.is_alive():
                self._warm_again = True
                return
            self._warm_again = False
            self._warmer = threading.Thread(target=self._warm, name="writer-cache", daemon=True)
            self._warmer.start()

    def _warm(self) -> None:
        reads = self._cached_reads
        if reads is None:
            return
        try:
            while True:
                with self._warm_turn() as open_:
                    if not open_:
                        return
                    con = self.writer
                    statements = reads(con)
                    # what the cache holds from here on: a commit elsewhere during the reads is seen by the
                    # next write (`_check_cache`), which has them read again
                    self._seen_version = con.execute("PRAGMA data_version").fetchone()[0]
                for sql, params in statements:
                    with self._warm_turn() as open_:
                        if not open_:
                            return
                        con.execute(sql, params).fetchall()
                with self._all_lock:
                    self.warm_rounds += 1
                    again, self._warm_again = self._warm_again, False
                if not again:
                    return
        except (DatabaseError, EngineError) as e:  # busy, closing, damaged: the writes read what they need
            log.info("the writer's pages were not read ahead: %s", type(e).__name__)

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

    @contextlib.contextmanager
    def _warm_turn(self) -> Iterator[bool]:
        """The write lock for one of the warmer's reads; False (and no lock) once the store is closing, which
        may happen under the write lock (a key rotation closes the store while it holds it)."""
        while not self.write_lock.acquire(timeout=0.05):
            if self._closing:
                yield False
                return
        try:
            yield not self._closing
        finally:
            self.write_lock.release()

    def close(self) -> None:
        """Close every connection (the store can be used again after: connections open as needed)."""
        with self._all_lock:
            self._closing = True
            warmer = self._warmer
        if warmer is not None and warmer is not threading.current_thread():
            warmer.join(5)  # it stops before its next read (each is short; an interrupt left pending on the
            # writer would stop the checkpoint that closing it makes, and leave the log behind)
        with self._all_lock:
            for _, con in self._all:
                with contextlib.suppress(Exception):
                    con.close()
            self._all.clear()
            if self._writer is not None:
                with contextlib.suppress(Exception):
                    self._writer.close()
                self._writer = None
            self._seen_version = None
            self._closing = False
        self._local = threading.local()
        self._small = threading.local()


def diagnose(con: Connection, *, expected_schema: int) -> StoreDiagnostics:
    """How this store is built: schema version, SQLCipher, sqlite-vec (for the self-test)."""
    cipher = con.execute("PRAGMA cipher_version").fetchone()
    length = con.execute("SELECT vec_length(vec_f32(?))", (json.dumps([0.5, 0.25, 0.125]),)).fetchone()[0]
    from ...models import StoreDiagnostics  # pydantic: not for a short command

    return StoreDiagnostics(
        schema_version=con.execute("PRAGMA user_version").fetchone()[0], expected_schema_version=expected_schema,
        cipher_version=cipher[0] if cipher and cipher[0] else None,
        vec_version=con.execute("SELECT vec_version()").fetchone()[0], vec_length_ok=length == 3,
    )


register(__package__ or "engine.store.sqlite", sqlcipher3.Connection, Store, errors=(DatabaseError, ProgrammingError))
