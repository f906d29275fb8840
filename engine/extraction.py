"""Facts from conversations, as they are stored: a background thread of a process that stays open (the app,
`serve`, MCP) that turns the conversation turns waiting (episodic memories not yet rolled up) into facts,
each derived from the turns it names (`Consolidation.extract_facts`, engine/consolidation.py).

Storing a turn only wakes the thread (a change listener sets an event): the store of a turn never waits for
the model. The thread waits until writes have been quiet for QUIET_SECONDS (a conversation stored turn by
turn is read in windows, not one request per turn), then asks the language model, and yields to the next
write: a pass stops after the window under way when a memory is stored, and goes on once writes are quiet
again, so storing a conversation does not share the machine with its own extraction. It runs when
`facts.enabled` is on (the default) and a language model is configured and answers; otherwise the turns
wait, and a process started later reads them. Logged: counts and timings, never text.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .context import Changes, Context

if TYPE_CHECKING:
    from .consolidation import Consolidation

log = logging.getLogger(__name__)

QUIET_SECONDS = 2.0  # writes quiet this long before the waiting turns are read
IDLE_SECONDS = 60.0  # a look at the queue this often even when nothing woke the thread (a model started later)


class FactExtraction:
    """The background thread (see the module doc). `consolidation` gives the part that writes the facts."""

    def __init__(self, ctx: Context, consolidation: Callable[[], Consolidation]):
        self.ctx = ctx
        self._consolidation = consolidation
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._yield = threading.Event()  # set by a write (or stop): the pass under way ends after its window
        self._thread: threading.Thread | None = None
        self._last_write = 0.0
        self.runs = 0  # passes that asked the model (tests)
        ctx.changes.subscribe(self._changed)

    def _changed(self, changes: Changes) -> None:
        if changes.action in ("remember", "update") and self._thread is not None \
                and threading.current_thread() is not self._thread:  # not the facts this thread writes
            self._last_write = time.monotonic()
            self._yield.set()
            self._wake.set()

    def enabled(self) -> bool:
        settings = self.ctx.settings
        # a server's database (no profile) has no roll-up rows yet (docs/server.md): there the turns wait
        return bool(settings.facts.enabled) and settings.llm.provider != "none" and self.ctx.profile is not None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop = threading.Event()
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
                log.info("facts from conversations wait: no language model answers")
