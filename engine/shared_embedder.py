"""The embedding model of a server of many users (engine/server.py), shared by every user's engine.

Two kinds of work, and the interactive kind goes first:

- Interactive encodes — a recall's or an answer's question, a memory being stored: up to SMALL_BATCH texts —
  from any thread go through one queue: a thread takes what is waiting (after a short gathering window, GATHER
  seconds from the first, or as soon as MAX_TEXTS texts are there) and encodes it in one call of the model, on
  one thread, then hands each caller its rows. Concurrent requests of different users share batches: fewer calls
  of the model than requests, the fixed cost of a call paid once. One memory's passages (the windows of a long
  text, more than SMALL_BATCH: `small=True`) are encoded in the caller's own thread, on one core, never queued
  behind bulk work.
- Bulk encodes — an import's batch of many memories, a document's chunks, the background embedder's batches —
  are cut into slices of about SLICE_TOKENS word-pieces (longest texts first, so similar lengths share a padded
  call) and queued; BULK_THREADS threads (leaving at least one core to the interactive work) run the slices,
  taking the queued encodes in turn (a document uploaded beside a big import waits for one slice of it, not for
  all of it). On Linux those threads run at the lowest CPU priority (nice BULK_NICE; a thread is a task of its
  own there, and the threads ONNX Runtime makes for a bulk session are made from them and inherit it), so the
  kernel hands a core to a request's thread the moment it wants one: an import uses what the requests leave,
  and an interactive encode never waits for more than the CPU of the slice in hand. Where a thread's priority
  cannot be lowered (macOS, Windows), a slice starts only once no interactive encode waits or runs (or YIELD
  seconds later). Nothing starves: when no bulk slice has started or ended for STARVED seconds (the bulk
  threads get no CPU: a machine whose cores the interactive work and other programs keep busy), a caller
  waiting for a bulk encode runs its next slice itself, at its own priority — bulk work always moves on, a slice
  every STARVED seconds at least, and takes no more than that from the interactive work.

A bulk encode returns once every slice is encoded: the rows it is for are written (and the request answered)
after, as before. bench/api_load.py --server measures users' requests beside an importer, bench/backlog_drain.py
the background embedder against the model alone.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import deque

import numpy as np

from .embeddings import DEFAULT_MODEL, SMALL_BATCH, Embedder
from .minilm import batch_threads

log = logging.getLogger(__name__)

GATHER = 0.003  # seconds the queue waits, from its first request, for others to join the batch
MAX_TEXTS = 32  # texts in one shared call at most
# bulk slices at once, each on batch_threads() cores: at least one core is left to the interactive work
BULK_THREADS = max(1, ((os.cpu_count() or 2) - 1) // batch_threads())
BULK_NICE = 19  # Linux: the bulk threads' nice value (19, the lowest priority); 0 keeps the server's
SLICE_TOKENS = 1024  # word-pieces in one bulk model call: what an interactive encode competes with at most
STARVED = 1.0  # seconds without a bulk slice started or ended before a waiting caller runs one itself
YIELD = 0.5  # where priorities cannot be lowered: seconds a slice waits at most for the interactive encodes
CHARS_PER_TOKEN = 4  # to cut a bulk encode into slices of about SLICE_TOKENS word-pieces
MODEL_TOKENS = 256  # the model reads at most this many word-pieces of a text


def lower_priority(nice: int) -> bool:
    """Run this thread at nice value `nice` (or lower still, if it already is): Linux, where a thread is a task
    of its own and the threads it starts inherit its priority. True when it runs below the process's priority;
    False (nothing changed) elsewhere or when refused."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        tid = threading.get_native_id()
        process, own = os.getpriority(os.PRIO_PROCESS, os.getpid()), os.getpriority(os.PRIO_PROCESS, tid)
        if max(nice, own) > own:
            os.setpriority(os.PRIO_PROCESS, tid, max(nice, own))
        return os.getpriority(os.PRIO_PROCESS, tid) > process
    except OSError:
        log.info("bulk encodes keep the server's CPU priority")
        return False


