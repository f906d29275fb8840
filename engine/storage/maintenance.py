"""The store file as a whole: checkpoints, FTS5 secure-delete, VACUUM, integrity checks, re-keying and
online backups (used by engine/erasure.py, engine/unlock.py, engine/keyops.py and engine/backup.py)."""

from __future__ import annotations

from collections.abc import Callable

from ..db import Connection

FTS_TABLES = ("memories_fts", "chunks_fts")


def checkpoint(con: Connection) -> bool:
    """Copy the write-ahead log into the file and empty it; False when a reader elsewhere kept it from
    finishing."""
    busy, _, _ = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return not busy


def fts_secure_delete(con: Connection, table: str) -> bool:
    """True when FTS5's secure-delete option is on for this full-text index."""
    row = con.execute(f"SELECT v FROM {table}_config WHERE k = 'secure-delete'").fetchone()
    return bool(row and int(row[0]) == 1)


def enable_fts_secure_delete(con: Connection, table: str) -> None:
    """Switch FTS5 secure-delete on, and merge away what earlier deletes left in the index (optimize)."""
    con.execute(f"INSERT INTO {table}({table}, rank) VALUES ('secure-delete', 1)")
    con.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")


def vacuum(con: Connection) -> None:
    con.execute("VACUUM")


def integrity_ok(con: Connection) -> bool:
    return con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def rekey(con: Connection, dk: bytes) -> None:
    """Re-encrypt every page with a new raw data key (one transaction: the old or the new key)."""
    con.execute(f"PRAGMA rekey = \"x'{dk.hex()}'\"")


def copy_into(src: Connection, dst: Connection, progress: Callable[[int, int], None] | None = None) -> None:
    """An online backup of src into dst (a rollback-journal file: one file, nothing beside it). With
    `progress`, pages are copied in steps and progress(done, total) is called after each."""
    dst.execute("PRAGMA journal_mode = DELETE")
    if progress is None:
        src.backup(dst)
        return
    src.backup(dst, pages=64, progress=lambda _status, remaining, total: progress(total - remaining, total))
