"""The store file as a whole: checkpoints, FTS5 secure-delete, VACUUM, integrity checks, re-keying and
online backups (used by engine/erasure.py, engine/unlock.py, engine/keyops.py and engine/backup.py)."""

from __future__ import annotations

from collections.abc import Callable

from .db import Connection

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


def _varint(b: bytes, i: int) -> tuple[int, int]:
    """SQLite's varint at b[i] (FTS5 uses it too): (value, index after it)."""
    v = 0
    for k in range(9):
        c = b[i]
        i += 1
        if k == 8:
            return (v << 8) | c, i
        v = (v << 7) | (c & 0x7F)
        if not c & 0x80:
            return v, i
    raise AssertionError("unreachable")


FTS_STRUCTURE_ID = 10  # the %_data row holding an FTS5 index's structure record
FTS_STRUCTURE_V2 = b"\xff\x00\x00\x01"  # the record's marker when segments carry tombstone fields


def fts_segments(con: Connection, table: str) -> list[int]:
    """The leaf pages of each segment of an FTS5 index, smallest level first, from its structure record
    (FTS5's own layout, fts5_index.c: a 4-byte cookie, levels, segments, the write counter, then per level
    its merge state and segments (id, first and last page)."""
    row = con.execute(f"SELECT block FROM {table}_data WHERE id = ?", (FTS_STRUCTURE_ID,)).fetchone()
    if row is None or not row[0]:
        return []
    b, i = bytes(row[0]), 4
    v2 = b[i : i + 4] == FTS_STRUCTURE_V2
    if v2:
        i += 4
    levels, i = _varint(b, i)
    _, i = _varint(b, i)  # segments in all
    _, i = _varint(b, i)  # write counter
    pages = []
    for _ in range(levels):
        _, i = _varint(b, i)  # segments of this level being merged
        count, i = _varint(b, i)
        for _ in range(count):
            _, i = _varint(b, i)
            first, i = _varint(b, i)
            last, i = _varint(b, i)
            if v2:
                for _ in range(5):  # origin (2), tombstone pages, tombstone entries, entries
                    _, i = _varint(b, i)
            pages.append(last - first + 1)
    return pages


def busy_timeout(con: Connection, ms: int) -> None:
    """How long this connection waits for another program's write before it says the store is busy."""
    con.execute(f"PRAGMA busy_timeout = {int(ms)}")


def fts_merge_step(con: Connection, table: str, pages: int) -> None:
    """Merge up to about `pages` leaf pages of the index, across all levels (FTS5 'merge' with a negative
    count: an 'optimize' done a step at a time)."""
    con.execute(f"INSERT INTO {table}({table}, rank) VALUES ('merge', ?)", (-pages,))


def fts_merge_small(con: Connection, table: str, pages: int) -> None:
    """Merge up to about `pages` leaf pages of the index's levels that hold two segments or more (FTS5
    'merge' with a positive count, 'usermerge' 2: a segment alone on its level, the large one, stays)."""
    con.execute(f"INSERT INTO {table}({table}, rank) VALUES ('usermerge', 2)")
    con.execute(f"INSERT INTO {table}({table}, rank) VALUES ('merge', ?)", (pages,))


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
