"""The embedding space: the model, the vector tables stamped with it, and the in-memory mirror.

`VectorSpace.ensure()` stamps the store with the current model (provider, model, dimension, version) and
rebuilds the vector tables when it changed; `embed_pending` fills in vectors for rows that have none.
`mutation()` is the engine's write transaction: when it committed changes to memories or chunks, the
vector mirror follows them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .embeddings import SMALL_BATCH, Embedder, EmbeddingUnavailable, NoEmbedder, Windows
from .store import Connection, Store, vectors
from .store import memories as memory_rows
from .store import space as space_rows
from .store.types import Stopped

if TYPE_CHECKING:
    from .audit import AuditLog

log = logging.getLogger(__name__)

TABLES = ("memories", "chunks")


@dataclass
class Touched:
    """Row ids of memories and chunks a transaction wrote (their vectors follow), and of those the ones it
    deleted: ids are never used again (AUTOINCREMENT), so the mirror drops a deleted row without reading it
    back (at a million rows that read cost a forget 0.3 ms: another connection's commit empties the reader's
    page cache, docs/performance.md)."""

    memories: set[int] = field(default_factory=set)
    chunks: set[int] = field(default_factory=set)
    deleted_memories: set[int] = field(default_factory=set)
    deleted_chunks: set[int] = field(default_factory=set)

    def deleted(self, table: str, ids: set[int] | list[int]) -> None:
        """These rows of `table` ("memories" or "chunks") were deleted by the transaction."""
        (self.memories if table == "memories" else self.chunks).update(ids)
        (self.deleted_memories if table == "memories" else self.deleted_chunks).update(ids)


class Mutation:
    """One write transaction; once it committed, the vector mirror follows what it touched."""

    def __init__(self, space: VectorSpace):
        self.space = space
        self.touched = Touched()

    def __enter__(self) -> tuple[Connection, Touched]:
        self._cm = self.space.store.write()
        self.con = self._cm.__enter__()
        self.epoch_before = vectors.read_epoch(self.con)
        return self.con, self.touched

    def __exit__(self, et, ev, tb):
        touched = self.touched
        if et is None and (touched.memories or touched.chunks):
            self.epoch_after = vectors.bump_epoch(self.con)
            if vectors.has_log(self.con):
                vectors.log_changes(self.con, self.epoch_after, touched.memories, touched.chunks)
        result = self._cm.__exit__(et, ev, tb)
        if et is None and (touched.memories or touched.chunks):
            store = self.space.store
            # read back on this thread's reader, without the write lock: on the writer (whose cache has the
            # rows) it would hold the lock while a search holds the mirror's, and writes queued behind it
            # (docs/performance.md, "one writer connection")
            for table, ids, deleted in (("memories", touched.memories, touched.deleted_memories),
                                        ("chunks", touched.chunks, touched.deleted_chunks)):
                idx = self.space.index.get(table)
                if idx is not None:
                    idx.after_write(store.con, self.epoch_before, self.epoch_after, ids, deleted)
        return result


class LateDuplicates(Protocol):
    """What the space asks of the memories part when vectors of memories arrive (engine/memories.py)."""

    def merge_late_duplicates(self, con: Connection, touched: Touched, ids: list[int],
                              vecs: list[np.ndarray]) -> dict[int, tuple[str, str]]: ...

    def announce_merged(self, uids: set[str]) -> None: ...


class VectorSpace:
    """The embedding model and the vectors made with it (see the module doc)."""

    def __init__(self, store: Store, embedder: Embedder, audit: AuditLog, *, mirror: bool = True):
        self.store = store
        self.embedder = embedder
        self.audit = audit
        self.mirror = mirror
        self.index: dict[str, vectors.VectorIndex] = {}
        self.late: LateDuplicates | None = None  # the memories part, set by the facade (it depends on this)
        self._checked = False
        self._lock = threading.Lock()
        # one batch of waiting rows embedded at a time: the backfill, a recall catching up and an ingest
        # beside each other take turns (the second finds the first's rows done) instead of embedding the
        # same rows twice over, each at half speed
        self._filling = threading.Lock()
        self._in_hand = 0  # rows of the batch being embedded

    def mutation(self) -> Mutation:
        """`with space.mutation() as (con, touched):` — one transaction; the vector mirror follows it."""
        return Mutation(self)

    def switch(self, embedder: Embedder) -> None:
        """Use another embedding model from now on. The next `ensure()` stamps its space and empties the vector
        tables when it differs; the background backfill then re-embeds every row (recall matches words for
        rows still waiting)."""
        with self._lock:
            self.embedder = embedder
            self._checked = False
            self.index = {}

    def available(self) -> bool:
        return not isinstance(self.embedder, NoEmbedder) and self.embedder.failed is None

    def ensure(self) -> bool:
        """Stamp the embedding space; rebuild the vector tables when it changed. False: lexical only."""
        if self._checked:
            return True
        if not self.available():
            return False
        with self._lock:
            if self._checked:
                return True
            try:
                space = self.embedder.space
            except EmbeddingUnavailable:
                return False
            current = (space.provider, space.model, space.dimension, space.version)
            if self.store.read_only is not None:  # used as it is: vectors of this space, else words only
                row = space_rows.stamp(self.store.con)
                if row is None or tuple(row) != current:
                    return False
                return self._indexes(space.dimension)
            with self.store.write() as con:
                row = space_rows.stamp(con)
                if row is None or tuple(row) != current:
                    space_rows.restamp(con, current)
                    if row is not None:
                        self.audit.record("embedding_space_changed", None,
                                          {"from": list(row), "to": list(current)}, con=con)
                        log.info("embedding space changed; vectors will be rebuilt from rows")
                else:
                    vectors.create_tables(con, space.dimension)  # idempotent: heals a missing trigger
            return self._indexes(space.dimension)

    def _indexes(self, dimension: int) -> bool:
        """The vector indexes of the stamped space (under the lock); True."""
        self.index = {t: vectors.VectorIndex(t, dimension, mirror=self.mirror, store=self.store) for t in TABLES}
        for ix in self.index.values():  # loading one mirror starts the others beside it
            ix.siblings = [o for o in self.index.values() if o is not ix]
        self._checked = True
        return True

    def stop(self) -> None:
        """The store is closing: mirrors loading in the background stop (and are waited for)."""
        for ix in list(self.index.values()):
            ix.stop()

    def warm(self) -> None:
        """Load the vector mirrors (memories and chunks side by side, each on a thread of its own: reading
        the rows is most of it), so that the first recall after opening does not wait for them."""
        if not self.ensure():
            return

        def load(index: vectors.VectorIndex) -> None:
            try:
                index.warm(self.store.con)
            except Stopped:  # the store is closing
                pass
            except Exception:
                log.exception("loading the vector mirror failed")

        threads = [threading.Thread(target=load, args=(ix,), name=f"mirror-{t}", daemon=True)
                   for t, ix in self.index.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def pending(self, con: Connection | None = None) -> int:
        """Rows stored without a current vector."""
        return space_rows.pending(con or self.store.con)

    def embed_pending(self, *, limit: int | None = None, batch_size: int = 64,
                      progress: Callable[[int, int], None] | None = None,
                      cancel: threading.Event | None = None, wait: float | None = None) -> int:
        """Embed rows stored without a current vector (new, edited, or after a space change). `wait`: seconds to
        wait at most for a batch of up to SMALL_BATCH rows another thread is embedding (a recall's catch-up: what
        was just stored); beside a bigger batch, or after that, it stops there."""
        if not self.ensure():
            return 0
        con = self.store.con
        total = self.pending(con)
        if limit is not None:
            total = min(total, limit)
        done = 0
        for table in TABLES:
            while done < total:
                if cancel is not None and cancel.is_set():
                    return done
                if wait is None:
                    self._filling.acquire()
                elif not (self._filling.acquire(False) or (self._in_hand <= SMALL_BATCH
                                                           and self._filling.acquire(timeout=wait))):
                    return done
                try:
                    batch = space_rows.waiting(con, table, min(batch_size, total - done))
                    if not batch:
                        break
                    self._in_hand = len(batch)
                    texts = [r[1] for r in batch]
                    vecs = self.embedder.encode(texts, batch_size=batch_size)
                    wins = self.embedder.encode_windows(texts, batch_size=batch_size) if table == "memories" else None
                    self.store_vectors(table, [(r[0], r[2]) for r in batch], vecs, wins)
                finally:
                    self._in_hand = 0
                    self._filling.release()
                done += len(batch)
                if progress:
                    progress(done, total)
        return done

    def store_vectors(self, table: str, rows: list[tuple[int, str]], vecs: np.ndarray,
                      windows: list[Windows | None] | None = None) -> None:
        """Write vectors (and a memory's window vectors) for rows whose text is still the text embedded.
        Memories stored before their vector are first checked for near-duplicates (`self.late`)."""
        late: set[str] = set()
        with self.mutation() as (con, touched):
            keep_ids, keep_vecs, keep_wins = [], [], []
            now = space_rows.content_hashes(con, table, [rid for rid, _ in rows])
            for n, ((rid, chash), vec) in enumerate(zip(rows, vecs, strict=True)):
                if now.get(rid) != chash:
                    continue  # deleted or edited meanwhile: the next pass embeds the new text
                keep_ids.append(rid)
                keep_vecs.append(vec)
                keep_wins.append(windows[n] if windows is not None else None)
            if table == "memories" and keep_ids and self.late is not None:
                merged = self.late.merge_late_duplicates(con, touched, keep_ids, keep_vecs)
                late.update(uid for pair in merged.values() for uid in pair)
                if merged:
                    keep = [n for n, rid in enumerate(keep_ids) if rid not in merged]
                    keep_ids = [keep_ids[n] for n in keep]
                    keep_vecs = [keep_vecs[n] for n in keep]
                    keep_wins = [keep_wins[n] for n in keep]
            if keep_ids:
                vectors.put(con, table, keep_ids, np.asarray(keep_vecs), keep_wins)
                memory_rows.mark_embedded(con, table, keep_ids)
                (touched.memories if table == "memories" else touched.chunks).update(keep_ids)
        if late and self.late is not None:
            self.late.announce_merged(late)

    def status(self) -> tuple[str, str]:
        """(ready | loading | failed | off, a sentence for people)."""
        if isinstance(self.embedder, NoEmbedder):
            return "off", "Embeddings are off in settings; search matches words only."
        if self.embedder.failed is not None:
            return "failed", f"{self.embedder.failed} Search matches words only."
        if self.embedder.ready:
            waiting = self.pending()
            if waiting and self._checked:
                total = space_rows.rows(self.store.con)
                return "ready", (f"Embedding {waiting:,} of {total:,} items with {self.model_label()}; search "
                                 "matches words for those until they are done.")
            return "ready", f"The embedding model ({self.model_label()}) is loaded: search understands meaning."
        return "loading", "The embedding model is installed and loading in the background."

    def model_label(self) -> str:
        name = self.embedder.model_name
        return name if len(name) <= 40 else "…" + name[-39:]

    def notes(self) -> list[str]:
        """For stats: why semantic search is off, if it is."""
        return [str(self.embedder.failed)] if self.embedder.failed is not None else []
