"""Facts from conversations, as they are stored: a background thread of a process that stays open (the app,
`serve`, MCP) that turns the conversation turns waiting (episodic memories not yet rolled up) into facts,
each derived from the turns it names (`Consolidation.extract_facts`, engine/consolidation.py).

Storing a turn only wakes the thread (a change listener sets an event): the store of a turn never waits for
the model. The thread waits until writes have been quiet for QUIET_SECONDS (a conversation stored turn by
turn is read in windows, not one request per turn), then asks the language model, and yields to the next
write: a pass stops after the window under way when a memory is stored, and goes on once writes are quiet
again, so storing a conversation does not share the machine with its own extraction. It runs when
`facts.enabled` is on (the default) and a language model is configured and answers; otherwise the turns
wait, and a process started later reads them.

A look costs nothing when there is nothing to do: it reads the store's counts (one small read, on a
connection of its own with a small cache) and goes no further when no turn waits; only then is the model
asked whether it answers (its client loaded then), and a model that does not answer is asked again after
a wait that doubles each time (RETRY_SECONDS up to RETRY_MAX_SECONDS; at once when the settings change).
It writes through the process's one writer, so the pages the writer keeps cached stay cached. Logged:
counts and timings, never text.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .context import Changes, Context
from .language import LanguageModel
from .store import tallies

if TYPE_CHECKING:
    from .config import LLMSettings
    from .consolidation import Consolidation

log = logging.getLogger(__name__)

QUIET_SECONDS = 2.0  # writes quiet this long before the waiting turns are read
IDLE_SECONDS = 60.0  # a look at the queue this often even when nothing woke the thread (a model started later)
RETRY_SECONDS = 30.0  # a model that did not answer is asked again after this long, then twice as long each time
RETRY_MAX_SECONDS = 600.0


class FactExtraction:
    """The background thread (see the module doc). `consolidation` gives the part that writes the facts."""

    def __init__(self, ctx: Context, language: LanguageModel, consolidation: Callable[[], Consolidation]):
        self.ctx = ctx
        self.language = language
        self._consolidation = consolidation
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._yield = threading.Event()  # set by a write (or stop): the pass under way ends after its window
        self._thread: threading.Thread | None = None
        self._last_write = 0.0
        self.runs = 0  # passes that asked the model (tests)
        self.asked = 0  # times the thread asked whether the model answers (tests)
        self._failures = 0  # the model's checks that failed in a row
        self._retry_at = 0.0  # before this (monotonic), a model that did not answer is not asked again
        self._failed_with: LLMSettings | None = None  # the settings it did not answer with
        ctx.changes.subscribe(self._changed)

    def _changed(self, changes: Changes) -> None:
        if changes.action in ("remember", "update") and self._thread is not None \
                and threading.current_thread() is not self._thread:  # not the facts this thread writes
            self._last_write = time.monotonic()
            self._yield.set()
            self._wake.set()

    def enabled(self) -> bool:
        # a server's database (no profile) has no roll-up rows yet (docs/server.md): there the turns wait
        return bool(self.ctx.settings.facts.enabled) and self.ctx.profile is not None \
            and self.language.settings().provider != "none"

    def waiting(self) -> int:
        """Turns not read yet (the counts kept by triggers: one small read, whatever the store's size)."""
        return sum(t.n for t in tallies.memory_tallies(self.ctx.store.small)
                   if t.kind == "episodic" and not t.processed and not t.archived)

    def model_answers(self) -> bool:
        """Whether the language model answers (its health, cached by the router); one that did not is asked
        again only after RETRY_SECONDS, twice as long after each further failure, or once its settings
        changed."""
        llm = self.language.settings()
        if self._failures and llm == self._failed_with and time.monotonic() < self._retry_at:
            return False
        self.asked += 1
        router, _why = self.language.ready()
        if router is not None:
            self._failures = 0
            return True
        self._failures = self._failures + 1 if llm == self._failed_with else 1
        self._failed_with = llm
        wait = min(RETRY_MAX_SECONDS, RETRY_SECONDS * 2 ** (self._failures - 1))
        self._retry_at = time.monotonic() + wait
        log.info("facts from conversations wait: no language model answers (asked again in %.0fs)", wait)
        return False

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop = threading.Event()
        self._last_write = time.monotonic()  # a process that has just started is busy: look once it is quiet
        self._thread = threading.Thread(target=self._run, name="fact-extraction", daemon=True)
        self._thread.start()
        self._wake.set()  # turns stored while no such process ran

    def stop(self) -> None:
        self._stop.set()
        self._yield.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        stop = self._stop
        while not stop.is_set():
            self._wake.wait(IDLE_SECONDS)
            self._wake.clear()
            while not stop.is_set() and (left := QUIET_SECONDS - (time.monotonic() - self._last_write)) > 0:
                stop.wait(left)  # a conversation still being stored: read it once it is quiet
            if stop.is_set() or not self.enabled():
                continue
            self._yield.clear()
            if time.monotonic() - self._last_write < QUIET_SECONDS:  # a write came meanwhile
                self._wake.set()
                continue
            try:
                if not self.waiting() or not self.model_answers():
                    continue  # nothing more read or written, no model client loaded
                t0 = time.perf_counter()
                report = self._consolidation().extract_facts(cancel=self._yield)
            except Exception:
                log.exception("extracting facts from conversations failed")
                continue
            if report.windows or report.resumed:
                self.runs += 1
                log.info("facts from conversations: %d windows, %d turns, %d facts in %.2fs", report.windows,
                         report.sources, report.facts, time.perf_counter() - t0)
            elif report.note:
                log.info("facts from conversations wait: the language model did not answer")
