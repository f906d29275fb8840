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
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal, Slot

if TYPE_CHECKING:
    from engine import Engine, Settings

log = logging.getLogger(__name__)

Done = Callable[[Any], None]
Failed = Callable[[str], None]
ACTIVITY_SOURCE = "activity"  # a memory's source for the app's own events, which the memories listing leaves out


@dataclass(frozen=True)
class EngineInfo:
    """A snapshot of the open store, handed to the UI once the engine is open."""

    home: Path
    store: Path | str  # the store's file, or the server's address for a profile that lives on a server
    key_source: str  # keychain | passphrase
    created: bool  # this launch created the store (first run)
    settings: Settings
    log_dir: Path
    recovery_key: str | None = None  # only when this launch created the store: shown to the user once
    key_backend: str = ""  # where keyring keeps the key ("the macOS Keychain", "a plaintext file (…)")
    key_backend_secure: bool = True  # False: not a real system keychain (keyrings.alt's files)
    connection: Any = None  # engine Connection of a profile that lives on a server; None: on this computer
    unavailable: Mapping[str, str] = field(default_factory=dict)  # what this profile does not offer, and why


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



def search_caveat(e: Any) -> str:
    """On a worker thread: a sentence when a search just made found by words only what meaning would find
    too (the model still loading, or memories still waiting for their vectors); "" otherwise (and when
    embeddings are off or failed, which the status bar says)."""
    status = getattr(e, "embedding_status", None)  # a profile on a server: its search is the server's
    if status is None:
        return ""
    state, sentence = status()
    if state == "loading":
        return "Found by words only for now: the embedding model is still loading."
    if state == "ready" and "matches words" in sentence:
        return sentence
    return ""