class _Request:
    __slots__ = ("texts", "vectors", "error", "done")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.vectors: np.ndarray | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class _Job:
    """A bulk encode: its slices (indices into `texts`) still to run, and its vectors as they come."""

    __slots__ = ("texts", "batch_size", "pending", "running", "out", "error")

    def __init__(self, texts: list[str], slices: list[list[int]], batch_size: int) -> None:
        self.texts = texts
        self.batch_size = batch_size
        self.pending: deque[list[int]] = deque(slices)
        self.running = 0
        self.out: np.ndarray | None = None
        self.error: BaseException | None = None

    @property
    def finished(self) -> bool:
        return self.error is not None or (not self.pending and not self.running)


def slices(texts: list[str], budget_tokens: int = SLICE_TOKENS, batch_size: int = 64) -> list[list[int]]:
    """Indices of `texts` in model calls of about `budget_tokens` word-pieces (estimated from characters, a text
    counting at most MODEL_TOKENS) and at most `batch_size` texts, longest texts first."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
    budget = budget_tokens * CHARS_PER_TOKEN
    out: list[list[int]] = []
    start = 0
    while start < len(order):
        end, size = start, 0
        while end < len(order) and (end == start or (end - start < batch_size and size < budget)):
            size += min(len(texts[order[end]]), MODEL_TOKENS * CHARS_PER_TOKEN)
            end += 1
        out.append(order[start:end])
        start = end
    return out


class SharedEmbedder(Embedder):
    """An Embedder for many threads at once: interactive encodes batched together and served first, bulk ones
    cut into slices run at a low priority (see the module doc). `requests` and `calls` count the interactive
    encodes and the model calls that served them; `slices_run`, `slices_rescued` the bulk slices run and those
    a waiting caller ran itself."""

    def __init__(self, model: str = DEFAULT_MODEL, *, gather: float = GATHER, max_texts: int = MAX_TEXTS,
                 bulk_nice: int = BULK_NICE, slice_tokens: int = SLICE_TOKENS, starved: float = STARVED,
                 runtime=None) -> None:
        super().__init__(model, runtime=runtime)
        self.gather = gather
        self.max_texts = max_texts
        self.bulk_nice = bulk_nice
        self.slice_tokens = slice_tokens
        self.starved = starved
        self.requests = 0
        self.calls = 0
        self._queue: deque[_Request] = deque()
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self._closed = False
        self._busy = 0  # interactive encodes waiting or being encoded
        self._idle = threading.Condition()
        self.yields = 0  # slices that waited for interactive encodes (where priorities cannot be lowered)
        self._jobs: deque[_Job] = deque()  # bulk encodes with slices waiting, taken in turn
        self._bulk = threading.Condition()
        self._bulk_threads: list[threading.Thread] = []
        self.bulk_lowered: bool | None = None  # whether the bulk threads run below the server's priority
        self._moved = time.monotonic()  # when a bulk slice last started or ended
        self.slices_run = 0
        self.slices_rescued = 0

    def encode(self, texts: list[str], *, batch_size: int = 64, small: bool | None = None) -> np.ndarray:
        if not texts or self._closed:
            return super().encode(texts, batch_size=batch_size, small=small)
        if small and len(texts) > SMALL_BATCH:  # one item's passages: interactive, in this thread, on one core
            return Embedder.encode(self, texts, batch_size=batch_size, small=True)
        if len(texts) > SMALL_BATCH or small is False:
            return self._encode_bulk(list(texts), batch_size)
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

    # --- bulk encodes -----------------------------------------------------------------------------------
    def _encode_bulk(self, texts: list[str], batch_size: int) -> np.ndarray:
        """Queue a bulk encode's slices for the bulk threads and wait for them; when none has started for
        `starved` seconds (none of any encode: the bulk threads get no CPU), run the next one here (see the
        module doc)."""
        self.load()  # a model that cannot load fails here, in the caller's thread
        job = _Job(texts, slices(texts, self.slice_tokens, batch_size), batch_size)
        with self._bulk:
            if not self._jobs:
                self._moved = time.monotonic()
            self._jobs.appendleft(job)  # it waits for the slice in hand, then takes its turn with the others
            if len(self._bulk_threads) < BULK_THREADS:
                t = threading.Thread(target=self._bulk_run, name=f"embed-bulk-{len(self._bulk_threads)}",
                                     daemon=True)
                self._bulk_threads.append(t)
                t.start()
            self._bulk.notify()
        while True:
            with self._bulk:
                while not job.finished and not (job.pending and time.monotonic() - self._moved >= self.starved):
                    self._bulk.wait(max(0.0, self._moved + self.starved - time.monotonic()) if job.pending else None)
                if job.finished:
                    break
                part = self._take(job)
                self.slices_rescued += 1
            self._run_slice(job, part)
        if job.error is not None:
            raise job.error
        assert job.out is not None
        return job.out

    def _take(self, job: _Job) -> list[int]:
        """The next slice of `job` (called with self._bulk held): it leaves the queue with its last slice."""
        part = job.pending.popleft()
        job.running += 1
        self._moved = time.monotonic()
        if not job.pending and job in self._jobs:
            self._jobs.remove(job)
        return part

    def _bulk_run(self) -> None:
        """A bulk thread: at a low priority, the queued encodes' slices in turn, until closed and drained."""
        lowered = lower_priority(self.bulk_nice)
        with self._bulk:
            self.bulk_lowered = lowered if self.bulk_lowered is None else self.bulk_lowered and lowered
        while True:
            if not lowered:  # the kernel does not put the requests first: wait for the interactive encodes here
                with self._idle:
                    if self._busy and not self._closed:
                        self.yields += 1
                        self._idle.wait_for(lambda: not self._busy or self._closed, YIELD)
            with self._bulk:
                while not self._jobs and not self._closed:
                    self._bulk.wait()
                if not self._jobs:
                    return
                job = self._jobs[0]
                part = self._take(job)
                if job.pending:  # the next encode's turn (round robin)
                    self._jobs.rotate(-1)
            self._run_slice(job, part)

    def _run_slice(self, job: _Job, part: list[int]) -> None:
        vecs: np.ndarray | None = None
        error: BaseException | None = None
        try:
            vecs = Embedder.encode(self, [job.texts[i] for i in part], batch_size=job.batch_size, small=False)
        except BaseException as e:  # the encode fails as a whole, in its caller
            error = e
        with self._bulk:
            job.running -= 1
            self._moved = time.monotonic()
            self.slices_run += 1
            if error is not None:
                job.error = job.error or error
                job.pending.clear()
                if job in self._jobs:
                    self._jobs.remove(job)
            elif vecs is not None and job.error is None:
                if job.out is None:
                    job.out = np.zeros((len(job.texts), vecs.shape[1]), dtype=vecs.dtype)
                job.out[part] = vecs
            self._bulk.notify_all()

    # --- interactive encodes -----------------------------------------------------------------------------
    def _done(self, n: int) -> None:
        with self._idle:
            self._busy -= n
            if not self._busy:
                self._idle.notify_all()

    def close(self) -> None:
        """Stop the threads once what waits is encoded (later encodes run in their callers)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            worker = self._worker
        with self._idle:
            self._idle.notify_all()
        with self._bulk:
            self._bulk.notify_all()
            bulk = list(self._bulk_threads)
        if worker is not None:
            worker.join(10)
        for t in bulk:
            t.join(60)
        if self.requests:
            log.info("shared embedding: %d interactive encodes in %d model calls; %d bulk slices (%d run by their "
                     "callers)", self.requests, self.calls, self.slices_run, self.slices_rescued)

    def _next(self) -> list[_Request] | None:
        """The next batch of interactive encodes: what waits after the gathering window (None once closed and
        empty)."""
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
        while (batch := self._next()) is not None:
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
