"""The engine's facade: one object per open store, composed of parts. Everything the CLI, API, MCP server
and desktop do goes through here. Synchronous and thread-safe: reads use per-thread connections, writes
take turns.

The parts are attributes (docs/architecture.md draws them):

    eng.memories       remember, edit, forget memories             engine/memories.py
    eng.documents      ingest files, list and forget documents     engine/ingest.py
    eng.retrieval      hybrid recall                               engine/recall.py
    eng.graph          the knowledge graph                         engine/graph.py
    eng.consolidation  decay, archive, roll-up, contradictions     engine/consolidation.py
    eng.answers        grounded answers, conversations             engine/ask.py
    eng.transfer       export and import                           engine/transfer.py
    eng.imports        ChatGPT/Claude histories, Obsidian vaults   engine/imports/
    eng.agents         agents: typed tools, the bounded loop       engine/agent/
    eng.audit          the audit log                               engine/audit.py
    eng.space          the embedding model and vectors             engine/space.py
    eng.language       the language model                          engine/language.py
    eng.backfill       background embedding                        engine/backfill.py
    eng.fts            full-text indexes kept in few segments      engine/fts_merge.py
    eng.watch          watched folders and their watcher           engine/watch.py

Each takes the shared `Context` and the sibling parts it uses, so `__init__` shows the order of
dependencies. The methods below are one-line delegations (verbs that span parts choose the part).
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from . import backup, erasure, heap, keyops, partials
from .audit import AuditLog
from .backfill import Backfill
from .cipher import is_encrypted
from .context import ChangeFeed, Changes, Context
from .embedders import make_embedder
from .embeddings import Embedder, resolve_model_choice
from .errors import DiskFull, EngineError, UserError
from .extraction import FactExtraction
from .feed import OutsideWrites, StoreChanges
from .fts_merge import FtsMerger
from .graph import Graph
from .keys import Profile, keychain_token, keychain_usable, passphrase_problem, read_profile
from .language import LanguageModel
from .locking import InUse
from .memories import Memories, Remembered
from .memory_rules import check_project
from .paths import STORE_FILE, home_dir
from .recall import Retriever
from .settings_file import SettingsPreview, read_settings, settings_stamp
from .space import Mutation, VectorSpace
from .store import Connection, Store, state, stats, tallies
from .store.sqlite import db
from .store.sqlite.migrations import SCHEMA_VERSION, is_current, migrate
from .unlock import open_store

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # engine/agent is imported when an agent is first used: a CLI remember never pays for it
    from .agent import AgentInfo, AgentRun, Agents, AgentStep, ConfirmRequest

    # the parts a recall or a remember never uses are made (and their modules imported) on first use
    from .ask import Answers, AskResult
    from .config import LLMSettings, Settings
    from .consolidation import ConflictPair, Consolidation, ConsolidationReport, Resolution
    from .graph_models import ExtractionReport, GraphView
    from .hits import Hit
    from .imports import ImportReport, Imports
    from .ingest import Allow, Document, Documents, IngestProgress, IngestResult, Passage
    from .keyops import OpenStore
    from .llm import Health, LLMRouter
    from .models import (
        AuditEntry,
        AuditRun,
        ForgetResult,
        HealthReport,
        Memory,
        MemoryPage,
        RememberResult,
        Stats,
        StoreDiagnostics,
    )
    from .store.postgres.database import Database
    from .transfer import ExportResult, ImportResult, Progress, Transfer
    from .watch import ScanReport, Watch, WatchedFolder, WatchRemoved, WatchStatus


def _check_readable(store: Store) -> None:
    """A store opened read-only is used as it is: refused when it needs a migration (which writes)."""
    if not is_current(store.con):
        assert store.read_only is not None
        raise type(store.read_only)(f"{store.read_only} (This version must update the store first, which "
                                    "writes to it.)")


class Engine:
    """An open memory store. Use `Engine.open()`; close it (or use `with`) when done."""

    def __init__(self, store: Store, profile: Profile | None, settings: Settings | SettingsPreview, home: Path, *,
                 actor: str = "sdk", embedder: Embedder | None = None, one_shot: bool = False):
        if embedder is None:
            embedder = make_embedder(settings.embedding_model, lambda: settings.llm)
            embedder.one_shot = one_shot  # a few texts without loading the model's runtime (engine/embeddings.py)
        self.store = store
        self.profile = profile
        self.home = home
        self.actor = actor
        # the key and locks of an engine made by Engine.open (engine/unlock.py, engine/keyops.py)
        self._in_use: InUse | None = None  # the shared hold on the store (engine/locking.py)
        self._data_key: bytes | None = None  # None: a store whose key is its passphrase (made before data keys)
        self.recovery_key: str | None = None  # only right after this process created the store: show it once
        self.notices: list[str] = []  # what the opening repaired or finished, to tell the user once
        self.audit = AuditLog(store, actor)
        self.space = VectorSpace(store, embedder, self.audit, mirror=settings.vector_cache)
        self.changes = ChangeFeed()
        self.outside = OutsideWrites(store, actor)
        self.ctx = Context(store, settings, profile, home, actor, self.space, self.audit, self.changes)
        self.language = LanguageModel(self.ctx)
        self.backfill = Backfill(self.space)
        self.fts = FtsMerger(store)
        self.memories = Memories(self.ctx, self.backfill)
        self.space.late = self.memories  # vectors arriving late are checked for near-duplicates by memories
        self.graph = Graph(self.ctx, self.language)
        self.retrieval = Retriever(self.ctx, self.memories, self.graph)
        # documents, consolidation, answers, transfer, watch, imports: made on first use (the properties below),
        # so that a CLI recall or remember does not import them (docs/performance.md, "A short command")
        self._made: dict[str, Any] = {}
        self._made_lock = threading.RLock()
        self.extraction = FactExtraction(self.ctx, self.language, lambda: self.consolidation)  # its thread: start_background
        self._agents: Agents | None = None
        self._agents_lock = threading.Lock()
        self._settings_stamp = settings_stamp(home)  # settings.json as this engine last read or wrote it
        self._settings_lock = threading.Lock()

    def _part(self, name: str, make: Callable[[], Any]) -> Any:
        part = self._made.get(name)
        if part is None:
            with self._made_lock:
                part = self._made.get(name)
                if part is None:
                    part = self._made[name] = make()
        return part

    @property
    def documents(self) -> Documents:
        from .ingest import Documents

        return self._part("documents", lambda: Documents(self.ctx, self.memories))

    @property
    def consolidation(self) -> Consolidation:
        from .consolidation import Consolidation

        return self._part("consolidation", lambda: Consolidation(self.ctx, self.memories, self.graph, self.language))

    @property
    def answers(self) -> Answers:
        from .ask import Answers

        return self._part("answers", lambda: Answers(self.ctx, self.memories, self.retrieval, self.graph,
                                                     self.language))

    @property
    def transfer(self) -> Transfer:
        from .transfer import Transfer

        return self._part("transfer", lambda: Transfer(self.ctx, self.backfill))

    @property
    def watch(self) -> Watch:
        from .watch import Watch

        return self._part("watch", lambda: Watch(self.ctx, self.documents))

    @property
    def imports(self) -> Imports:
        from .imports import Imports

        return self._part("imports", lambda: Imports(self.ctx, self.memories, self.documents, self.graph))

    # ------------------------------------------------------------------------------------------------
    # opening
    # ------------------------------------------------------------------------------------------------
    @classmethod
    def for_user(cls, db: Database, user_id: int, user_name: str, *, home: Path, settings: Settings,
                 actor: str = "api", embedder: Embedder | None = None) -> Engine:
        """One user's memory on a server's PostgreSQL database (docs/server.md): the same parts on the
        PostgreSQL backend, every statement under row-level security for this user. `home` holds the
        server's settings (the language model); the database holds everything else."""
        from .store.postgres.store import PgStore

        # the seam's Store is typed as the SQLite backend's (engine/store/__init__.py); PgStore has what the
        # parts use of it
        store = cast(Store, PgStore(db, user_id, user_name))
        return cls(store, None, settings, home, actor=actor, embedder=embedder)

    def _file(self) -> OpenStore:
        """This engine as a desktop profile's encrypted file, for the verbs of its key and backups; refused for
        a user of a server (whose keys, backups and disk are the operator's: docs/server.md)."""
        if self.profile is None:
            raise UserError("This memory is on a server: its backups and keys are the server operator's "
                            "(docs/server.md).")
        return cast("OpenStore", self)

    @classmethod
    def open(cls, home: Path | str | None = None, *, actor: str = "sdk", create: bool = True,
             settings: Settings | None = None, embedder: Embedder | None = None,
             passphrase: str | None = None, interactive: bool = True, one_shot: bool = False) -> Engine:
        """Open the profile's store, creating key and store on first use. Never replaces an existing file.

        `passphrase` is used only for stores protected by a passphrase (no keychain); without it the
        passphrase comes from PERSONAL_LLM_PASSPHRASE or (when `interactive`) a terminal prompt. `one_shot`:
        a process that runs one command and exits (the CLI), whose few texts to embed (a query, a memory)
        are encoded without loading the model's ONNX runtime (engine/embeddings.py).
        """
        home = Path(home).expanduser().resolve() if home else home_dir()
        opened = open_store(home, create=create, passphrase=passphrase, interactive=interactive)
        store, profile = opened.store, opened.profile
        try:
            if store.read_only is not None:
                _check_readable(store)
            else:
                migrate(store.con)
                store.optimize()  # planner statistics, where missing or stale
                erasure.prepare(store)
            backup.drop_aside(home, expired_only=True)  # a restore's replaced store is kept for a week only
            partials.clean_after_crash(home)  # what an export killed midway left (engine/partials.py)
            # a one-shot command reads settings.json without building the settings' models where it can: they
            # are built if a part asks for the settings (engine/settings_file.py)
            chosen: Settings | SettingsPreview
            if settings is not None:
                chosen = settings
            elif one_shot:
                chosen = read_settings(home)
            else:
                from .config import load_settings

                chosen = load_settings(home)
            eng = cls(store, profile, chosen, home, actor=actor, embedder=embedder, one_shot=one_shot)
            eng._in_use, eng._data_key = opened.in_use, opened.data_key
            eng.recovery_key, eng.notices = opened.recovery_key, list(opened.notices)
            if store.read_only is not None:
                eng.notices.append(eng.read_only_note() or "")
            else:
                store.after_write = eng.fts.after_write
                eng.fts.check()  # an index left in many segments (a big import) starts merging now
            if opened.created:
                eng.audit.record("create_store", None, {"key_source": profile.key_source})
            if opened.notices:
                eng.audit.record("key_notice", None, {"notices": len(opened.notices)})
        except BaseException:
            store.close()
            opened.in_use.release()
            raise
        return eng

    @property
    def read_only(self) -> bool:
        """True when the store could only be opened for reading (a full or read-only disk): reads, export and
        backup to another disk work; every change is refused with the reason."""
        return self.store.read_only is not None

    def read_only_note(self) -> str | None:
        """For people: why the store is open read-only and what still works (None when it is not)."""
        reason = self.store.read_only
        if reason is None:
            return None
        why = ("the disk holding it is full" if isinstance(reason, DiskFull)
               else "the disk or folder holding it is read-only")
        return (f"Your memory store is open read-only because {why}: you can recall, read, export and back up "
                "(to another disk); nothing can be changed, and nothing is indexed, until "
                + ("some space is freed." if isinstance(reason, DiskFull) else "it can be written again."))

    @staticmethod
    def explain(e: BaseException) -> EngineError | None:
        """What an error from the store or its disk means for people (read-only, disk full, locked, damaged…;
        db.explain, the one place these are mapped), or None when it is a bug. For the programs' last-resort
        handlers: the engine's own statements already raise the mapped errors."""
        return db.explain(e)

    @staticmethod
    def store_exists(home: Path | str | None = None) -> bool:
        """True when the profile at `home` (default: the user's) holds a store."""
        return ((Path(home).expanduser() if home else home_dir()) / STORE_FILE).exists()

    @staticmethod
    def uses_passphrase(home: Path | str | None = None) -> bool:
        """True when the profile's store is opened with a passphrase (no keychain)."""
        try:
            profile = read_profile(Path(home).expanduser() if home else home_dir())
        except Exception:
            return False
        return profile is not None and profile.key_source == "passphrase"

    def close(self) -> None:
        if "watch" in self._made:
            self.watch.stop()
        if "documents" in self._made:
            self.documents.readers.close()
            self.documents.owner.release()
        if self._agents is not None:
            self._agents.close()
        self.extraction.stop()
        self.space.stop()  # first: a load of the vector mirrors the backfill waits for stops
        self.backfill.stop()
        self.fts.stop()
        self.language.reset()
        self.store.close()
        if self._in_use is not None:
            self._in_use.release()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------------
    # the shared context
    # ------------------------------------------------------------------------------------------------
    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    @property
    def con(self) -> Connection:
        """This thread's connection (for tests and benchmarks; parts reach the store through storage)."""
        return self.store.con

    @property
    def store_path(self) -> Path:
        return Path(self.store.path)

    @property
    def key_source(self) -> str:
        """Where the store's key lives: keychain | passphrase (server: a user's rows on a server's database)."""
        return self.profile.key_source if self.profile is not None else "server"

    @property
    def embedder(self) -> Embedder:
        return self.space.embedder

    def on_change(self, listener: Callable[[Changes], None]) -> None:
        self.changes.subscribe(listener)

    @staticmethod
    def keychain_backend() -> tuple[str, bool]:
        """Where keyring keeps keys, for people, and whether that is a real system keychain."""
        from .keys import keychain_backend

        return keychain_backend()

    def changes_since(self, token: int | None = None, *, everyone: bool = False) -> StoreChanges:
        """What other programs (or `everyone`) wrote to this store after `token` (None: just the current
        token); cheap to poll (engine/feed.py)."""
        return self.outside.since(token, everyone=everyone)

    def connection(self) -> None:
        """Where a server profile's memory is and how it is reached (engine/remote_app.py); None: this profile
        keeps it on this computer."""
        return None

    def unavailable(self) -> dict[str, str]:
        """What this profile does not offer, each with the reason a page shows in its place (a profile on a
        server: engine/remote_app.py); everything is here on this computer."""
        return {}

    def mutation(self) -> Mutation:
        """`with eng.mutation() as (con, touched):` — one transaction; the vector mirror follows it."""
        return self.ctx.mutation()

    def apply_settings(self, settings: Settings) -> Settings:
        """Save what `settings` changed of the settings in use, and use them from now on (update_settings)."""
        from .config import settings_changes

        return self.update_settings(settings_changes(self.ctx.settings, settings))

    def update_settings(self, changes: Mapping[str, Any]) -> Settings:
        """Change these settings (dotted names, as `config.settings_changes` gives them: {"llm.model": …}) in
        settings.json, keeping every other setting as it is in the file now — another program (the CLI, a
        server, the app) may have changed it meanwhile — and use the result from now on. Returns it."""
        changes = dict(changes)
        if "llm.host" in changes:  # a typo is refused here, not met by every answer later
            from .llm import host_problem

            provider = changes.get("llm.provider", self.settings.llm.provider)
            if problem := host_problem(changes["llm.host"], provider):
                raise UserError(problem)
        if "embedding_model" in changes:  # a clear error for a folder that is no model, or a missing extra
            changes["embedding_model"] = resolve_model_choice(changes["embedding_model"])
        with self._settings_lock:
            from .config import update_settings

            saved = update_settings(changes, self.home)
            self._settings_stamp = settings_stamp(self.home)
            self._use_settings(saved)
        return saved.model_copy(deep=True)

    def reload_settings(self) -> Settings | None:
        """Follow settings.json when another program changed it since this engine last read or wrote it: the
        new settings are used from now on and returned; None when nothing changed (one stat)."""
        if settings_stamp(self.home) == self._settings_stamp:
            return None
        with self._settings_lock:
            stamp = settings_stamp(self.home)
            if stamp == self._settings_stamp:
                return None
            from .config import load_settings

            try:
                saved = load_settings(self.home)
            except UserError:  # half-edited by hand: keep what works; the next change is read again
                log.warning("settings.json changed but cannot be read; keeping the settings in use")
                self._settings_stamp = stamp
                return None
            self._settings_stamp = stamp
            self._use_settings(saved)
        return saved.model_copy(deep=True)

    def _use_settings(self, settings: Settings) -> None:
        before = self.ctx.settings
        self.ctx.settings = settings
        if settings.llm != before.llm:
            self.language.reset()  # the next question reconnects
        if settings.embedding_model != before.embedding_model:
            self.switch_embedding_model(settings.embedding_model)

    @staticmethod
    def check_embedding_model(choice: str, settings: Settings) -> None:
        """Load the model an `embedding_model` setting names, as these settings would reach it (an Ollama model:
        Ollama answers and has it); EmbeddingUnavailable says why it cannot."""
        make_embedder(choice, settings.llm).load()

    def switch_embedding_model(self, model: str) -> None:
        """Use another embedding model from now on; when the background runs, it re-embeds every row (recall
        matches words for rows still waiting). The setting itself is saved by apply_settings."""
        running = self.backfill.running
        self.backfill.stop()
        self.space.switch(make_embedder(model, self.ctx.settings.llm))
        if running:
            self.start_background()

    # ------------------------------------------------------------------------------------------------
    # embeddings and background work
    # ------------------------------------------------------------------------------------------------
    def embeddings_available(self) -> bool:
        return self.space.available()

    def embed_pending(self, *, limit: int | None = None, batch_size: int = 64,
                      progress: Callable[[int, int], None] | None = None,
                      cancel: threading.Event | None = None) -> int:
        return self.space.embed_pending(limit=limit, batch_size=batch_size, progress=progress, cancel=cancel)

    def start_background(self) -> None:
        """The work of a process that stays open (the app, `serve`, MCP): the duplicate index held in the
        writer's cache, documents read in helper processes (engine/parse_worker.py), the model loaded, the
        vector mirrors loaded, waiting rows embedded."""
        if self.read_only:  # nothing to embed into, nothing to resume: reads only
            return
        self.memories.keep_index_cached()
        self.documents.readers.use_helpers()  # document readers' libraries stay out of this process
        heap.map_large_blocks()  # an embedding batch's buffers are given back when freed (engine/heap.py)
        self.backfill.start(resume=lambda cancel: self.documents.resume_pending_documents(cancel=cancel))
        self.extraction.start()  # facts from conversations as they are stored (engine/extraction.py)

    def wake_background(self) -> None:
        self.backfill.wake()

    def stop_background(self) -> None:
        self.extraction.stop()
        self.backfill.stop()

    @property
    def paused(self) -> bool:
        """While paused, the background does not embed (the app's "pause indexing")."""
        return self.backfill.paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self.backfill.paused = value
        if not value:
            self.backfill.wake()

    def load_embeddings(self) -> None:
        """Load the embedding model now, on this thread (EmbeddingUnavailable says why it cannot)."""
        self.space.embedder.load()

    def wait_for_embeddings(self, timeout: float | None = None) -> bool:
        """Block until the embedding model is loaded (or failed); True when it is ready."""
        return self.space.embedder.wait_ready(timeout)

    def embedding_failure(self) -> str | None:
        """Why the embedding model cannot be used, if it cannot."""
        failed = self.space.embedder.failed
        return None if failed is None else str(failed)

    def embedding_status(self) -> tuple[str, str]:
        """(ready | loading | failed | off, a sentence for people)."""
        return self.space.status()

    # ------------------------------------------------------------------------------------------------
    # memories
    # ------------------------------------------------------------------------------------------------
    def remember(self, text: str, *, kind: str = "fact", project: str | None = None,
                 importance: float | None = None, at: str | float | datetime | None = None,
                 source: str = "user", meta: dict[str, Any] | None = None, embed: str = "auto",
                 conversation_id: int | None = None, document_id: int | None = None,
                 uid: str | None = None, created: str | float | datetime | None = None) -> RememberResult:
        return self.memories.remember(text, kind=kind, project=project, importance=importance, at=at, source=source,
                                      meta=meta, embed=embed, conversation_id=conversation_id,
                                      document_id=document_id, uid=uid, created=created)

    def remember_many(self, items: Sequence[Remembered], *, embed: str = "auto") -> list[RememberResult]:
        """Store several memories in one transaction, embedded in one batch (the turns of a conversation)."""
        return self.memories.remember_many(list(items), embed=embed)

    def get(self, uid: str) -> Memory:
        return self.memories.get(uid)

    def update(self, uid: str, *, text: str | None = None, kind: str | None = None,
               project: str | None = ..., importance: float | None = None,  # type: ignore[assignment]
               at: str | float | None = ..., archived: bool | None = None,  # type: ignore[assignment]
               embed: str = "auto") -> Memory:
        """Edit a memory (see Memories.update); `project` and `at` left out stay as they are."""
        return self.memories.update(uid, text=text, kind=kind, project=project, importance=importance, at=at,
                                    archived=archived, embed=embed)

    def forget(self, uid: str) -> ForgetResult:
        """Delete a memory or a document and everything derived from it, in one transaction."""
        result = (self.documents.forget(uid) if uid.startswith("doc_") else self.memories.forget_conversation(uid)
                  if uid.startswith("cnv_") else self.memories.forget(uid))
        if self.profile is not None:  # the desktop file: the log's older copies of the changed pages go
            erasure.after_forget(self.store)  # (engine/erasure.py; on a server, docs/server.md says what a forget reaches)
        return result

    def list_memories(self, *, kind: str | None = None, project: str | None = None, archived: bool | None = False,
                      conflicts_only: bool = False, activity: bool | None = False, limit: int = 100,
                      offset: int = 0) -> list[Memory]:
        return self.memories.list_memories(kind=kind, project=project, archived=archived,
                                           conflicts_only=conflicts_only, activity=activity, limit=limit,
                                           offset=offset)

    def memory_page(self, *, kind: str | None = None, project: str | None = None, archived: bool | None = False,
                    conflicts_only: bool = False, activity: bool | None = False, limit: int = 200,
                    after: str | None = None, since: float | None = None, with_total: bool = True) -> MemoryPage:
        """list_memories a page at a time, with the listing's total (unless not `with_total`): hand a page's
        `next` back as `after`; `since` (epoch seconds) keeps the newer ones only."""
        return self.memories.page(kind=kind, project=project, archived=archived, conflicts_only=conflicts_only,
                                  activity=activity, limit=limit, after=after, since=since, with_total=with_total)

    USE_KINDS = Memories.USE_KINDS

    def mark_used(self, uids: Iterable[str], *, how: str = "client") -> int:
        """Count memories as used (see Memories.mark_used: what counts as a use)."""
        return self.memories.mark_used(uids, how=how)

    def projects(self) -> list[str]:
        return self.memories.projects()

    def uids_of(self, table: str, ids: Iterable[int]) -> list[str]:
        return self.memories.uids_of(table, list(ids))

    def recall(self, query: str, *, k: int = 10, project: str | None = None, kind: str | None = None,
               since: str | float | None = None, until: str | float | None = None,
               include_archived: bool = False, include_unscoped: bool = False, include_chunks: bool = True,
               record_access: bool = False, activity: bool | None = None,
               candidates: int | None = None) -> list[Hit]:
        """Hybrid recall (see Retriever.recall and docs/retrieval.md). A recall is not a use."""
        return self.retrieval.recall(query, k=k, project=project, kind=kind, since=since, until=until,
                                     include_archived=include_archived, include_unscoped=include_unscoped,
                                     include_chunks=include_chunks, record_access=record_access,
                                     activity=activity, candidates=candidates)

    def count_matches(self, query: str, *, project: str | None = None, kind: str | None = None,
                      since: str | float | None = None, include_archived: bool = False) -> int:
        """How many memories a search by words matches (recall's filters); recall returns the best k of them."""
        return self.retrieval.count_matches(query, project=project, kind=kind, since=since,
                                            include_archived=include_archived)

    # ------------------------------------------------------------------------------------------------
    # documents
    # ------------------------------------------------------------------------------------------------
    def ingest(self, paths: Sequence[str | Path], *, project: str | None = None,
               progress: Callable[[IngestProgress], None] | None = None,
               cancel: threading.Event | None = None, max_mb: float | None = None,
               allow: Allow | None = None, retry_failed: bool = True) -> list[IngestResult]:
        return self.documents.ingest(paths, project=project, progress=progress, cancel=cancel, max_mb=max_mb,
                                     allow=allow, retry_failed=retry_failed)

    def ingest_text(self, text: str, title: str, *, project: str | None = None) -> IngestResult:
        return self.documents.ingest_text(text, title, project=project)

    def ingest_upload(self, data: bytes, filename: str, *, project: str | None = None) -> IngestResult:
        return self.documents.ingest_upload(data, filename, project=project)

    def resume_pending_documents(self, *, cancel: threading.Event | None = None) -> list[IngestResult]:
        return self.documents.resume_pending_documents(cancel=cancel)

    def list_documents(self, project: str | None = None, *, failed: bool = False) -> list[Document]:
        return self.documents.list_documents(project, failed=failed)

    def get_document(self, uid: str) -> Document:
        return self.documents.get_document(uid)

    def document_passages(self, uid: str, limit: int = 2000) -> list[Passage]:
        return self.documents.passages(uid, limit=limit)

    def get_passage(self, uid: str) -> Passage:
        """A document passage (chk_…) with its document and place in it."""
        return self.documents.passage(uid)

    # ------------------------------------------------------------------------------------------------
    # watched folders (engine/watch.py)
    # ------------------------------------------------------------------------------------------------
    def watch_add(self, path: str | Path, *, project: str | None = None, include: Iterable[str] | None = None,
                  exclude: Iterable[str] | None = None) -> WatchedFolder:
        return self.watch.add(path, project=project, include=include, exclude=exclude)

    def watch_remove(self, path: str | Path, *, forget: bool = False) -> WatchRemoved:
        return self.watch.remove(path, forget=forget)

    def watch_pause(self, path: str | Path, paused: bool = True) -> WatchedFolder:
        return self.watch.set_paused(path, paused)

    def watch_status(self) -> WatchStatus:
        return self.watch.status()

    def watched_paths(self) -> list[str]:
        return self.watch.paths()

    def watch_scan(self, paths: Iterable[str | Path] | None = None,
                   cancel: threading.Event | None = None) -> list[ScanReport]:
        return self.watch.scan(paths, cancel)

    def start_watching(self) -> None:
        """Watch the folders in a background thread while the engine is open (one process per profile)."""
        if not self.read_only:
            self.watch.start()

    def stop_watching(self) -> None:
        self.watch.stop()

    def run_watcher(self, stop: threading.Event, on_report: Callable[[ScanReport], None] | None = None) -> None:
        """Watch the folders on this thread until `stop` is set."""
        self.watch.run(stop, on_report)

    # ------------------------------------------------------------------------------------------------
    # answers and the language model
    # ------------------------------------------------------------------------------------------------
    def ask(self, question: str, *, project: str | None = None, k: int = 8,
            on_token: Callable[[str], None] | None = None, verify: bool = False,
            conversation_id: str | None = None, cancel: threading.Event | None = None) -> AskResult:
        return self.answers.ask(question, project=project, k=k, on_token=on_token, verify=verify,
                                conversation_id=conversation_id, cancel=cancel)

    # ------------------------------------------------------------------------------------------------
    # agents (engine/agent/)
    # ------------------------------------------------------------------------------------------------
    @property
    def agents(self) -> Agents:
        """The agents and their tools (engine/agent/), made on first use."""
        if self._agents is None:
            with self._agents_lock:
                if self._agents is None:
                    from .agent import Agents

                    self._agents = Agents(self.ctx, self.memories, self.documents, self.retrieval, self.graph,
                                          self.language)
        return self._agents

    def agent_run(self, task: str, *, agent: str | None = None, project: str | None = None,
                  on_step: Callable[[AgentStep], None] | None = None,
                  confirm: Callable[[ConfirmRequest], bool] | None = None,
                  cancel: threading.Event | None = None, run_id: str | None = None) -> AgentRun:
        return self.agents.run(task, agent=agent, project=project, on_step=on_step, confirm=confirm, cancel=cancel,
                               run_id=run_id)

    def prepare_agent(self, agent: str | None = None, project: str | None = None) -> str:
        """Raise what `agent_run` would before its first step; the agent's name when it can run."""
        return self.agents.prepare(agent, project)

    def list_agents(self) -> list[AgentInfo]:
        return self.agents.catalogue()

    def agent_info(self, name: str | None = None) -> AgentInfo:
        return self.agents.info(name)

    @property
    def llm(self) -> LLMRouter:
        return self.language.router

    def reset_llm(self) -> None:
        self.language.reset()

    def llm_status(self, *, refresh: bool = False) -> Health:
        return self.language.status(refresh=refresh)

    def check_llm(self, settings: LLMSettings | None = None) -> Health:
        """Ask the server now whether a configuration (default: the saved one) can answer."""
        return self.language.check(settings or self.settings.llm)

    def health(self, *, refresh: bool = False) -> HealthReport:
        """What works and what is missing (embedding model, language model), for people; `refresh` asks the
        language model's server again instead of the cached answer."""
        embedding, detail = self.space.status()
        from .models import HealthReport

        h = self.language.status(refresh=refresh)
        return HealthReport(embedding=embedding, embedding_detail=detail, llm_ok=h.ok, llm_detail=h.detail,
                            llm_models=tuple(h.models))

    # ------------------------------------------------------------------------------------------------
    # the knowledge graph and consolidation
    # ------------------------------------------------------------------------------------------------
    def extract_pending(self, limit: int | None = None, progress: Callable[[int, int], None] | None = None,
                        cancel: threading.Event | None = None) -> ExtractionReport:
        return self.graph.extract_pending(limit, progress, cancel)

    def admission_rejections(self) -> dict[str, int]:
        return self.graph.admission_rejections()

    def neighbours(self, entity: str, hops: int = 1) -> GraphView:
        return self.graph.neighbours(entity, hops)

    def graph_around_memory(self, uid: str, hops: int = 1) -> GraphView:
        """The entities a memory is about (the facts taken from it, the names in it) and their neighbours."""
        return self.graph.around(self.memories.get(uid).text, hops, source=uid)

    def graph_entities(self, limit: int = 30) -> list[tuple[str, str | None, int]]:
        """(name, type, facts) of the best-connected entities."""
        return self.graph.best_connected(limit)

    def graph_context(self, query: str, hops: int = 2, *, project: str | None = None) -> list[str]:
        return self.graph.graph_context(query, hops, project=project)

    def graph_keys(self, query: str, hops: int = 2, *, project: str | None = None) -> list[tuple[str, int]]:
        return self.graph.graph_keys(query, hops, project=project)

    def graph_memory_ids(self, query: str, hops: int = 2, *, project: str | None = None) -> list[int]:
        return self.graph.graph_memory_ids(query, hops, project=project)

    def consolidate(self, now: float | datetime | None = None, progress: Callable[[int, int], None] | None = None,
                    cancel: threading.Event | None = None) -> ConsolidationReport:
        return self.consolidation.consolidate(now, progress, cancel)

    def restore(self, uid: str) -> Memory:
        return self.consolidation.restore(uid)

    def conflicts(self) -> list[ConflictPair]:
        return self.consolidation.conflicts()

    def resolve(self, uid: str, keep: str) -> Resolution:
        return self.consolidation.resolve(uid, keep)

    # ------------------------------------------------------------------------------------------------
    # export and import
    # ------------------------------------------------------------------------------------------------
    def export(self, path: Path | str, *, encrypt_passphrase: str | None = None,
               progress: Progress | None = None) -> ExportResult:
        return self.transfer.export(path, encrypt_passphrase=encrypt_passphrase, progress=progress)

    def export_to(self, write: Callable[[bytes], Any], progress: Progress | None = None) -> dict[str, int]:
        return self.transfer.export_to(write, progress)

    def import_(self, path: Path | str, *, passphrase: str | None = None, embed: bool = True,
                progress: Progress | None = None) -> ImportResult:
        return self.transfer.import_(path, passphrase=passphrase, embed=embed, progress=progress)

    def import_upload(self, data: bytes, filename: str, *, passphrase: str | None = None,
                      embed: bool = True) -> ImportResult:
        return self.transfer.import_upload(data, filename, passphrase=passphrase, embed=embed)

    def import_chatgpt(self, path: Path | str, *, project: str | None = None,
                       progress: Callable[[int, int], None] | None = None,
                       cancel: threading.Event | None = None, embed: bool = True) -> ImportReport:
        return self.imports.import_chats("chatgpt", path, project=project, progress=progress, cancel=cancel,
                                         embed=embed)

    def import_claude(self, path: Path | str, *, project: str | None = None,
                      progress: Callable[[int, int], None] | None = None,
                      cancel: threading.Event | None = None, embed: bool = True) -> ImportReport:
        return self.imports.import_chats("claude", path, project=project, progress=progress, cancel=cancel,
                                         embed=embed)

    def import_chats_upload(self, source: Literal["chatgpt", "claude"], data: bytes, filename: str, *,
                            project: str | None = None) -> ImportReport:
        """Import a ChatGPT or Claude export whose bytes a client sent (its zip or conversations.json)."""
        name = filename.replace("\\", "/").rsplit("/", 1)[-1] or "conversations.json"
        return self.imports.import_chats(source, name, project=project, data=data)

    def import_obsidian(self, vault: Path | str, *, project: str | None = None,
                        progress: Callable[[IngestProgress], None] | None = None,
                        cancel: threading.Event | None = None, allow: Allow | None = None) -> ImportReport:
        return self.imports.import_obsidian(vault, project=project, progress=progress, cancel=cancel, allow=allow)

    # ------------------------------------------------------------------------------------------------
    # stats, audit, diagnostics, secrets kept for interfaces
    # ------------------------------------------------------------------------------------------------
    def stats(self) -> Stats:
        with self.store.read() as con:  # one snapshot, every count from one read of the tallies
            counts = tallies.read(con)
            interrupted = len(self.documents.interrupted()) if counts.tally("d:pending") else 0
            notes = ([n for n in [self.read_only_note()] if n] + self.space.notes() + self.consolidation.notes(counts)
                     + self.documents.notes(counts.tally("d:failed"), interrupted))
            collected = stats.collect(con, counts, where=str(self.store.path), model=self.ctx.settings.embedding_model,
                                      embedding_ready=self.space.embedder.ready, notes=notes)
            return collected.model_copy(update={"documents_interrupted": interrupted})

    # ------------------------------------------------------------------------------------------------
    # keys, erasure and backups (engine/keyops.py, engine/erasure.py, engine/backup.py)
    # ------------------------------------------------------------------------------------------------
    @property
    def has_data_key(self) -> bool:
        """False for a store whose key is its passphrase (made before wrapped data keys)."""
        return self._data_key is not None

    def compact(self) -> dict[str, int]:
        """Rebuild the file without free pages (VACUUM); sizes before and after, in bytes."""
        result = erasure.compact(self._file().store)
        self.audit.record("compact", None, result)
        return result

    def change_passphrase(self, new: str) -> str:
        return keyops.change_passphrase(self._file(), new)

    def rotate_key(self, *, passphrase: str | None = None) -> str | None:
        """Re-encrypt the store with a new data key; a new recovery key when one had to be made."""
        return keyops.rotate(self._file(), passphrase=passphrase)

    def show_recovery_key(self) -> tuple[str, bool]:
        """(the recovery key, whether it was made just now)."""
        return keyops.show_recovery(self._file())

    @property
    def has_passphrase(self) -> bool:
        """True when a passphrase opens this store (its only key, or one more way besides the keychain)."""
        if self.profile is None:
            return False
        return self.profile.key_source == "passphrase" or bool((self.profile.raw.get("wraps") or {}).get("passphrase"))

    def passphrase_opens(self, phrase: str) -> bool:
        """True when `phrase` is this store's passphrase (re-authentication before a secret is shown)."""
        return keyops.passphrase_opens(self._file(), phrase)

    @staticmethod
    def project_problem(name: str) -> str | None:
        """What stops `name` from being stored as a project (too long, control characters), as a sentence;
        None when it can be (an empty name is no project). The check remember and update apply."""
        try:
            check_project(name)
        except UserError as e:
            return str(e)
        return None

    @staticmethod
    def passphrase_problem(phrase: str) -> str:
        """Why `phrase` cannot be a new passphrase (too short), for people; '' when it can."""
        return passphrase_problem(phrase)

    @staticmethod
    def keychain_available() -> bool:
        """True when this computer has a usable keychain (else stores are protected by a passphrase)."""
        return keychain_usable()

    @staticmethod
    def is_encrypted_export(path: Path | str) -> bool:
        """True when the file is an encrypted export (importing it needs its passphrase)."""
        try:
            return is_encrypted(path)
        except OSError:
            return False

    def backup_now(self, progress: Progress | None = None) -> backup.Snapshot:
        return backup.backup_now(self._file(), self.backup_folder(), progress)

    def backup_folder(self) -> Path:
        """Where snapshots go: $PERSONAL_LLM_BACKUP_DIR, else settings.backup.folder, else backups/."""
        return backup.folder(self.home, self.settings.backup.folder)

    def snapshots(self) -> list[backup.Snapshot]:
        """This store's snapshots in the backup folder, newest first."""
        return backup.snapshots(self.backup_folder())

    def backup_status(self, now: float | None = None) -> backup.BackupStatus:
        """The newest snapshot, whether the schedule (settings.backup.schedule) wants one, whether it is old."""
        return backup.status(self.backup_folder(), self.settings.backup.schedule, now)

    @staticmethod
    def unlock_with_recovery(home: Path | str | None, recovery_key: str, *,
                             new_passphrase: str | None = None) -> str:
        """Open the profile's store with its recovery key and make it open normally on this computer."""
        home = Path(home).expanduser().resolve() if home else home_dir()
        return keyops.unlock_with_recovery(home, recovery_key, new_passphrase=new_passphrase)

    @classmethod
    def restore_snapshot(cls, home: Path | str | None, name: str, *,
                         actor: str = "sdk") -> tuple[backup.Snapshot, Path | None, bool]:
        """Put a snapshot in place of the profile's store (kept aside) or into an empty profile. Returns
        (the snapshot, where the replaced store was kept or None, whether this computer opens it)."""
        from .config import load_settings

        home = Path(home).expanduser().resolve() if home else home_dir()
        where = backup.folder(home, load_settings(home).backup.folder)
        if (home / STORE_FILE).exists():
            with cls.open(home, actor=actor, create=False) as eng:
                pragma = eng.store._key_pragma
            snap = backup.find(where, name)
            return snap, backup.restore(home, snap, pragma), True
        snap = backup.find(where, name)
        return snap, None, backup.restore_into_empty(home, snap)

    @staticmethod
    def kept_aside_note(aside: Path) -> str:
        """What to tell the user about the store a restore just put aside (until when it is kept, and why a
        forget deletes it)."""
        return backup.kept_aside_note(aside)[0]

    def audit_log(self, *, limit: int = 200, offset: int = 0) -> list[AuditEntry]:
        return self.audit.entries(limit=limit, offset=offset)

    def audit_runs(self, *, limit: int = 200) -> list[AuditRun]:
        """The log grouped into runs of one kind of write (a batch of 3,000 is one run), newest first."""
        return self.audit.runs(limit=limit)

    def diagnostics(self) -> StoreDiagnostics:
        """How the store is built (SQLCipher, schema, sqlite-vec), for the self-test."""
        return db.diagnose(self.con, expected_schema=SCHEMA_VERSION)

    def api_token(self) -> str:
        """The HTTP API's bearer token: in the keychain beside the key, else inside the encrypted store."""
        tok = keychain_token(self.profile, self.home) if self.profile is not None else None
        if tok is not None:
            return tok
        kept = state.get(self.store.con, "api_token")
        if kept is not None:  # read first: a read-only store can still say it
            return kept
        with self.store.write() as con:
            return state.get_or_set(con, "api_token", lambda: secrets.token_urlsafe(32))