class Bridge(QObject):
    """Runs engine calls off the UI thread and reports back through signals (see module doc)."""

    opened = Signal(object)  # EngineInfo
    open_failed = Signal(str, bool)  # message, needs_passphrase
    changed = Signal(object)  # engine.Changes
    model_state_changed = Signal(str, str)  # ready | loading | failed | off, detail
    failed = Signal(str)  # an operation without its own error handler failed
    ingest_progressed = Signal(object)  # engine IngestProgress
    ingest_finished = Signal(object)  # list[IngestResult], or [] when cancelled before any result
    import_progressed = Signal(int, int)  # conversations (or files of a vault) done, total
    import_finished = Signal(object)  # engine ImportReport
    import_failed = Signal(str)  # a sentence: the export could not be read; nothing was stored
    answer_token_received = Signal(str)
    answer_finished = Signal(object)  # AskResult
    answer_failed = Signal(str)
    answer_cancelled = Signal()
    agent_step_received = Signal(object)  # engine AgentStep, as it happens
    agent_confirm_requested = Signal(object)  # engine ConfirmRequest: answer with answer_agent()
    agent_finished = Signal(object)  # engine AgentRun
    agent_failed = Signal(str)
    agent_cancelled = Signal()
    paused_changed = Signal(bool)
    closed = Signal()
    outside_changed = Signal(object)  # engine.Changes written by another program (CLI, API, MCP)
    settings_changed = Signal(object)  # Settings, as saved now: by this app, or in settings.json by another program
    connection_changed = Signal(object)  # engine Connection (a server profile): reachable, writes waiting to send

    POLL_MS = 700  # how often the store is asked whether another program wrote to it (one PRAGMA when not)
    SERVER_POLL_MS = 1500  # how often a server profile's server is asked what any device wrote

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
        self._import_cancel: threading.Event | None = None
        self._ask_cancel: threading.Event | None = None
        self._consolidate_cancel: threading.Event | None = None
        self._agent_cancel: threading.Event | None = None
        self._agent_answers: dict[str, tuple[threading.Event, list[bool]]] = {}
        self._in_flight = 0
        self._lock = threading.Lock()
        self._closing = False
        self._model_watch: threading.Thread | None = None
        self._created = False
        self.paused = False
        self._token: int | None = None
        self._polling = False
        self._poll_timer = QTimer(self)
        self._poll_timer.setInterval(self.POLL_MS)
        self._poll_timer.timeout.connect(self.poll_outside_writes)
        self._passphrase: str | None = None
        self.open_error = ""  # why the last open failed: key_missing | wrong_key | other
        self._connected_now = False  # this launch connected the profile to a server (its first run)
        self.connection: Any = None  # the last engine Connection reported (None: a local profile)
        self._restored: tuple[Any, Path | None, str | None] | None = None

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
        if self._closing:  # the app quit while the recovery key was being checked
            return
        self._passphrase = passphrase  # kept in memory for the API server this app may start (serve_env)
        self._engine = self._writer.submit(self._open, passphrase)
        self._engine.add_done_callback(self._after_open)

    def store_exists(self) -> bool:
        from engine import Engine

        return Engine.store_exists(self._home)

    def uses_passphrase(self) -> bool:
        """True when this profile is opened with a passphrase (no keychain): its store's key, or the token of its
        server."""
        from engine import Engine, read_server_profile

        server = read_server_profile(self._profile_home())
        return server.protected is not None if server is not None else Engine.uses_passphrase(self._home)

    def is_server_profile(self) -> bool:
        """True when this profile keeps its memory on a server (`personal-llm connect`, or the first run)."""
        from engine import read_server_profile

        return read_server_profile(self._profile_home()) is not None

    def _profile_home(self) -> Path:
        from .profile import profile_home

        return self._home.expanduser().resolve() if self._home else profile_home()

    def _open(self, passphrase: str | None) -> Engine:
        from engine import Engine, open_profile, setup_logging

        setup_logging("desktop")
        created = not Engine.store_exists(self._home) and not self.is_server_profile()
        eng = open_profile(self._home, actor="desktop", embedder=self._embedder, passphrase=passphrase,
                           interactive=False)
        eng.on_change(self.changed.emit)
        self._created = created or self._connected_now
        return eng

    def connect_server(self, url: str, token: str, fingerprint: str | None, done: Done,
                       failed: Callable[[str, str | None], None], *, passphrase: str | None = None) -> None:
        """Make this (new) profile one that lives on the server at `url`: the server and the token are
        checked (TLS verified, or the certificate pinned by `fingerprint`), the token goes to the keychain;
        then `done(memories on the server)`. `failed(message, fingerprint)`: the fingerprint of a certificate
        no authority vouches for, to show the user, or None. Without a keychain `passphrase` protects the token
        (and opens the profile at each start)."""
        def run() -> int:
            from engine import check_server, connect_profile

            home = self._profile_home()
            home.mkdir(parents=True, exist_ok=True)
            checked = check_server(url, token, fingerprint=fingerprint or None)
            connect_profile(home, checked, token, passphrase=passphrase)
            return checked.memories

        def finished(future: Future[int]) -> None:
            error = future.exception()
            if error is None:
                self._connected_now = True
                self._relay.delivered.emit(done, future.result())
                return
            shown = getattr(error, "fingerprint", None)
            self._relay.delivered.emit(lambda message: failed(message, shown), describe_error(error))

        self._writer.submit(run).add_done_callback(finished)

    def disconnect_server(self, done: Done, failed: Failed) -> None:
        """Forget this profile's server (refused while writes wait to be sent); `done(None)`: the app closes,
        and the next start offers the first run's choice again."""
        def run(e: Engine) -> None:
            from engine import disconnect_profile, read_server_profile

            server = read_server_profile(self._profile_home())
            if server is None:
                raise RuntimeError("not a server profile")
            disconnect_profile(server)

        self.write(run, done, failed)

    def renew_token(self, token: str, done: Done, failed: Failed) -> None:
        """A server profile whose token was refused (revoked): connect it again with a new one, checked by the
        server first; the writes waiting in the outbox stay and leave with the next poll. `done(Connection)`."""
        self.write(lambda e: e.renew_token(token, self._passphrase), done, failed)

    def _after_open(self, future: Future[Engine]) -> None:
        if future.cancelled():  # the app quit before the store was opened
            return
        error = future.exception()
        if error is not None:
            from engine import KeyMissing, WrongKey

            self.open_error = ("key_missing" if isinstance(error, KeyMissing) else
                               "wrong_key" if isinstance(error, WrongKey) else "other")
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
            recovery_key=eng.recovery_key, connection=eng.connection(), unavailable=eng.unavailable(),
        )
        if eng.key_source == "keychain":
            backend, secure = eng.keychain_backend()
            from dataclasses import replace

            info = replace(info, key_backend=backend, key_backend_secure=secure)
        self._relay.delivered.emit(self._set_info, info)
        watcher = threading.Thread(target=self._watch_model, args=(eng, future), name="bridge-model-watch",
                                   daemon=True)
        with self._lock:
            if self._closing:  # quit while the store opened: close() closes it, nothing starts
                return
            self._model_watch = watcher
            watcher.start()

    def _set_info(self, info: EngineInfo) -> None:
        if self._closing:  # the app quit while the store opened: nothing starts after the quit
            return
        self._info = info
        self.connection = info.connection
        self.opened.emit(info)
        self.poll_outside_writes()  # takes the current token; later polls report what came after it
        self._poll_timer.setInterval(self.POLL_MS if info.connection is None else self.SERVER_POLL_MS)
        self._poll_timer.start()

    def poll_outside_writes(self) -> None:
        """Ask the store what other programs wrote since the last look; each change is announced through
        `changed` (and `outside_changed`), as the app's own writes are. Not counted in `busy`."""
        if self._engine is None or self._closing or self._polling or not self._engine.done():
            return
        self._polling = True
        engine_future, token = self._engine, self._token

        def run() -> None:
            try:
                eng = engine_future.result()
                found = eng.changes_since(token)
                settings = eng.reload_settings()  # settings.json changed by another program (one stat when not)
            except Exception:
                log.debug("change poll failed", exc_info=True)
                self._report_connection(engine_future)
                self._relay.delivered.emit(lambda _v: setattr(self, "_polling", False), None)
                return
            self._report_connection(engine_future)
            if settings is not None:
                self._relay.delivered.emit(self._settings_saved(None), settings)
            self._relay.delivered.emit(self._polled, found)

        try:
            self._readers.submit(run)
        except RuntimeError:  # shutting down
            self._polling = False

    def _report_connection(self, engine_future: Future[Engine]) -> None:
        """On a worker thread: a server profile's connection (reachable, writes waiting), to the UI thread
        when it changed; nothing for a local profile."""
        try:
            connection = engine_future.result().connection()
        except Exception:
            log.debug("reading the connection failed", exc_info=True)
            return
        if connection is not None:
            self._relay.delivered.emit(self._connection_read, connection)

    def _connection_read(self, connection: Any) -> None:
        if self._closing:
            return
        before, self.connection = self.connection, connection
        if before is None or (before.reachable, before.waiting, before.detail, before.memories) != (
                connection.reachable, connection.waiting, connection.detail, connection.memories):
            self.connection_changed.emit(connection)

    def _polled(self, found: Any) -> None:
        self._polling = False
        self._token = found.token
        if self._closing:
            return
        for changes in found.changes:
            self.outside_changed.emit(changes)
            self.changed.emit(changes)

    def _watch_model(self, eng: Engine, opened: Future[Engine]) -> None:
        """Start the engine's background work (model load + backfill, the folder watcher) and report the
        model's state. `close` waits for this thread before it closes the engine: nothing starts, and no
        signal is sent, once it has begun."""
        if self._closing:
            return
        if self._start_background:
            eng.start_watching()  # unless another program of this profile watches the folders
        if eng.embedding_status()[0] == "off":
            self._report_model("off", "Embeddings are off; search matches words only.")
            return
        if self._start_background and not self._closing:
            eng.start_background()  # loads the model (if needed) and embeds rows waiting for a vector
        if eng.embedding_status()[0] == "loading":
            self._report_model("loading", "Loading the embedding model…")
            if not self._start_background:
                return
            while not eng.wait_for_embeddings(0.2) and eng.embedding_status()[0] == "loading":
                if self._closing or self._engine is not opened:  # quitting, or a snapshot restored
                    return
        if self._closing or self._engine is not opened:
            return
        if eng.embedding_status()[0] == "ready":
            self._report_model("ready", "Semantic search is ready.")
        else:
            detail = eng.embedding_failure() or "The embedding model could not be loaded."
            self._report_model("failed", detail + " Search matches words only.")

    def _report_model(self, state: str, detail: str) -> None:
        if not self._closing:
            self.model_state_changed.emit(state, detail)

    def close(self, timeout: float = 30.0) -> None:
        """Finish queued writes, stop background work and close the store. Blocks (used at quit)."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self._poll_timer.stop()
        for cancel in (self._ingest_cancel, self._ask_cancel, self._consolidate_cancel, self._agent_cancel):
            if cancel is not None:
                cancel.set()
        self._jobs.shutdown(wait=True, cancel_futures=True)
        self._readers.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            watcher = self._model_watch
        if watcher is not None:  # before the engine closes: it may be starting the background work
            watcher.join(timeout)
        if self._engine is not None:
            def close_engine() -> None:
                engine = self._engine
                assert engine is not None
                if engine.cancel() or engine.cancelled():  # an open queued behind this close never starts
                    return
                if engine.exception() is None:
                    engine.result().close()

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
                from engine import Cancelled, ServerUnreachable, TokenRefused, UserError

                if isinstance(e, Cancelled):
                    value, e = None, None  # a user's cancel is not an error
                elif isinstance(e, ServerUnreachable | TokenRefused) and failed is None:
                    log.info("a read waits for the server")  # the status bar says offline, or the token refused
                    return
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
        """Run `fn(engine)` on the writer thread (then, on a server profile, the connection is read again: a
        write may wait in the outbox)."""
        def then(e: Engine) -> Any:
            try:
                return fn(e)
            finally:
                if self.connection is not None and self._engine is not None:
                    self._report_connection(self._engine)

        self._run(self._writer, then, done, failed)

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

    def memory_page(self, done: Done, *, kind: str | None = None, project: str | None = None,
                    archived: bool | None = False, conflicts_only: bool = False, limit: int = 200,
                    after: str | None = None, since: float | None = None, with_total: bool = True,
                    convert: Callable[[Any], Any] | None = None, failed: Failed | None = None) -> None:
        """done(engine MemoryPage): a page of the listing, newest first, with its total and where to go on;
        done(convert(page)) with `convert`, run on the reader thread (what a screen makes of the page)."""
        def run(e: Engine) -> Any:
            page = e.memory_page(kind=kind, project=project, archived=archived, conflicts_only=conflicts_only,
                                 limit=limit, after=after, since=since, with_total=with_total)
            return convert(page) if convert is not None else page

        self.read(run, done, failed)

    def memories_by_id(self, uids: Sequence[str], done: Done, failed: Failed | None = None) -> None:
        """done({uid: engine Memory}) for those of `uids` still stored (a forgotten one is left out)."""
        def run(e: Engine) -> dict[str, Any]:
            from engine import NotFound

            found: dict[str, Any] = {}
            for uid in uids:
                try:
                    found[uid] = e.get(uid)
                except NotFound:
                    pass
            return found

        self.read(run, done, failed)

    def count_matches(self, query: str, done: Done, *, project: str | None = None, kind: str | None = None,
                      since: float | None = None, include_archived: bool = False,
                      failed: Failed | None = None) -> None:
        """done(int): how many memories hold the search's words (recall shows the best of them); done(None)
        where that is not known (a profile on a server)."""
        def run(e: Engine) -> int | None:
            count = getattr(e, "count_matches", None)  # the server's HTTP API has no count
            return count(query, project=project, kind=kind, since=since,
                         include_archived=include_archived) if count is not None else None

        self.read(run, done, failed)

    def recall(self, query: str, done: Done, *, k: int = 50, project: str | None = None, kind: str | None = None,
               since: float | None = None, include_archived: bool = False, include_chunks: bool = False,
               failed: Failed | None = None, words_only: Callable[[str], None] | None = None) -> None:
        """Search as the user types: not counted as use (record_access=False). `words_only(sentence)`, after
        `done`: why some or all of the results were found by their words alone ("" when none was)."""
        def run(e: Engine) -> Any:
            hits = e.recall(query, k=k, project=project, kind=kind, since=since, include_archived=include_archived,
                            include_chunks=include_chunks, record_access=False)
            return hits, (search_caveat(e) if words_only is not None else "")

        def finish(value: Any) -> None:
            hits, caveat = value
            done(hits)
            if words_only is not None:
                words_only(caveat)

        self.read(run, finish, failed)

    def projects(self, done: Done) -> None:
        self.read(lambda e: e.projects(), done)

    def stats(self, done: Done) -> None:
        self.read(lambda e: e.stats(), done)

    def audit_log(self, done: Done, limit: int = 500) -> None:
        self.read(lambda e: e.audit_log(limit=limit), done)

    def audit_runs(self, done: Done, limit: int = 300) -> None:
        """The activity log in runs (a batch of writes is one run), newest first."""
        self.read(lambda e: e.audit_runs(limit=limit), done)

    def conflicts(self, done: Done) -> None:
        self.read(lambda e: e.conflicts(), done)

    def resolve(self, uid: str, keep: Any, done: Done | None = None, failed: Failed | None = None) -> None:
        self.write(lambda e: e.resolve(uid, keep=keep), done, failed)

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
    def list_documents(self, done: Done, project: str | None = None, *, with_failed: bool = False) -> None:
        """Ready documents; with_failed: then the ones that could not be ingested (each with its `error`)."""
        self.read(lambda e: e.list_documents(project=project)
                  + (e.list_documents(project=project, failed=True) if with_failed else []), done)

    def document_passages(self, uid: str, done: Done, failed: Failed | None = None) -> None:
        self.read(lambda e: e.document_passages(uid), done, failed)

    @staticmethod
    def supported_extensions() -> list[str]:
        """The file types ingest reads ('.md', '.pdf', …), for the file dialog's filter."""
        from engine import SUPPORTED_EXTENSIONS

        return sorted(SUPPORTED_EXTENSIONS)

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

    # ------------------------------------------------------------------------------------------------
    # moving the memory between this computer and a server
    # ------------------------------------------------------------------------------------------------
    def push_to_server(self, url: str, token: str, fingerprint: str | None, done: Done, failed: Failed,
                       progress: Callable[[int, int], None] | None = None) -> threading.Event:
        """Copy this (local) profile's memories into the account at `url`, on the jobs thread; `done(Moved)`, or
        done(None) when cancelled (set the event returned: it stops after the page being sent)."""
        from engine import push_to_server

        cancel = threading.Event()
        report = self._progress(progress)
        self._run(self._jobs, lambda e: push_to_server(e, url, token, fingerprint=fingerprint or None,
                                                       progress=report, cancel=cancel), done, failed)
        return cancel

    def copy_to_local(self, name: str, done: Done, failed: Failed,
                      progress: Callable[[int, int], None] | None = None, *,
                      passphrase: str | None = None) -> threading.Event:
        """Copy this server profile's memories into the local profile called `name` (made when new), on the
        jobs thread; `done(Copied)` (its `cancelled` set when stopped by the event returned). Without a
        keychain, `passphrase` protects a profile made now, or opens the one there."""
        from engine import copy_to_local

        from .profile import named_profile, profile_home

        cancel = threading.Event()
        report = self._progress(progress)

        def run(e: Engine) -> Any:
            from engine import Engine, UserError, read_server_profile

            try:
                home = named_profile(profile_home(), name)
            except SystemExit as problem:
                raise UserError(str(problem)) from None
            if read_server_profile(home) is not None:
                raise UserError(f"The profile {name} lives on a server too: copy into a profile kept on this "
                                "computer.")
            with Engine.open(home, actor="desktop", interactive=False, passphrase=passphrase) as local:
                return copy_to_local(e, local, progress=report, cancel=cancel)

        self._run(self._jobs, run, done, failed)
        return cancel

    def watch_status(self, done: Done) -> None:
        self.read(lambda e: e.watch_status(), done)

    def watch_add(self, path: str | Path, *, project: str | None = None, done: Done | None = None,
                  failed: Failed | None = None) -> None:
        self.write(lambda e: e.watch_add(path, project=project), done, failed)

    def watch_remove(self, path: str, *, done: Done | None = None, failed: Failed | None = None) -> None:
        self.write(lambda e: e.watch_remove(path), done, failed)

    def watch_pause(self, path: str, paused: bool, *, done: Done | None = None,
                    failed: Failed | None = None) -> None:
        self.write(lambda e: e.watch_pause(path, paused), done, failed)

    def cancel_ingest(self) -> None:
        if self._ingest_cancel is not None:
            self._ingest_cancel.set()

    def import_history(self, source: str, path: str | Path, project: str | None = None) -> None:
        """Import a ChatGPT or Claude export or an Obsidian vault (`source`: chatgpt, claude, obsidian) on the
        jobs thread; `import_progressed`, then `import_finished` or `import_failed` follow."""
        cancel = threading.Event()
        self._import_cancel = cancel
        path = Path(path)
        project = project or None

        def run(e: Engine) -> Any:
            if source == "obsidian":
                return e.import_obsidian(path, project=project, cancel=cancel,
                                         progress=lambda p: self.import_progressed.emit(p.files_done, p.files_total))
            method = e.import_chatgpt if source == "chatgpt" else e.import_claude
            return method(path, project=project, cancel=cancel, progress=self.import_progressed.emit)

        self._run(self._jobs, run, self.import_finished.emit, self.import_failed.emit)

    def cancel_import(self) -> None:
        if self._import_cancel is not None:
            self._import_cancel.set()

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

    def list_agents(self, done: Done) -> None:
        """The agents (built-in and the user's), for the Ask panel's picker."""
        self.read(lambda e: e.list_agents(), done)

    def agent_run(self, task: str, agent: str | None = None, project: str | None = None) -> None:
        """Run an agent on the jobs thread: `agent_step_received` per step, `agent_confirm_requested` when a
        step waits for the user (answer with `answer_agent`), then `agent_finished`, `agent_failed` or
        `agent_cancelled`."""
        cancel = threading.Event()
        self._agent_cancel = cancel

        def confirm(request: Any) -> bool:  # on the jobs thread: wait for the UI's answer, or Stop
            answered, approve = threading.Event(), [False]
            with self._lock:
                self._agent_answers[request.call_id] = (answered, approve)
            self.agent_confirm_requested.emit(request)
            try:
                while not answered.wait(0.1):
                    if cancel.is_set() or self._closing:
                        return False
                return approve[0]
            finally:
                with self._lock:
                    self._agent_answers.pop(request.call_id, None)

        self._run(
            self._jobs,
            lambda e: e.agent_run(task, agent=agent or None, project=project or None,
                                  on_step=self.agent_step_received.emit, confirm=confirm, cancel=cancel),
            lambda run: self.agent_finished.emit(run) if run is not None else self.agent_cancelled.emit(),
            self.agent_failed.emit,
        )

    def answer_agent(self, call_id: str, approve: bool) -> None:
        """The user's answer to `agent_confirm_requested`."""
        with self._lock:
            waiting = self._agent_answers.get(call_id)
        if waiting is not None:
            waiting[1][0] = approve
            waiting[0].set()

    def cancel_agent(self) -> None:
        """Stop the agent: at its next piece of text, tool call or question (a question waiting is declined)."""
        if self._agent_cancel is not None:
            self._agent_cancel.set()

    def test_connection(self, llm_settings: Any, done: Done) -> None:
        """Check an LLM configuration (saved or not) with a fresh router: result has ok, detail, models."""
        self.read(lambda e: e.check_llm(llm_settings), done, lambda message: done(_FailedHealth(message)))

    def health(self, done: Done, *, refresh: bool = False) -> None:
        """What works and what is missing (embedding model, LLM); `refresh` asks the LLM server again."""
        self.read(lambda e: e.health(refresh=refresh), done)

    def embedding_status(self, done: Done) -> None:
        """(state, detail) of the embedding model, with re-embedding progress after a change of model."""
        self.read(lambda e: e.embedding_status(), done)

    # ------------------------------------------------------------------------------------------------
    # settings
    # ------------------------------------------------------------------------------------------------

    # ------------------------------------------------------------------------------------------------
    # the knowledge graph
    # ------------------------------------------------------------------------------------------------
    def graph_neighbours(self, entity: str, hops: int, done: Done, failed: Failed | None = None) -> None:
        """An entity and what is within `hops` (1 or 2) of it (engine GraphView)."""
        self.read(lambda e: e.neighbours(entity, hops=hops), done, failed)

    def graph_around_memory(self, uid: str, hops: int, done: Done, failed: Failed | None = None) -> None:
        """The entities a memory is about and their neighbours (an empty view when it names none)."""
        self.read(lambda e: e.graph_around_memory(uid, hops=hops), done, failed)

    def graph_entities(self, done: Done, limit: int = 30) -> None:
        """(name, type, facts) of the best-connected entities."""
        self.read(lambda e: e.graph_entities(limit), done)

    def get_passage(self, uid: str, done: Done, failed: Failed | None = None) -> None:
        """A document passage (chk_…): text, document title and path, locator."""
        self.read(lambda e: e.get_passage(uid), done, failed)

    # ------------------------------------------------------------------------------------------------
    # export, import, backups, keys
    # ------------------------------------------------------------------------------------------------
    def _progress(self, progress: Callable[[int, int], None] | None) -> Callable[[int, int], None] | None:
        """A progress callback for a worker thread that calls `progress` on the UI thread."""
        if progress is None:
            return None
        return lambda done, total: self._relay.delivered.emit(lambda v: progress(*v), (done, total))

    def export(self, path: str | Path, passphrase: str | None, done: Done, failed: Failed,
               progress: Callable[[int, int], None] | None = None) -> None:
        """Export everything to `path` (encrypted with `passphrase` when given), on the jobs thread."""
        report = self._progress(progress)
        self._run(self._jobs, lambda e: e.export(Path(path), encrypt_passphrase=passphrase or None,
                                                 progress=report), done, failed)

    def import_file(self, path: str | Path, passphrase: str | None, done: Done, failed: Failed,
                    progress: Callable[[int, int], None] | None = None) -> None:
        """Merge an export (or a JSONL of memories) into the store, on the jobs thread."""
        report = self._progress(progress)
        self._run(self._jobs, lambda e: e.import_(Path(path), passphrase=passphrase or None, progress=report),
                  done, failed)

    @staticmethod
    def is_encrypted_export(path: str | Path) -> bool:
        """True when the file is an encrypted export (it needs a passphrase to import)."""
        from engine import Engine

        return Engine.is_encrypted_export(path)

    def backup_now(self, done: Done, failed: Failed, progress: Callable[[int, int], None] | None = None) -> None:
        """An encrypted snapshot into the backup folder (engine Snapshot), on the jobs thread."""
        report = self._progress(progress)
        self._run(self._jobs, lambda e: e.backup_now(progress=report), done, failed)

    def backup_status(self, done: Done) -> None:
        """Where snapshots go, the newest, whether one is due or old (engine BackupStatus)."""
        self.read(lambda e: e.backup_status(), done)

    def snapshots(self, done: Done) -> None:
        self.read(lambda e: e.snapshots(), done)

    def restore_snapshot(self, name: str, done: Done, failed: Failed) -> None:
        """Put a snapshot in place of the store: the engine is closed, the snapshot verified and restored
        (the current store kept aside), and the store opened again; `opened` follows, so every view reloads.
        `done` gets (snapshot, where the replaced store was kept, what to tell about that copy)."""
        if self._engine is None:
            raise RuntimeError("Bridge.open() must be called first")
        old = self._engine
        with self._lock:
            self._in_flight += 1

        def run() -> Engine:
            from engine import Engine

            for pool in (self._readers, self._jobs):  # let queued reads and jobs finish on the old engine
                pool.submit(lambda: None).result()
            eng = old.result()
            eng.close()
            self._restored = None
            try:
                snap, aside, _opens = Engine.restore_snapshot(self._home, name, actor="desktop")
                self._restored = (snap, aside, Engine.kept_aside_note(aside) if aside else None)
            finally:
                new = self._open(None)
            return new

        def finished(future: Future[Engine]) -> None:
            with self._lock:
                self._in_flight -= 1
            if future.cancelled():  # the app quit first
                return
            error = future.exception()
            self._after_open(future)  # `opened` (or `open_failed`) for the store as it now is
            if error is None and self._restored is not None:
                self._relay.delivered.emit(done, self._restored)
            else:
                self._relay.delivered.emit(failed, describe_error(error) if error else "The restore failed.")

        future = self._writer.submit(run)
        self._engine = future
        future.add_done_callback(finished)

    def change_passphrase(self, new: str, done: Done, failed: Failed) -> None:
        def changed(message: str) -> None:
            if self._passphrase is not None:
                self._passphrase = new
            done(message)

        self.write(lambda e: e.change_passphrase(new), changed, failed)

    def show_recovery_key(self, done: Done, failed: Failed) -> None:
        """(the recovery key, whether it was made just now). The caller re-authenticates the user first."""
        self.write(lambda e: e.show_recovery_key(), done, failed)

    def has_passphrase(self, done: Done) -> None:
        """done(True) when a passphrase opens this store (alone, or besides the keychain)."""
        self.read(lambda e: e.has_passphrase, done)

    def check_passphrase(self, phrase: str, done: Done) -> None:
        """done(True) when `phrase` is this store's passphrase (re-authentication before showing secrets)."""
        self.read(lambda e: e.passphrase_opens(phrase), done, lambda _message: done(False))

    def unlock_with_recovery(self, recovery_key: str, new_passphrase: str | None, done: Done,
                             failed: Failed) -> None:
        """Open the store with its recovery key (a new keychain entry, or a new passphrase where there is no
        keychain), then open it as usual: `opened` follows. `done` gets the engine's sentence."""
        def run() -> str:
            from engine import Engine

            return Engine.unlock_with_recovery(self._home, recovery_key, new_passphrase=new_passphrase or None)

        def finished(future: Future[str]) -> None:
            error = future.exception()
            if error is not None:
                self._relay.delivered.emit(failed, describe_error(error))
                return
            self._relay.delivered.emit(done, future.result())
            self.open(passphrase=new_passphrase or None)

        self._writer.submit(run).add_done_callback(finished)

    @staticmethod
    def passphrase_problem(phrase: str) -> str:
        """Why `phrase` cannot be a new passphrase, for people; '' when it can (the engine's rule)."""
        from engine import Engine

        return Engine.passphrase_problem(phrase)

    def keychain_available(self) -> bool:
        from engine import Engine

        return Engine.keychain_available()

    # ------------------------------------------------------------------------------------------------
    # the interfaces for other programs
    # ------------------------------------------------------------------------------------------------
    def api_token(self, done: Done) -> None:
        self.read(lambda e: e.api_token(), done)

    def serve_env(self) -> dict[str, str]:
        """The environment of `serve`: this one, this profile, and the passphrase when the store needs one."""
        import os

        env = dict(os.environ)
        home = self._info.home if self._info is not None else self._home
        if home is not None:
            env["PERSONAL_LLM_HOME"] = str(home)
        if self._passphrase and self.uses_passphrase():
            env["PERSONAL_LLM_PASSPHRASE"] = self._passphrase
        return env

    def serve_command(self, port: int) -> list[str]:
        """The command line of `personal-llm serve` on 127.0.0.1:`port`, printing its URL as JSON."""
        import sys

        if getattr(sys, "frozen", False):  # an installed bundle: its own `personal-llm` program
            command, _args = self.mcp_command()
            return [command, "serve", "--port", str(port), "--json"]
        return [sys.executable, "-m", "engine.cli", "serve", "--port", str(port), "--json"]

    @staticmethod
    def mcp_command() -> tuple[str, list[str]]:
        """(command, args) that start the MCP server, for an assistant's configuration: the installed
        `personal-llm` script when there is one next to this Python, else this Python with `-m engine.mcp`."""
        import shutil
        import sys

        for name in ("personal-llm", "personal-llm.exe"):
            script = Path(sys.executable).with_name(name)
            if script.exists():
                return str(script), ["mcp"]
        found = shutil.which("personal-llm")
        if found:
            return found, ["mcp"]
        return sys.executable, ["-m", "engine.mcp"]


    def _settings_saved(self, done: Done | None) -> Callable[[Settings], None]:
        """After a save (or settings.json changed by another program): the engine info the pages read carries
        the saved settings, `settings_changed` tells the pages, then `done` gets them."""
        def saved(value: Settings) -> None:
            if self._info is not None:
                from dataclasses import replace

                self._info = replace(self._info, settings=value.model_copy(deep=True))
            self.settings_changed.emit(value.model_copy(deep=True))
            if done:
                done(value)

        return saved

    def update_settings(self, change: Callable[[Settings], None] | Mapping[str, Any], done: Done | None = None,
                        failed: Failed | None = None) -> None:
        """Change some settings and save only those: a function that changes a copy of the settings in use, or
        {"llm.model": …} (dotted names). Every other setting stays as it is in settings.json now, whoever
        changed it (another page, the CLI, an edit of the file). `done` gets the settings as saved."""
        def save(e: Engine) -> Settings:
            if isinstance(change, Mapping):
                return e.update_settings(change)
            settings = e.settings.model_copy(deep=True)
            change(settings)
            return e.apply_settings(settings)

        self.write(save, self._settings_saved(done), failed)


@dataclass
class _FailedHealth:
    detail: str
    ok: bool = False
    models: tuple[str, ...] = ()


def project_problem(name: str) -> str | None:
    """Why `name` cannot be a project, as a sentence (the engine's own check, no round trip); None if it can."""
    from engine import Engine

    return Engine.project_problem(name)


def report_crashes() -> None:
    """A crash of the app writes every thread's Python stack (code locations only) to desktop-crash.log in the
    log folder, for a bug report."""
    from engine import report_crashes as report

    report("desktop")


def run_self_test() -> int:
    """`personal-llm-desktop --self-test`: the engine's self-test, printed on stdout; its exit code."""
    from engine.selftest import main

    return int(main([]) or 0)
