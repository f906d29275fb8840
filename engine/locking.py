"""File locks on the profile folder, and the private permissions of everything in it (folders 0700, files
0600: `private_dir`, `private_file`, and `secure_profile`, which tightens the whole profile when it opens).

Three lock files live in the profile folder (all empty, 0600):

- `.create.lock`, held exclusively while one process creates the key, `profile.json` and the store, so
  that processes started at once (the app at login, a CLI command, an agent) never make two stores or a
  profile naming another store's key; the others wait and then open what was made.
- `.in-use.lock`, held *shared* by every open engine for its lifetime and taken *exclusively* (without
  waiting) by the operations that replace the file's key or the file itself (`key rotate`, a restore),
  which therefore refuse to run while another program has the store open. (POSIX only; on Windows the
  exclusive check is skipped and the user is told to close other programs.)
- `.settings.lock`, held exclusively while one program reads, changes and writes `settings.json`, so that
  the app, a CLI command and a server changing different settings at once all keep their changes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .errors import StoreLocked

CREATE_LOCK = ".create.lock"
IN_USE_LOCK = ".in-use.lock"
SETTINGS_LOCK = ".settings.lock"
FILE_MODE = 0o600
DIR_MODE = 0o700
CREATE_WAIT_S = 120.0


def private_dir(path: Path) -> None:
    """Create the folder if needed and make it the owner's alone (0700)."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if os.name == "posix":
        with contextlib.suppress(OSError):  # not ours (e.g. a shared mount): leave it as it is
            if (path.stat().st_mode & 0o777) != DIR_MODE:
                os.chmod(path, DIR_MODE)


def private_file(path: Path) -> None:
    """Make an existing file the owner's alone (0600); missing files, links and a read-only disk are fine."""
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        st = path.lstat()
        if stat.S_ISREG(st.st_mode) and (st.st_mode & 0o777) != FILE_MODE:
            os.chmod(path, FILE_MODE)


def precreate(path: Path) -> None:
    """Create an empty file 0600 before SQLite opens it: SQLite gives the -wal and -shm files it makes
    later the same mode as the database file."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE))
    private_file(path)


def secure_profile(home: Path) -> None:
    """0700 on the profile folder and every folder in it, 0600 on every file (logs, cache, backups,
    settings and what older versions or the user made world-readable); links are left alone. A read-only
    profile is left as it is."""
    if os.name != "posix":
        return
    private_dir_mode(home)
    for root, dirs, files in os.walk(home):
        for name in dirs:
            private_dir_mode(Path(root) / name)
        for name in files:
            private_file(Path(root) / name)


def private_dir_mode(path: Path) -> None:
    """Make an existing folder the owner's alone (0700); links, missing folders and ones not ours are left."""
    with contextlib.suppress(OSError):
        st = path.lstat()
        if stat.S_ISDIR(st.st_mode) and (st.st_mode & 0o777) != DIR_MODE:
            os.chmod(path, DIR_MODE)


def store_files(db: Path) -> list[Path]:
    return [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"),
            db.with_name(db.name + "-journal")]


def secure_store_files(db: Path) -> None:
    """0600 on the database and its companions (heals stores made world-readable by older versions)."""
    for p in store_files(db):
        private_file(p)


def _open_lock(path: Path) -> IO[bytes]:
    fd = os.open(path, os.O_CREAT | os.O_RDWR, FILE_MODE)
    private_file(path)
    return os.fdopen(fd, "r+b", buffering=0)


def _open_lock_or_existing(path: Path) -> IO[bytes] | None:
    """The lock file; on a read-only or full disk, opened for reading if it is there (a lock needs no write
    access), else None."""
    try:
        return _open_lock(path)
    except OSError as e:
        if e.errno not in (errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES):
            raise
    try:
        return os.fdopen(os.open(path, os.O_RDONLY), "rb", buffering=0)
    except OSError:
        return None


if os.name == "posix":
    import fcntl

    def _lock(f: IO[bytes], *, shared: bool, wait: bool) -> bool:
        flags = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB)
        try:
            fcntl.flock(f.fileno(), flags)
            return True
        except BlockingIOError:
            return False

    def _unlock(f: IO[bytes]) -> None:
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)

else:  # Windows: msvcrt byte-range locks (exclusive only)
    import msvcrt

    def _lock(f: IO[bytes], *, shared: bool, wait: bool) -> bool:
        if shared:
            return True  # no shared locks in msvcrt; the in-use check is POSIX only
        while True:
            try:
                f.seek(0)
                msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
                return True
            except OSError:
                if not wait:
                    return False
                time.sleep(0.05)

    def _unlock(f: IO[bytes]) -> None:
        f.seek(0)
        msvcrt.locking(f.fileno(), msvcrt.LK_UNLCK, 1)  # type: ignore[attr-defined]


@contextlib.contextmanager
def creation_lock(home: Path, timeout: float = CREATE_WAIT_S) -> Iterator[None]:
    """Exclusive: one process at a time creates (or repairs) this profile's key, profile and store."""
    private_dir(home)
    f = _open_lock_or_existing(home / CREATE_LOCK)
    if f is None:  # a read-only or full disk without the lock file: nothing can be made there anyway
        yield
        return
    try:
        deadline = time.monotonic() + timeout
        while not _lock(f, shared=False, wait=False):
            if time.monotonic() > deadline:
                raise StoreLocked(
                    "Another program has been creating your memory store for a long time; try again in a moment."
                )
            time.sleep(0.02)
        try:
            yield
        finally:
            _unlock(f)
    finally:
        f.close()


