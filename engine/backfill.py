"""Background work while a store is open: the embedding model loads off-thread, then rows waiting for a
vector are embedded (and ingests a crash interrupted are finished first)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from . import heap, native
from .embeddings import EmbeddingUnavailable
from .space import VectorSpace
from .store import database_errors

log = logging.getLogger(__name__)

RETRY_SECONDS = 30.0  # how often a model served by another program (Ollama) that failed is asked again


class Backfill:
    """One daemon thread per open store; `wake()` after a write that left rows without vectors."""

    def __init__(self, space: VectorSpace):
        self.space = space
        self.paused = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._changes_seen = 0  # the store's `changes` at the last pass
        self._changes_trimmed = 0  # ... and when the heap was last trimmed
        self.trims = 0  # heap trims made (tests)

    def start(self, resume: Callable[[threading.Event], object] | None = None) -> None:
        """Load the model off-thread and keep embedding rows that wait for a vector. `resume(cancel)` runs
        once the model is loaded, before the first pass."""
        if self._thread is not None or not self.space.available():
            return
        stop = self._stop = threading.Event()  # a fresh one: a stopped backfill can start again (a new model)

        def run() -> None:
            while True:
                try:
                    with native.stop_on(stop):  # a stop ends the load at its next step (engine/native.py)
                        self.space.embedder.load()
                    if stop.is_set():
                        return
                    self.space.ensure()  # a new model's space is stamped now, so its rows show as waiting
                    break
                except native.Halted:
                    return
                except EmbeddingUnavailable:
                    # a model served by another program (Ollama) may come up later: ask again now and then
                    if not self.space.embedder.retries or stop.wait(RETRY_SECONDS):
                        return
            self.space.warm()  # the vector mirrors, before the first recall needs them
            if stop.is_set():
                return
            if resume is not None:
                try:
                    resume(stop)  # finish ingests a crash interrupted
                except Exception:
                    log.exception("resuming interrupted ingests failed")
            while not stop.is_set():
                # cleared before the pass, not after the wait: a wake() between the two would be lost, and
                # the rows it announced would wait for the next timeout
                self._wake.clear()
                if not self.paused:
                    try:
                        self.space.embed_pending(cancel=stop)
                    except EmbeddingUnavailable as e:  # Ollama went away: the rows wait, recall matches words
                        log.info("background embedding paused: %s", type(e).__name__)
                    except Exception:
                        log.exception("background embedding failed")
                if not stop.is_set():
                    self._trim_when_quiet()
                self._wake.wait(5.0)

        self._thread = threading.Thread(target=run, name="engine-background", daemon=True)
        self._thread.start()

    def _trim_when_quiet(self) -> None:
        """After a burst of writes (an ingest, a conversation stored, a re-embedding), once a whole pass saw
        none: the freed heap goes back to the OS (engine/heap.py), so an open app is light at rest again."""
        try:
            changes = self.space.store.changes
        except database_errors():  # the store closed under a thread that outlived stop()
            return
        if changes != self._changes_trimmed and changes == self._changes_seen:
            if heap.trim():
                self.trims += 1
            self._changes_trimmed = changes
        self._changes_seen = changes

    @property
    def running(self) -> bool:
        return self._thread is not None

    def wake(self) -> None:
        self._wake.set()

    STOP_SECONDS = 30.0  # a step of a model load, a batch being embedded: seconds, even on a loaded machine

    def stop(self) -> None:
        """Stop the thread and wait for it: a model loading stops at its next step, an embedding pass after
        its batch, so that the store never closes (nor the process exits) under it."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.STOP_SECONDS)
            if self._thread.is_alive():
                log.warning("the background embedding did not stop within %.0f s", self.STOP_SECONDS)
            self._thread = None
