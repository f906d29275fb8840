"""The only door from the desktop app to the engine.

Threads (the UI thread never calls the engine, not even to open it):
- one *writer* thread runs `Engine.open` and every short write (remember, update, forget, settings);
- a small pool of *reader* threads runs queries (recall, lists, stats, audit, health checks);
- one *jobs* thread runs long, cancellable work (ingest, ask, consolidation), so that a quick capture
  is never stuck behind a folder being ingested (the engine's own write lock keeps transactions apart).

Results come back to the UI thread through Qt signals; every write the engine makes is announced by
`changed` (from `Engine.on_change`), so each view refreshes itself. The engine package is imported on
the writer thread, which keeps it (numpy, SQLCipher, pydantic) off the window's critical path; so
logging is set up there too, as the engine is first imported.

The bridge calls only the facade (`engine.Engine`) and imports only the package face (`engine`) and the
self-test entry point; tests/unit/test_architecture.py holds it to that.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal, Slot

if TYPE_CHECKING:
    from engine import Engine, Settings

log = logging.getLogger(__name__)

Done = Callable[[Any], None]
Failed = Callable[[str], None]


@dataclass(frozen=True)
class EngineInfo:
    """A snapshot of the open store, handed to the UI once the engine is open."""

    home: Path
    store: Path
    key_source: str  # keychain | passphrase
    created: bool  # this launch created the store (first run)
    settings: Settings
    log_dir: Path
    recovery_key: str | None = None  # only when this launch created the store: shown to the user once


class _Relay(QObject):
    """Carries a callback and its argument from a worker thread to the UI thread."""

    delivered = Signal(object, object)

    def __init__(self) -> None:
        super().__init__()
        self.delivered.connect(self._deliver)

    @Slot(object, object)
    def _deliver(self, callback: Callable[[Any], None], value: Any) -> None:
        try:
            callback(value)
        except Exception:
            log.exception("UI callback failed")


def describe_error(error: BaseException) -> str:
    """A sentence for people. Engine `UserError`s already are one; anything else is our bug."""
    from engine import UserError, log_dir

    if isinstance(error, UserError):
        return str(error)

    return (f"Something went wrong inside Personal LLM ({type(error).__name__}). Your memories are safe; "
            f"the details are in the log at {log_dir()}.")


class Bridge(QObject):
    """Runs engine calls off the UI thread and reports back through signals (see module doc)."""

    opened = Signal(object)  # EngineInfo
    open_failed = Signal(str, bool)  # message, needs_passphrase
    changed = Signal(object)  # engine.Changes
    model_state_changed = Signal(str, str)  # ready | loading | failed | off, detail
    failed = Signal(str)  # an operation without its own error handler failed
    ingest_progressed = Signal(object)  # engine IngestProgress
    ingest_finished = Signal(object)  # list[IngestResult], or [] when cancelled before any result
    answer_token_received = Signal(str)
    answer_finished = Signal(object)  # AskResult
    answer_failed = Signal(str)
    answer_cancelled = Signal()
    paused_changed = Signal(bool)
    closed = Signal()

    def __init__(self, home: Path | str | None = None, *, embedder: Any = None,
                 start_background: bool = True, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._home = Path(home) if home else None
        self._embedder = embedder
        self._start_background = start_background
        self._relay = _Relay()
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="bridge-writer")
        self._readers = ThreadPoolExecutor(2, thread_name_prefix="bridge-reader")
        self._jobs = ThreadPoolExecutor(1, thread_name_prefix="bridge-jobs")
        self._engine: Future[Engine] | None = None
        self._info: EngineInfo | None = None
        self._ingest_cancel: threading.Event | None = None
        self._ask_cancel: threading.Event | None = None
        self._consolidate_cancel: threading.Event | None = None
        self._in_flight = 0
        self._lock = threading.Lock()
        self._closing = False
        self._created = False
        self.paused = False

    # ------------------------------------------------------------------------------------------------
    # lifecycle
    # ------------------------------------------------------------------------------------------------
    @property
    def info(self) -> EngineInfo | None:
        return self._info

    @property
    def busy(self) -> bool:
        """True while any engine call is queued or running (tests wait on this)."""
        return self._in_flight > 0

    def open(self, passphrase: str | None = None) -> None:
        """Open (or create) the store on the writer thread; `opened` or `open_failed` follows."""
        self._engine = self._writer.submit(self._open, passphrase)
        self._engine.add_done_callback(self._after_open)

    def store_exists(self) -> bool:
        from engine import Engine

        return Engine.store_exists(self._home)

    def uses_passphrase(self) -> bool:
        """True when this profile's store is opened with a passphrase (no keychain)."""
        from engine import Engine

        return Engine.uses_passphrase(self._home)

    def _open(self, passphrase: str | None) -> Engine:
        from engine import Engine, setup_logging

        setup_logging("desktop")
        created = not Engine.store_exists(self._home)
        eng = Engine.open(self._home, actor="desktop", embedder=self._embedder, passphrase=passphrase,
                          interactive=False)
        eng.on_change(self.changed.emit)
        self._created = created
        return eng

    def _after_open(self, future: Future[Engine]) -> None:
        error = future.exception()
        if error is not None:
            from engine import KeyMissing, WrongKey

            if not isinstance(error, KeyMissing | WrongKey):
                log.error("opening the store failed", exc_info=error)
            needs_passphrase = (isinstance(error, KeyMissing) and "passphrase" in str(error).lower()) or (
                isinstance(error, WrongKey) and self.uses_passphrase())
            self._relay.delivered.emit(lambda _: self.open_failed.emit(describe_error(error), needs_passphrase),
                                       None)
            return
        eng = future.result()
        from engine import log_dir

        info = EngineInfo(
            home=eng.home, store=eng.store_path, key_source=eng.key_source,
            created=self._created, settings=eng.settings.model_copy(deep=True), log_dir=log_dir(),
            recovery_key=eng.recovery_key,
        )
        self._relay.delivered.emit(self._set_info, info)
        threading.Thread(target=self._watch_model, args=(eng,), name="bridge-model-watch", daemon=True).start()

    def _set_info(self, info: EngineInfo) -> None:
        self._info = info
        self.opened.emit(info)

    def _watch_model(self, eng: Engine) -> None:
        """Start the engine's background work (model load + backfill) and report the model's state."""
        if eng.embedding_status()[0] == "off":
            self.model_state_changed.emit("off", "Embeddings are off; search matches words only.")
            return
        if self._start_background:
            eng.start_background()  # loads the model (if needed) and embeds rows waiting for a vector
        if eng.embedding_status()[0] == "loading":
            self.model_state_changed.emit("loading", "Loading the embedding model…")
            if not self._start_background:
                return
            eng.wait_for_embeddings()
        if self._closing:
            return
        if eng.embedding_status()[0] == "ready":
            self.model_state_changed.emit("ready", "Semantic search is ready.")
        else:
            detail = eng.embedding_failure() or "The embedding model could not be loaded."
            self.model_state_changed.emit("failed", detail + " Search matches words only.")

    def close(self, timeout: float = 30.0) -> None:
        """Finish queued writes, stop background work and close the store. Blocks (used at quit)."""
        if self._closing:
            return
        self._closing = True
        for cancel in (self._ingest_cancel, self._ask_cancel, self._consolidate_cancel):
            if cancel is not None:
                cancel.set()
        self._jobs.shutdown(wait=True, cancel_futures=True)
        self._readers.shutdown(wait=True, cancel_futures=True)
        if self._engine is not None:
            def close_engine() -> None:
                assert self._engine is not None
                if self._engine.exception() is None:
                    self._engine.result().close()

            self._writer.submit(close_engine).result(timeout)
        self._writer.shutdown(wait=True)
        self.closed.emit()

    # ------------------------------------------------------------------------------------------------
    # plumbing
    # ------------------------------------------------------------------------------------------------
    def _run(self, pool: ThreadPoolExecutor, fn: Callable[[Engine], Any], done: Done | None,
             failed: Failed | None) -> None:
        if self._engine is None:
            raise RuntimeError("Bridge.open() must be called first")
        if self._closing:
            return
        engine_future = self._engine
        with self._lock:
            self._in_flight += 1

        def run() -> None:
            try:
                value = fn(engine_future.result())
            except BaseException as e:  # noqa: BLE001 - every failure goes back to the UI as a sentence
                from engine import Cancelled, UserError

                if isinstance(e, Cancelled):
                    value, e = None, None  # a user's cancel is not an error
                else:
                    if not isinstance(e, UserError):
                        log.error("engine call failed", exc_info=e)
                    message = describe_error(e)
                    self._relay.delivered.emit(failed or self.failed.emit, message)
                    return
                if done is not None:
                    self._relay.delivered.emit(done, value)
            else:
                if done is not None:
                    self._relay.delivered.emit(done, value)
            finally:
                with self._lock:
                    self._in_flight -= 1

        pool.submit(run)

    def write(self, fn: Callable[[Engine], Any], done: Done | None = None, failed: Failed | None = None) -> None:
        """Run `fn(engine)` on the writer thread."""
        self._run(self._writer, fn, done, failed)

    def read(self, fn: Callable[[Engine], Any], done: Done | None = None, failed: Failed | None = None) -> None:
        """Run `fn(engine)` on a reader thread."""
        self._run(self._readers, fn, done, failed)

    # ------------------------------------------------------------------------------------------------
    # memories
    # ------------------------------------------------------------------------------------------------
    def remember(self, text: str, *, kind: str = "fact", project: str | None = None,
                 importance: float | None = None, at: str | None = None, embed: str = "auto",
                 done: Done | None = None, failed: Failed | None = None) -> None:
        """Store a memory on the writer thread. embed="auto": embedded at once when the model is loaded, so
        near-duplicates merge as from any other door (else when its vector arrives, by the engine)."""
        self.write(lambda e: e.remember(text, kind=kind, project=project or None, importance=importance, at=at,
                                        embed=embed), done, failed)

    def update(self, uid: str, done: Done | None = None, failed: Failed | None = None, **fields: Any) -> None:
        self.write(lambda e: e.update(uid, **fields), done, failed)

    def mark_used(self, uids: Sequence[str], how: str) -> None:
        """The user opened, edited or copied these memories (counted as use; a search result list is not)."""
        self.write(lambda e: e.mark_used(list(uids), how=how))

    def forget(self, uid: str, done: Done | None = None, failed: Failed | None = None) -> None:
        self.write(lambda e: e.forget(uid), done, failed)

    def forget_now(self, uids: Sequence[str], timeout: float = 10.0) -> None:
        """Forget synchronously (quit with deletes still in their undo window). Blocks the caller."""
        if self._engine is None or not uids:
            return

        def run() -> None:
            from engine import NotFound

            eng = self._engine.result()  # type: ignore[union-attr]
            for uid in uids:
                try:
                    eng.forget(uid)
                except NotFound:
                    pass

        self._writer.submit(run).result(timeout)

    def get(self, uid: str, done: Done, failed: Failed | None = None) -> None:
        self.read(lambda e: e.get(uid), done, failed)

    def list_memories(self, done: Done, *, kind: str | None = None, project: str | None = None,
                      archived: bool | None = False, conflicts_only: bool = False, limit: int = 500) -> None:
        self.read(lambda e: e.list_memories(kind=kind, project=project, archived=archived,
                                            conflicts_only=conflicts_only, limit=limit), done)

    def recall(self, query: str, done: Done, *, k: int = 50, project: str | None = None, kind: str | None = None,
               since: float | None = None, include_archived: bool = False, include_chunks: bool = False,
               failed: Failed | None = None) -> None:
        """Search as the user types: not counted as use (record_access=False)."""
        self.read(lambda e: e.recall(query, k=k, project=project, kind=kind, since=since,
                                     include_archived=include_archived, include_chunks=include_chunks,
                                     record_access=False), done, failed)

    def projects(self, done: Done) -> None:
        self.read(lambda e: e.projects(), done)

    def stats(self, done: Done) -> None:
        self.read(lambda e: e.stats(), done)

    def audit_log(self, done: Done, limit: int = 500) -> None:
        self.read(lambda e: e.audit_log(limit=limit), done)

    def conflicts(self, done: Done) -> None:
        self.read(lambda e: e.conflicts(), done)

    def resolve(self, uid: str, keep: Any, done: Done | None = None) -> None:
        self.write(lambda e: e.resolve(uid, keep=keep), done)

    def consolidate(self, done: Done | None = None, failed: Failed | None = None) -> None:
        """Decay, archive, roll up, find contradictions (on the jobs thread)."""
        cancel = threading.Event()
        self._consolidate_cancel = cancel
        self._run(self._jobs, lambda e: e.consolidate(cancel=cancel), done, failed)

    def set_paused(self, paused: bool) -> None:
        def apply(e: Engine) -> bool:
            e.paused = paused  # resuming wakes the background
            return paused

        self.paused = paused
        self.write(apply, self.paused_changed.emit)

    # ------------------------------------------------------------------------------------------------
    # documents
    # ------------------------------------------------------------------------------------------------
    def list_documents(self, done: Done, project: str | None = None) -> None:
        self.read(lambda e: e.list_documents(project=project), done)

    def ingest(self, paths: Sequence[str | Path], project: str | None = None) -> None:
        """Ingest files/folders on the jobs thread; progress and results arrive as signals."""
        cancel = threading.Event()
        self._ingest_cancel = cancel
        paths = [Path(p) for p in paths]
        self._run(
            self._jobs,
            lambda e: e.ingest(paths, project=project or None, progress=self.ingest_progressed.emit, cancel=cancel),
            lambda results: self.ingest_finished.emit(list(results or [])),
            lambda message: (self.failed.emit(message), self.ingest_finished.emit([])),
        )

    def cancel_ingest(self) -> None:
        if self._ingest_cancel is not None:
            self._ingest_cancel.set()

    # ------------------------------------------------------------------------------------------------
    # ask and the language model
    # ------------------------------------------------------------------------------------------------
    def ask(self, question: str, project: str | None = None) -> None:
        """Stream an answer: `answer_token_received` per piece, then `answer_finished` or `answer_failed`."""
        cancel = threading.Event()
        self._ask_cancel = cancel
        self._run(
            self._jobs,
            lambda e: e.ask(question, project=project or None, on_token=self.answer_token_received.emit,
                            cancel=cancel),
            lambda result: self.answer_finished.emit(result) if result is not None else self.answer_cancelled.emit(),
            self.answer_failed.emit,
        )

    def cancel_ask(self) -> None:
        if self._ask_cancel is not None:
            self._ask_cancel.set()

    def test_connection(self, llm_settings: Any, done: Done) -> None:
        """Check an LLM configuration (saved or not) with a fresh router: result has ok, detail, models."""
        self.read(lambda e: e.check_llm(llm_settings), done, lambda message: done(_FailedHealth(message)))

    def health(self, done: Done) -> None:
        """What works and what is missing (embedding model, LLM) — for the first-run card."""
        self.read(lambda e: e.health(), done)

    def embedding_status(self, done: Done) -> None:
        """(state, detail) of the embedding model, with re-embedding progress after a change of model."""
        self.read(lambda e: e.embedding_status(), done)

    # ------------------------------------------------------------------------------------------------
    # settings
    # ------------------------------------------------------------------------------------------------
    def save_settings(self, settings: Settings, done: Done | None = None, failed: Failed | None = None) -> None:
        def save(e: Engine) -> Settings:
            e.apply_settings(settings.model_copy(deep=True))  # saved, and the next question uses it
            return settings

        def saved(value: Settings) -> None:
            if self._info is not None:
                from dataclasses import replace

                self._info = replace(self._info, settings=value.model_copy(deep=True))
            if done:
                done(value)

        self.write(save, saved, failed)


@dataclass
class _FailedHealth:
    detail: str
    ok: bool = False
    models: tuple[str, ...] = ()


def run_self_test() -> int:
    """`personal-llm-desktop --self-test`: the engine's self-test, printed on stdout; its exit code."""
    from engine.selftest import main

    return int(main([]) or 0)