@contextlib.contextmanager
def settings_lock(home: Path, timeout: float = 30.0) -> Iterator[None]:
    """Exclusive: one read-modify-write of settings.json at a time, across programs and threads."""
    private_dir(home)
    f = _open_lock(home / SETTINGS_LOCK)
    try:
        deadline = time.monotonic() + timeout
        while not _lock(f, shared=False, wait=False):
            if time.monotonic() > deadline:
                raise StoreLocked("Another program has been changing the settings for a long time; try again.")
            time.sleep(0.01)
        try:
            yield
        finally:
            _unlock(f)
    finally:
        f.close()


class InUse:
    """A shared hold on the store for an open engine's lifetime (see the module docstring)."""

    def __init__(self, home: Path):
        self._f = _open_lock_or_existing(home / IN_USE_LOCK)  # none: reading needs no lock file of its own
        if self._f is not None:
            _lock(self._f, shared=True, wait=True)

    def release(self) -> None:
        if self._f is not None:
            with contextlib.suppress(OSError):
                _unlock(self._f)
            self._f.close()
            self._f = None

    @contextlib.contextmanager
    def exclusive(self, what: str) -> Iterator[None]:
        """Upgrade to exclusive for `what`, or refuse at once when another program holds the store."""
        if self._f is None:
            raise StoreLocked(f"The lock file of your memory store can't be made (the disk is full or read-only), "
                              f"so {what} can't run now. Nothing was changed.")
        if not _lock(self._f, shared=False, wait=False):
            raise StoreLocked(
                f"Another program (the app, a server or another command) has your memory store open; close it "
                f"and run {what} again. Nothing was changed."
            )
        try:
            yield
        finally:
            _lock(self._f, shared=True, wait=True)


class SoleHolder:
    """An exclusive, non-blocking lock a process holds while it does what only one process of a profile
    may do at a time (watching its folders): ``try_acquire`` never waits, ``release`` lets another take it."""

    def __init__(self, path: Path):
        self._path = path
        self._f: IO[bytes] | None = None

    @property
    def held(self) -> bool:
        return self._f is not None

    def try_acquire(self) -> bool:
        if self._f is not None:
            return True
        f = _open_lock(self._path)
        if not _lock(f, shared=False, wait=False):
            f.close()
            return False
        self._f = f
        return True

    def release(self) -> None:
        if self._f is not None:
            with contextlib.suppress(OSError):
                _unlock(self._f)
            self._f.close()
            self._f = None

    def held_elsewhere(self) -> bool:
        """True when another process (or another holder in this one) holds the lock now."""
        if self._f is not None:
            return False
        if self.try_acquire():
            self.release()
            return False
        return True


INGESTING_DIR = "ingesting"


class IngestOwner:
    """Marks the documents this engine is indexing as its own: an exclusive lock on a file of its own,
    `ingesting/<token>.lock`, held from its first pending document until it closes. A pending document
    whose owner's lock is free (the process was killed) was interrupted; one whose lock is held is being
    indexed now and is left alone (`owner_alive`)."""

    def __init__(self, home: Path):
        self._home = home
        self.token = secrets.token_hex(8)
        self._holder: SoleHolder | None = None
        self._busy = 0  # ingests of this engine running now (its own pending documents are theirs meanwhile)
        self._busy_lock = threading.Lock()

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """While an ingest of this engine runs: its pending documents are being indexed, not interrupted."""
        with self._busy_lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._busy_lock:
                self._busy -= 1

    def hold(self) -> str:
        """Take the lock (once); the token to write on the documents."""
        if self._holder is None:
            private_dir(self._home / INGESTING_DIR)
            holder = SoleHolder(self._home / INGESTING_DIR / f"{self.token}.lock")
            holder.try_acquire()  # a new name: nobody else holds it
            self._holder = holder
        return self.token

    def release(self) -> None:
        if self._holder is not None:
            with contextlib.suppress(OSError):
                (self._home / INGESTING_DIR / f"{self.token}.lock").unlink()
            self._holder.release()
            self._holder = None

    def alive(self, token: str | None) -> bool:
        """True when the owner `token` is this engine or still holds its lock. None (documents written by
        versions before owners) and a missing or free lock: interrupted."""
        if token is None or not re_token(token):
            return False
        if token == self.token:  # ours: being indexed while one of our ingests runs, else left by one that raised
            return self._busy > 0
        return owner_alive(self._home / INGESTING_DIR / f"{token}.lock")

    def forget(self, token: str) -> None:
        """Remove the lock file of an owner that is gone (its documents were taken over)."""
        if re_token(token) and token != self.token and not self.alive(token):
            with contextlib.suppress(OSError):
                (self._home / INGESTING_DIR / f"{token}.lock").unlink()


def re_token(token: str) -> bool:
    return len(token) == 16 and all(c in "0123456789abcdef" for c in token)


def owner_alive(path: Path) -> bool:
    """True when another open file holds an exclusive lock on `path` (a live owner)."""
    try:
        f = os.fdopen(os.open(path, os.O_RDWR), "r+b", buffering=0)
    except FileNotFoundError:
        return False
    except OSError:  # a read-only disk: a lock needs no write access
        try:
            f = os.fdopen(os.open(path, os.O_RDONLY), "rb", buffering=0)
        except OSError:
            return False
    with f:
        if not _lock(f, shared=False, wait=False):
            return True
        _unlock(f)
        return False
