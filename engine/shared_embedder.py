"""The embedding model of a server of many users (engine/server.py), shared by every user's engine.

Small encodes — a recall's query, a memory being stored: up to SMALL_BATCH texts — from any thread go
through one queue: a thread takes what is waiting (after a short gathering window, GATHER seconds from the
first, or as soon as MAX_TEXTS texts are there) and encodes it in one call of the model, on one thread, then
hands each caller its rows. Concurrent requests of different users thus share batches: fewer calls of the
model than requests, and the fixed cost of a call (session run, tokenizer, thread handoff) paid once.

Big encodes (a document's chunks, an import's or the backfill's batches) do not join the queue: they run
beside it, on BULK_THREADS threads of lower CPU priority (nice BULK_NICE, on Linux), so a user's big upload
never holds another user's query behind it, and when the cores are busy the scheduler serves the queries
first (ONNX Runtime runs calls at once; bench/pg_shared_embedding.py measures recall during another user's
ingest).
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

log = logging.getLogger(__name__)

GATHER = 0.003  # seconds the queue waits, from its first request, for others to join the batch
MAX_TEXTS = 32  # texts in one shared call at most
BULK_THREADS = 2  # big encodes at once
BULK_NICE = 10  # their CPU priority below the queries' (0: the same)


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

    def encode(self, texts: list[str], *, batch_size: int = 64, small: bool | None = None) -> np.ndarray:
        if not texts or self._closed:
            return super().encode(texts, batch_size=batch_size, small=small)
        if len(texts) > SMALL_BATCH or small is False:
            return self._bulk.submit(Embedder.encode, self, texts, batch_size=batch_size, small=small).result()
        self.load()  # a model that cannot load fails here, in the caller's thread, as it would unshared
        request = _Request(list(texts))
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

    def close(self) -> None:
        """Stop the queue's thread once what waits is encoded (later encodes run in their callers)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            worker = self._worker
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
                continue
            i = 0
            for r in batch:
                r.vectors = vectors[i : i + len(r.texts)]
                i += len(r.texts)
                r.done.set()
