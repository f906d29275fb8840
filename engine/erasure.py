"""Forget for real: no structure in the file keeps the bytes of a deleted row.

Where a deleted row's bytes could survive, and what reaches them:

- **The row itself and its index entries** (`memories`, `chunks`, messages, graph rows): SQLite's
  `secure_delete` (on for every connection, see `engine.db.connect`) overwrites deleted cells and freed
  pages with zeros.
- **The full-text indexes** (`memories_fts`, `chunks_fts`): FTS5 normally records a delete as a tombstone
  in a new segment and keeps the row's terms in the old segment until a merge reaches it. With FTS5's
  `secure-delete` option (switched on once per store by `prepare`) a delete removes the row's entries from
  the segments themselves; `prepare` also runs one `optimize` so that what older deletes left is merged away.
- **The vector tables** (sqlite-vec `vec0`): a delete clears the row's slot in its chunk (the vector bytes
  are zeroed, see the forensic test); chunk pages are ordinary pages under `secure_delete`.
- **The write-ahead log**: earlier versions of the changed pages stay in `memory.db-wal` until a
  checkpoint copies the newest ones into the file and the log is emptied; `after_forget` does that
  (`wal_checkpoint(TRUNCATE)`). When another program is reading at that moment, the log is emptied at the
  next forget or when the engine closes.
- **Free pages**: `compact` (VACUUM) rebuilds the file without free pages, for a smaller file.

- **The store a restore replaced** (`memory.db.before-restore-<time>`, kept for `backup.KEEP_ASIDE_DAYS`
  days so that the restore can be undone): a forget cannot reach inside it (it may be under a key since
  rotated away), so `after_forget` deletes it.

What this cannot reach is outside the profile's stores: copies the user made (exports, backups: a restore
of an older snapshot brings a forgotten memory back), and blocks an SSD or a copy-on-write file system keeps
after SQLite overwrote them. docs/security.md says so.
"""

from __future__ import annotations

import logging

from .errors import EngineError
from .store.sqlite import maintenance
from .store.sqlite.db import DatabaseError, Store
from .store.sqlite.maintenance import FTS_TABLES

log = logging.getLogger(__name__)

__all__ = ["FTS_TABLES", "after_forget", "checkpoint", "compact", "prepare"]


def prepare(store: Store) -> bool:
    """Switch on FTS5 secure-delete for both full-text indexes (once per store). True if it changed."""
    todo = [t for t in FTS_TABLES if not maintenance.fts_secure_delete(store.con, t)]
    if not todo:
        return False
    with store.write() as con:
        for t in todo:
            if not maintenance.fts_secure_delete(con, t):
                maintenance.enable_fts_secure_delete(con, t)  # also merges away what earlier deletes left
    log.info("full-text secure delete switched on for %d index(es)", len(todo))
    checkpoint(store)
    return True


def checkpoint(store: Store) -> bool:
    """Copy the log into the file and empty it. False when a reader elsewhere kept it from finishing. Run by
    the writer: emptying the log from another connection would empty the writer's page cache too."""
    try:
        with store.write_lock:
            done = maintenance.checkpoint(store.writer)
    except (DatabaseError, EngineError) as e:
        log.info("checkpoint failed: %s", type(e).__name__)
        return False
    if not done:
        log.info("checkpoint could not finish: another connection is reading")
    return done


def after_forget(store: Store) -> bool:
    """Called after a forget committed: the log's older copies of the changed pages go, and so do the
    stores restores replaced (they hold what was forgotten)."""
    from . import backup

    backup.drop_aside(store.path.parent)
    return checkpoint(store)


def compact(store: Store) -> dict[str, int]:
    """Rebuild the file without free pages (VACUUM). Returns the file's size before and after, in bytes."""
    with store.write_lock:
        checkpoint(store)  # first: pages still in the log are part of the store's size
        before = store.path.stat().st_size
        maintenance.vacuum(store.writer)
        checkpoint(store)
    return {"bytes_before": before, "bytes_after": store.path.stat().st_size}
