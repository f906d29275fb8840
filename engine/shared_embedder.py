"""The embedding model of a server of many users (engine/server.py), shared by every user's engine.

Small encodes — a recall's query, a memory being stored: up to SMALL_BATCH texts — from any thread go
through one queue: a thread takes what is waiting (after a short gathering window, GATHER seconds from the
first, or as soon as MAX_TEXTS texts are there) and encodes it in one call of the model, on one thread, then
hands each caller its rows. Concurrent requests of different users thus share batches: fewer calls of the
model than requests, and the fixed cost of a call (session run, tokenizer, thread handoff) paid once.

Big encodes (a document's chunks, an import's or the backfill's batches) do not join the queue: they run
beside it on BULK_THREADS threads (enough to leave at least one core to the queries), cut into model calls of
about BATCH_TOKENS word-pieces each, and a call waits (at most YIELD seconds) while small encodes are waiting
or running: a user's big upload never holds another user's query behind it, and the queries' calls get the
cores first. The big encodes run at the server's own CPU priority: at nice +10 (as they did) a machine busy
with other programs left the background embedder a tenth of a core, and a user's long texts waited for their
vectors (0.16 abstracts a second where the model alone does several); bench/pg_shared_embedding.py measures
recall during another user's ingest, bench/backlog_drain.py the background embedder against the model alone.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .embeddings import DEFAULT_MODEL, SMALL_BATCH, Embedder
from .minilm import BATCH_TOKENS, batch_threads

log = logging.getLogger(__name__)

GATHER = 0.003  # seconds the queue waits, from its first request, for others to join the batch
MAX_TEXTS = 32  # texts in one shared call at most
# big encodes at once, each on batch_threads() cores: at least one core is left to the queries
BULK_THREADS = max(1, ((os.cpu_count() or 2) - 1) // batch_threads())
BULK_NICE = 0  # their CPU priority below the queries' (0: the same; the queries go first within the server)
YIELD = 0.5  # seconds a big encode's model call waits at most for the small encodes in hand
CHARS_PER_TOKEN = 4  # to cut a big encode into model calls of about BATCH_TOKENS word-pieces
MODEL_TOKENS = 256  # the model reads at most this many word-pieces of a text


def _lower_priority(nice: int) -> None:
    """Lower this thread's CPU priority by `nice` (Linux: a thread is a task of its own); elsewhere nothing."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + nice)
    except OSError:
        log.info("big encodes keep the server's CPU priority")


class _Request:
    __slots__ = ("texts", "vectors", "error", "done")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.vectors: np.ndarray | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class SharedEmbedder(Embedder):
    """An Embedder whose small encodes from many threads are batched together (see the module doc).
    `requests` and `calls` count the small encodes and the model calls that served them."""

    def __init__(self, model: str = DEFAULT_MODEL, *, gather: float = GATHER, max_texts: int = MAX_TEXTS,
                 bulk_nice: int = BULK_NICE, runtime: Callable[..., Any] | None = None) -> None:
        super().__init__(model, runtime=runtime)
        self.gather = gather
        self.max_texts = max_texts
        self._bulk = ThreadPoolExecutor(BULK_THREADS, thread_name_prefix="embed-bulk", initializer=_lower_priority,
                                        initargs=(bulk_nice,))
        self.requests = 0
        self.calls = 0
        self._queue: deque[_Request] = deque()
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self._closed = False
        self._busy = 0  # small encodes waiting or being encoded: big encodes' model calls wait for them
        self._idle = threading.Condition()
        self.yields = 0  # model calls of big encodes that waited for small ones (tests, benchmarks)

    def encode(self, texts: list[str], *, batch_size: int = 64, small: bool | None = None) -> np.ndarray:
        if not texts or self._closed:
            return super().encode(texts, batch_size=batch_size, small=small)
        if len(texts) > SMALL_BATCH or small is False:
            return self._encode_big(list(texts), batch_size, small)
        self.load()  # a model that cannot load fails here, in the caller's thread, as it would unshared
        request = _Request(list(texts))
        with self._idle:
            self._busy += 1
        with self._cond:
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="shared-embedder", daemon=True)
                self._worker.start()
            self._queue.append(request)
            self.requests += 1
            self._cond.notify()
        request.done.wait()
        if request.error is not None:
            raise request.error
        assert request.vectors is not None
        return request.vectors

    def _encode_big(self, texts: list[str], batch_size: int, small: bool | None) -> np.ndarray:
        """A big encode: longest texts first, in model calls of about BATCH_TOKENS word-pieces (so similar
        lengths share a padded batch), each run on a bulk thread after the small encodes in hand; the calls of
        big encodes at once take turns (see the module doc)."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        budget = BATCH_TOKENS * CHARS_PER_TOKEN
        out: np.ndarray | None = None
        start = 0
        while start < len(order):
            end, size = start, 0
            while end < len(order) and (end == start or (end - start < batch_size and size < budget)):
                size += min(len(texts[order[end]]), MODEL_TOKENS * CHARS_PER_TOKEN)
                end += 1
            part = order[start:end]
            args = ([texts[i] for i in part], batch_size, False if small is None else small)
            try:
                vecs = self._bulk.submit(self._model_call, *args).result()
            except RuntimeError:  # closed meanwhile: the rest runs in the caller
                if not self._closed:
                    raise
                vecs = self._model_call(*args)
            if out is None:
                out = np.zeros((len(texts), vecs.shape[1]), dtype=vecs.dtype)
            out[part] = vecs
            start = end
        assert out is not None
        return out

    def _model_call(self, texts: list[str], batch_size: int, small: bool) -> np.ndarray:
        """One model call of a big encode, on a bulk thread, once no small encode waits or runs (or after YIELD
        seconds: big encodes still move on under a stream of queries)."""
        with self._idle:
            if self._busy and not self._closed:
                self.yields += 1
                self._idle.wait_for(lambda: not self._busy or self._closed, YIELD)
        return Embedder.encode(self, texts, batch_size=batch_size, small=small)

    def _done(self, n: int) -> None:
        with self._idle:
            self._busy -= n
            if not self._busy:
                self._idle.notify_all()

    def close(self) -> None:
        """Stop the queue's thread once what waits is encoded (later encodes run in their callers)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            worker = self._worker
        with self._idle:
            self._idle.notify_all()
        if worker is not None:
            worker.join(10)
        self._bulk.shutdown(wait=True)
        if self.requests:
            log.info("shared embedding: %d small encodes in %d model calls", self.requests, self.calls)

    def _take(self) -> list[_Request] | None:
        """The next batch: what waits after the gathering window (None once closed and empty)."""
        with self._cond:
            while not self._queue:
                if self._closed:
                    return None
                self._cond.wait()
            deadline = time.monotonic() + self.gather
            while (sum(len(r.texts) for r in self._queue) < self.max_texts and not self._closed
                   and (left := deadline - time.monotonic()) > 0):
                self._cond.wait(left)
            batch: list[_Request] = []
            size = 0
            while self._queue and (not batch or size + len(self._queue[0].texts) <= self.max_texts):
                request = self._queue.popleft()
                batch.append(request)
                size += len(request.texts)
            self.calls += 1
            return batch

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            texts = [t for r in batch for t in r.texts]
            try:
                vectors = Embedder.encode(self, texts, small=True)
            except BaseException as e:  # every caller of the batch gets the error
                for r in batch:
                    r.error = e
                    r.done.set()
                self._done(len(batch))
                continue
            i = 0
            for r in batch:
                r.vectors = vectors[i : i + len(r.texts)]
                i += len(r.texts)
                r.done.set()
            self._done(len(batch))
