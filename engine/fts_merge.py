"""Keeping the full-text indexes in few segments, so that a forget costs the same at any size.

FTS5 writes the rows of each transaction as a new segment and merges segments of a similar size four at a
time, so an index holds up to ~3 segments per size level, more levels as it grows. A forget's COMMIT does
FTS5's secure delete (engine/erasure.py): each term of the deleted row is looked up in every segment, and
in a large segment that means its b-tree and the term's doclist index. A store grown to a million items
held 11-26 segments an index, eight of them of 80-8,600 pages, and a forget's COMMIT took 2.8 ms against
0.7 ms at a thousand items; with the index merged into one segment, 1.1 ms (docs/performance.md).

So after writes (every CHECK_WRITES write transactions of a process, and when a store opens) the indexes'
structure records are read (a row each); an index with more than BIG_MAX segments of BIG_PAGES pages or
more is merged into one by a thread of its own, in steps of STEP_PAGES pages, each a short write
transaction of its own (FTS5's incremental 'merge' with a negative page count: all levels, like
'optimize'), so that a user's write waits for one step at most (~20-40 ms) and a process that exits
mid-way leaves an index FTS5 goes on merging later. Pages a merge frees are zeroed (`secure_delete`).

Small segments pile up too: a remember commits a segment of a page or two, and FTS5's own automerge left a
dozen of them beside the large one in a store at a million items, each probed by every term of a forget
(9.4 against 11.2 ms a forget there once they were merged). An index with more than SMALL_MAX segments
under BIG_PAGES pages is tidied: FTS5's 'merge' with a positive page count and 'usermerge' 2 merges levels
that hold two segments or more, so the small segments become one or two without rewriting the large one
(a few ms).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .errors import EngineError
from .store.sqlite.db import DatabaseError
from .store.sqlite.maintenance import FTS_TABLES, busy_timeout, fts_merge_small, fts_merge_step, fts_segments

if TYPE_CHECKING:
    from .store.sqlite.db import Connection, Store

log = logging.getLogger(__name__)

BIG_PAGES = 64  # a segment this many leaf pages or more counts as large
BIG_MAX = 2  # more large segments than this in an index: it is merged into one
STEP_PAGES = 200  # leaf pages merged a step (one write transaction)
SMALL_MAX = 6  # more small segments than this in an index: they are merged among themselves
TIDY_PAGES = 256  # leaf pages merged a tidying step
TIDY_STEPS = 8  # tidying steps at most for one look
CHECK_WRITES = 16  # write transactions of a process between two looks at the structure (a row each)
STEP_BUSY_MS = 200  # a step gives way to another program's write instead of waiting for it
MAX_STEPS = 20_000  # a bound on one merge (a million items took ~150 steps)
MAX_BUSY = 20  # steps that found the store busy before this merge gives up (the next check starts again)


def needs_merge(segments: list[int]) -> bool:
    return sum(1 for pages in segments if pages >= BIG_PAGES) > BIG_MAX


def needs_tidy(segments: list[int]) -> bool:
    return sum(1 for pages in segments if pages < BIG_PAGES) > SMALL_MAX


class FtsMerger:
    """One per store: `after_write()` after each committed write transaction, `check()` when it opens,
    `stop()` when it closes."""

    def __init__(self, store: Store):
        self.store = store
        self._writes = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.merges = 0  # indexes merged by this process (for tests and benchmarks)
        self.tidies = 0  # indexes whose small segments this process merged

    def after_write(self) -> None:
        self._writes += 1
        if self._writes >= CHECK_WRITES:
            self.check()

    def check(self) -> bool:
        """Start merging when an index needs it; True when a merge is running."""
        self._writes = 0
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return True
            try:
                due = []
                for t in FTS_TABLES:
                    shape = fts_segments(self.store.con, t)
                    if needs_merge(shape):
                        due.append((t, "all"))
                    elif needs_tidy(shape):
                        due.append((t, "small"))
            except (DatabaseError, EngineError) as e:  # busy, damaged: another time
                log.info("full-text structure not read: %s", type(e).__name__)
                return False
            if not due or self._stop.is_set():
                return False
            self._thread = threading.Thread(target=self._run, args=(due,), name="fts-merge", daemon=True)
            self._thread.start()
            return True

    def _run(self, tables: list[tuple[str, str]]) -> None:
        try:
            busy_timeout(self.store.con, STEP_BUSY_MS)
            for table, how in tables:
                if how == "small":  # the small segments among themselves; busy: the next look tidies
                    _, shape, steps, done = self._steps(table, fts_merge_small, TIDY_PAGES, needs_tidy, TIDY_STEPS, 1)
                    if done:
                        self.tidies += 1
                        log.debug("full-text index %s tidied: %d segments now, %d steps", table, len(shape), steps)
                    continue
                began = time.perf_counter()
                before, shape, steps, _ = self._steps(table, fts_merge_step, STEP_PAGES, lambda s: len(s) > 1,
                                                      MAX_STEPS, MAX_BUSY)
                self.merges += 1
                log.info("full-text index %s merged: %d segments -> %d in %d steps, %.1f s", table,
                         len(before), len(shape), steps, time.perf_counter() - began)
        except Exception:  # the next check starts again; searching and forgetting work meanwhile
            log.info("merging a full-text index stopped", exc_info=True)

    def _steps(self, table: str, step: Callable[[Connection, str, int], None], pages: int,
               more: Callable[[list[int]], bool], max_steps: int,
               max_busy: int) -> tuple[list[int], list[int], int, bool]:
        """Merge steps of `pages` pages, each a write transaction of its own, while `more(segments)` and
        FTS5 still changes something: (segments before, after, steps, False when another program's writes
        kept the store busy `max_busy` times)."""
        con = self.store.con
        before = shape = fts_segments(con, table)
        steps = busy = 0
        while more(shape) and not self._stop.is_set() and steps < max_steps:
            try:
                with self.store.write() as wcon:
                    step(wcon, table, pages)
            except EngineError:  # another program is writing: give way, then go on
                busy += 1
                if busy >= max_busy:
                    return before, shape, steps, False
                self._stop.wait(0.5)
                continue
            steps += 1
            after = fts_segments(con, table)
            if after == shape:  # nothing left that FTS5 will merge
                break
            shape = after
        return before, shape, steps, True

    def wait(self, timeout: float) -> bool:
        """True when no merge is running (after waiting up to `timeout` seconds for one to finish)."""
        t = self._thread
        if t is not None:
            t.join(timeout)
            return not t.is_alive()
        return True

    def stop(self) -> None:
        """Stop merging and wait for the step under way: the store closes every connection after this, the
        merge's own included, and a connection closed under a running statement can crash the process."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=30)
