"""The engine's facade: one object per open store. Everything the CLI, API, MCP server and desktop do
goes through here. Synchronous and thread-safe: reads use per-thread connections, writes take turns.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import numpy as np

from . import erasure, ranking, retrieval, vectors
from .ask import AskMixin
from .config import Settings, home_dir, load_settings
from .consolidation import ConsolidationMixin
from .db import Connection, Store
from .embeddings import Embedder, EmbeddingUnavailable, NoEmbedder, Windows
from .errors import NotFound, UserError
from .graph import GraphMixin
from .ingest import IngestMixin
from .keys import Profile, keychain_token
from .locking import InUse
from .migrations import SCHEMA_VERSION, migrate
from .models import KINDS, AuditEntry, ForgetResult, Hit, Memory, RememberResult, Stats, iso
from .transfer import TransferMixin
from .unlock import open_store

log = logging.getLogger(__name__)

# Importance at birth: an explicit statement outranks a document, which outranks incidental chat.
IMPORTANCE_BY_SOURCE = {"user": 0.8, "import": 0.7, "rollup": 0.7, "document": 0.5, "chat": 0.3}
EPISODIC_DISCOUNT = 0.1
NEAR_DUPLICATE_COSINE = 0.95
MAX_TEXT_CHARS = 100_000


def content_hash(text: str) -> str:
    """Hash of the text as a person reads it: case, spacing and trailing punctuation don't matter."""
    norm = " ".join(unicodedata.normalize("NFKC", text).casefold().split()).rstrip(".!?;, ")
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()


def new_uid(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(6)}"


def parse_time(value: str | float | datetime | None) -> float | None:
    """ISO-8601 (date or date-time; naive means local time), a datetime, or epoch seconds."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    try:
        return datetime.fromisoformat(value.strip().replace("Z", "+00:00")).timestamp()
    except ValueError as e:
        raise UserError(f"'{value}' is not a date or time; use ISO format like 2024-05-01 or 2024-05-01T14:30.") from e


@dataclass
class Changes:
    """What a write changed, so each view can decide whether to refresh."""

    action: str
    memories: set[str] = field(default_factory=set)
    documents: set[str] = field(default_factory=set)
    graph: bool = False


@dataclass
class _Touched:
    memories: set[int] = field(default_factory=set)
    chunks: set[int] = field(default_factory=set)


class Engine(IngestMixin, AskMixin, GraphMixin, ConsolidationMixin, TransferMixin):
    """An open memory store. Use `Engine.open()`; close it (or use `with`) when done."""

    def __init__(self, store: Store, profile: Profile, settings: Settings, home: Path, *, actor: str = "sdk",
                 embedder: Embedder | None = None):
        self.store = store
        self.profile = profile
        self._in_use: InUse | None = None  # the shared hold on the store (engine.locking)
        self._data_key: bytes | None = None
        self.recovery_key: str | None = None  # only right after this process created the store: show it once
        self.notices: list[str] = []  # what the opening repaired or finished, to tell the user once
        self.settings = settings
        self.home = home
        self.actor = actor
        if embedder is None:
            embedder = NoEmbedder() if settings.embedding_model == "none" else Embedder(settings.embedding_model)
        self.embedder = embedder
        self._listeners: list[Callable[[Changes], None]] = []
        self._index: dict[str, vectors.VectorIndex] = {}
        self._space_checked = False
        self._space_lock = threading.Lock()
        self._bg_stop = threading.Event()
        self._bg_wake = threading.Event()
        self._bg_thread: threading.Thread | None = None
        self.paused = False
        self._llm = None

    # ------------------------------------------------------------------------------------------------
    # opening
    # ------------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, home: Path | str | None = None, *, actor: str = "sdk", create: bool = True,
             settings: Settings | None = None, embedder: Embedder | None = None,
             passphrase: str | None = None, interactive: bool = True) -> Engine:
        """Open the profile's store, creating key and store on first use. Never replaces an existing file.

        `passphrase` is used only for stores protected by a passphrase (no keychain); without it the
        passphrase comes from PERSONAL_LLM_PASSPHRASE or (when `interactive`) a terminal prompt.
        """
        home = Path(home).expanduser().resolve() if home else home_dir()
        opened = open_store(home, create=create, passphrase=passphrase, interactive=interactive)
        store, profile = opened.store, opened.profile
        try:
            migrate(store.con)
            erasure.prepare(store)
            settings = settings or load_settings(home)
            eng = cls(store, profile, settings, home, actor=actor, embedder=embedder)
            eng._in_use, eng._data_key = opened.in_use, opened.data_key
            eng.recovery_key, eng.notices = opened.recovery_key, list(opened.notices)
            if opened.created:
                eng.audit("create_store", None, {"key_source": profile.key_source})
            if opened.notices:
                eng.audit("key_notice", None, {"notices": len(opened.notices)})
        except BaseException:
            store.close()
            opened.in_use.release()
            raise
        return eng

    def close(self) -> None:
        self.stop_background()
        self.reset_llm()
        self.store.close()
        if self._in_use is not None:
            self._in_use.release()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------------
    # plumbing
    # ------------------------------------------------------------------------------------------------
    @property
    def con(self) -> Connection:
        return self.store.con

    def on_change(self, listener: Callable[[Changes], None]) -> None:
        self._listeners.append(listener)

    def _emit(self, changes: Changes) -> None:
        for listener in list(self._listeners):
            try:
                listener(changes)
            except Exception:
                log.exception("change listener failed")

    def audit(self, action: str, target: str | None, detail: dict[str, Any] | None = None,
              con: Connection | None = None, actor: str | None = None) -> None:
        """Record a write. `detail` holds ids, counts and flags only — never memory text."""
        (con or self.con).execute(
            "INSERT INTO audit(at, actor, action, target, detail) VALUES (?,?,?,?,?)",
            (time.time(), actor or self.actor, action, target, json.dumps(detail or {}, sort_keys=True)),
        )

    class _Mutation:
        def __init__(self, eng: Engine):
            self.eng = eng
            self.touched = _Touched()

        def __enter__(self) -> tuple[Connection, _Touched]:
            self._cm = self.eng.store.write()
            self.con = self._cm.__enter__()
            self.epoch_before = vectors.read_epoch(self.con)
            return self.con, self.touched

        def __exit__(self, et, ev, tb):
            touched = self.touched
            if et is None and (touched.memories or touched.chunks):
                self.epoch_after = vectors.bump_epoch(self.con)
            result = self._cm.__exit__(et, ev, tb)
            if et is None and (touched.memories or touched.chunks):
                for table, ids in (("memories", touched.memories), ("chunks", touched.chunks)):
                    idx = self.eng._index.get(table)
                    if idx is not None:
                        idx.after_write(self.eng.con, self.epoch_before, self.epoch_after, ids if ids else set())
            return result

    def mutation(self) -> Engine._Mutation:
        """`with eng.mutation() as (con, touched):` — one transaction; the vector mirror follows it."""
        return Engine._Mutation(self)

    # ------------------------------------------------------------------------------------------------
    # embedding space
    # ------------------------------------------------------------------------------------------------
    def embeddings_available(self) -> bool:
        return not isinstance(self.embedder, NoEmbedder) and self.embedder.failed is None

    def _ensure_space(self) -> bool:
        """Stamp the embedding space; rebuild the vector tables when it changed. False: lexical only."""
        if self._space_checked:
            return True
        if not self.embeddings_available():
            return False
        with self._space_lock:
            if self._space_checked:
                return True
            try:
                space = self.embedder.space
            except EmbeddingUnavailable:
                return False
            with self.store.write() as con:
                row = con.execute("SELECT provider, model, dimension, version FROM embedding_space").fetchone()
                current = (space.provider, space.model, space.dimension, space.version)
                if row is None or tuple(row) != current:
                    vectors.drop_tables(con)
                    vectors.create_tables(con, space.dimension)
                    con.execute("UPDATE memories SET embedded_hash = NULL")
                    con.execute("UPDATE chunks SET embedded_hash = NULL")
                    con.execute(
                        "INSERT INTO embedding_space(id, provider, model, dimension, version, updated_at) "
                        "VALUES (1,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET provider=excluded.provider, "
                        "model=excluded.model, dimension=excluded.dimension, version=excluded.version, "
                        "updated_at=excluded.updated_at",
                        (*current, time.time()),
                    )
                    vectors.bump_epoch(con)
                    if row is not None:
                        self.audit("embedding_space_changed", None,
                                   {"from": list(row), "to": list(current)}, con=con)
                        log.info("embedding space changed; vectors will be rebuilt from rows")
                else:
                    vectors.create_tables(con, space.dimension)  # idempotent: heals a missing trigger
            self._index = {
                t: vectors.VectorIndex(t, space.dimension, mirror=self.settings.vector_cache)
                for t in ("memories", "chunks")
            }
            self._space_checked = True
            return True

    def embed_pending(self, *, limit: int | None = None, batch_size: int = 64,
                      progress: Callable[[int, int], None] | None = None,
                      cancel: threading.Event | None = None) -> int:
        """Embed rows stored without a current vector (new, edited, or after a space change)."""
        if not self._ensure_space():
            return 0
        con = self.con
        total = con.execute(
            "SELECT (SELECT count(*) FROM memories WHERE embedded_hash IS NULL) + "
            "(SELECT count(*) FROM chunks WHERE embedded_hash IS NULL)"
        ).fetchone()[0]
        if limit is not None:
            total = min(total, limit)
        done = 0
        for table in ("memories", "chunks"):
            while done < total:
                if cancel is not None and cancel.is_set():
                    return done
                extra = "" if table == "memories" else (
                    " AND document_id IN (SELECT id FROM documents WHERE status = 'ready')"
                )
                rows = con.execute(
                    f"SELECT id, text, content_hash FROM {table} WHERE embedded_hash IS NULL{extra} "
                    "ORDER BY id LIMIT ?",
                    (min(batch_size, total - done),),
                ).fetchall()
                if not rows:
                    break
                texts = [r[1] for r in rows]
                vecs = self.embedder.encode(texts, batch_size=batch_size)
                wins = self.embedder.encode_windows(texts, batch_size=batch_size) if table == "memories" else None
                self._store_vectors(table, [(r[0], r[2]) for r in rows], vecs, wins)
                done += len(rows)
                if progress:
                    progress(done, total)
        return done

    def _store_vectors(self, table: str, rows: list[tuple[int, str]], vecs: np.ndarray,
                       windows: list[Windows | None] | None = None) -> None:
        """Write vectors (and a memory's window vectors) for rows whose text is still the text embedded."""
        with self.mutation() as (con, touched):
            keep_ids, keep_vecs, keep_wins = [], [], []
            for n, ((rid, chash), vec) in enumerate(zip(rows, vecs, strict=True)):
                cur = con.execute(f"SELECT content_hash FROM {table} WHERE id = ?", (rid,)).fetchone()
                if cur is None or cur[0] != chash:
                    continue  # deleted or edited meanwhile: the next pass embeds the new text
                keep_ids.append(rid)
                keep_vecs.append(vec)
                keep_wins.append(windows[n] if windows is not None else None)
            if keep_ids:
                vectors.put(con, table, keep_ids, np.asarray(keep_vecs), keep_wins)
                con.executemany(
                    f"UPDATE {table} SET embedded_hash = content_hash WHERE id = ?", [(i,) for i in keep_ids]
                )
                (touched.memories if table == "memories" else touched.chunks).update(keep_ids)

    # ------------------------------------------------------------------------------------------------
    # background work: embedding backfill (and hooks for consolidation)
    # ------------------------------------------------------------------------------------------------
    def start_background(self) -> None:
        """Load the model off-thread and keep embedding rows that wait for a vector."""
        if self._bg_thread is not None or not self.embeddings_available():
            return

        def run() -> None:
            try:
                self.embedder.load()
            except EmbeddingUnavailable:
                return
            try:
                self.resume_pending_documents(cancel=self._bg_stop)  # finish ingests a crash interrupted
            except Exception:
                log.exception("resuming interrupted ingests failed")
            while not self._bg_stop.is_set():
                if not self.paused:
                    try:
                        self.embed_pending(cancel=self._bg_stop)
                    except Exception:
                        log.exception("background embedding failed")
                self._bg_wake.wait(5.0)
                self._bg_wake.clear()

        self._bg_thread = threading.Thread(target=run, name="engine-background", daemon=True)
        self._bg_thread.start()

    def wake_background(self) -> None:
        self._bg_wake.set()

    def stop_background(self) -> None:
        self._bg_stop.set()
        self._bg_wake.set()
        if self._bg_thread is not None:
            # a model still loading cannot be interrupted; the thread is a daemon, so don't wait long
            self._bg_thread.join(timeout=2)
            self._bg_thread = None

    # ------------------------------------------------------------------------------------------------
    # memories
    # ------------------------------------------------------------------------------------------------
    _MEMORY_COLS = (
        "id, uid, kind, text, project, importance, created_at, updated_at, event_at, last_accessed_at, "
        "access_count, archived, source, conflict_with, embedded_hash, content_hash, meta"
    )

    @staticmethod
    def _memory(row: tuple) -> Memory:
        return Memory(
            id=row[1], kind=row[2], text=row[3], project=row[4], importance=round(row[5], 4),
            created_at=iso(row[6]), updated_at=iso(row[7]), at=iso(row[8]), last_accessed_at=iso(row[9]),
            access_count=row[10], archived=bool(row[11]), source=row[12], conflict_with=row[13],
            embedded=row[14] is not None and row[14] == row[15], meta=json.loads(row[16] or "{}"),
        )

    def _row_by_uid(self, con: Connection, uid: str) -> tuple:
        row = con.execute(f"SELECT {self._MEMORY_COLS} FROM memories WHERE uid = ?", (uid,)).fetchone()
        if row is None:
            raise NotFound(f"No memory with id {uid}.")
        return row

    @staticmethod
    def _check_text(text: str) -> str:
        text = (text or "").strip()
        if not text:
            raise UserError("There is nothing to remember: the text is empty.")
        if len(text) > MAX_TEXT_CHARS:
            raise UserError(
                f"That text is {len(text):,} characters; a memory holds at most {MAX_TEXT_CHARS:,}. "
                "Save long text as a document instead (ingest)."
            )
        return text

    @staticmethod
    def _check_kind(kind: str) -> str:
        if kind not in KINDS:
            raise UserError(f"Unknown kind '{kind}'; use one of: {', '.join(KINDS)}.")
        return kind

    def remember(self, text: str, *, kind: str = "fact", project: str | None = None,
                 importance: float | None = None, at: str | float | datetime | None = None,
                 source: str = "user", meta: dict[str, Any] | None = None, embed: str = "auto",
                 conversation_id: int | None = None, document_id: int | None = None) -> RememberResult:
        """Store a memory (durable and searchable by its words at once).

        embed: "sync" embeds now (loading the model if needed), "auto" embeds now only if the model is
        already loaded, "background" leaves it to the backfill. A near-duplicate of an existing memory in
        the same project is merged into it instead of stored twice.
        """
        text = self._check_text(text)
        kind = self._check_kind(kind)
        project = (project or "").strip() or None
        if importance is not None and not 0.0 <= importance <= 1.0:
            raise UserError("Importance must be between 0 and 1.")
        event_at = parse_time(at)
        chash = content_hash(text)
        now = time.time()
        if importance is None:
            importance = IMPORTANCE_BY_SOURCE.get(source, 0.5) - (EPISODIC_DISCOUNT if kind == "episodic" else 0.0)
        vec = wins = None
        want_vec = embed == "sync" or (embed == "auto" and self.embedder.ready)
        if want_vec and self._ensure_space():
            try:
                vec = self.embedder.encode_one(text)
                wins = self.embedder.encode_windows([text], small=True)[0]
            except EmbeddingUnavailable:
                vec = None
        with self.mutation() as (con, touched):
            dup = self._find_duplicate(con, text, chash, kind, project, event_at, vec)
            if dup is not None:
                row = dup
                new_imp = max(ranking.boosted_importance(row[5], 0.1), importance)
                con.execute(
                    "UPDATE memories SET importance = ?, access_count = access_count + 1, last_accessed_at = ?, "
                    "updated_at = ? WHERE id = ?",
                    (new_imp, now, now, row[0]),
                )
                if source != "rollup":  # stated on its own now: no longer only a summary of events
                    self._own_summary(con, row[0], source)
                self.audit("merge_duplicate", row[1], {"kind": kind}, con=con)
                uid, merged = row[1], True
            else:
                uid, merged = new_uid("mem"), False
                cur = con.execute(
                    "INSERT INTO memories(uid, kind, text, content_hash, importance, created_at, updated_at, "
                    "event_at, project, source, meta, conversation_id, document_id) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (uid, kind, text, chash, importance, now, now, event_at, project, source,
                     json.dumps(meta or {}), conversation_id, document_id),
                )
                rid = cast(int, cur.lastrowid)
                if vec is not None:
                    vectors.put(con, "memories", [rid], vec[None, :], [wins])
                    con.execute("UPDATE memories SET embedded_hash = content_hash WHERE id = ?", (rid,))
                touched.memories.add(rid)
                self.audit("remember", uid, {"kind": kind, "project": bool(project), "source": source}, con=con)
            mem = self._memory(self._row_by_uid(con, uid))
        self._emit(Changes("remember", memories={uid}))
        if vec is None and not merged:
            self.wake_background()
        return RememberResult(id=uid, merged=merged, memory=mem)

    def _find_duplicate(self, con: Connection, text: str, chash: str, kind: str, project: str | None,
                        event_at: float | None, vec: np.ndarray | None) -> tuple | None:
        proj_sql = "project IS ?"
        row = con.execute(
            f"SELECT {self._MEMORY_COLS} FROM memories WHERE content_hash = ? AND kind = ? AND {proj_sql} "
            "AND archived = 0 ORDER BY id LIMIT 1",
            (chash, kind, project),
        ).fetchone()
        if row is not None and (kind != "episodic" or row[8] == event_at):
            return row
        if vec is None or kind == "episodic":  # separate events are separate memories
            return None
        idx = self._index.get("memories")
        if idx is None:
            return None
        hits = idx.search(con, vec, 1, vectors.Filter(projects={project}, kinds={kind}), windows=False)
        if hits and hits[0][1] >= NEAR_DUPLICATE_COSINE:
            return con.execute(f"SELECT {self._MEMORY_COLS} FROM memories WHERE id = ?", (hits[0][0],)).fetchone()
        return None

    def get(self, uid: str) -> Memory:
        return self._memory(self._row_by_uid(self.con, uid))

    def update(self, uid: str, *, text: str | None = None, kind: str | None = None,
               project: str | None = ..., importance: float | None = None,  # type: ignore[assignment]
               at: str | float | None = ..., archived: bool | None = None) -> Memory:  # type: ignore[assignment]
        """Edit a memory. New text drops at once what was made from the old words: its vector (the edit
        is re-embedded), its graph edges, summaries made from it, stored answers that cited it, and a
        contradiction flag (the pair is judged again)."""
        gone: list[str] = []  # summaries made from the old words
        answers = 0  # stored answers that quoted them
        with self.mutation() as (con, touched):
            row = self._row_by_uid(con, uid)
            sets: dict[str, Any] = {}
            if text is not None:
                text = self._check_text(text)
                if text != row[3]:
                    sets.update(text=text, content_hash=content_hash(text), embedded_hash=None)
            if kind is not None:
                sets["kind"] = self._check_kind(kind)
            if project is not ...:
                sets["project"] = (project or "").strip() or None
            if importance is not None:
                if not 0.0 <= importance <= 1.0:
                    raise UserError("Importance must be between 0 and 1.")
                sets["importance"] = importance
            if at is not ...:
                sets["event_at"] = parse_time(at)
            if archived is not None:
                sets["archived"] = int(archived)
                sets["archived_at"] = time.time() if archived else None
            if not sets:
                return self._memory(row)
            sets["updated_at"] = time.time()
            con.execute(
                f"UPDATE memories SET {', '.join(f'{k} = ?' for k in sets)} WHERE id = ?", [*sets.values(), row[0]]
            )
            if "text" in sets:
                if self._has_vec(con):
                    vectors.delete(con, "memories", [row[0]])
                con.execute("DELETE FROM edges WHERE memory_id = ?", (row[0],))  # derived from the old words
                con.execute("UPDATE memories SET extracted = 0, processed = 0 WHERE id = ?", (row[0],))
                self._own_summary(con, row[0], "user")  # the user's words now
                # summaries made from the old words go; their events (this one too) are summarised again
                stale = self._derived_from(con, [row[0]])
                if stale:
                    self._requeue_sources(con, stale)
                    removed = self._delete_memories(con, stale, touched)  # scrubs answers citing them too
                    gone, answers = removed["_uids"], removed["answers"]
                self._drop_orphan_nodes(con)
                answers += self._scrub_transcripts(con, [uid])  # they quote the old words
                # a contradiction was about the old words: both sides are judged again by the next consolidation
                con.execute("UPDATE memories SET conflict_with = NULL WHERE id = ? OR conflict_with = ?", (row[0], uid))
            touched.memories.add(row[0])
            detail: dict[str, Any] = {"fields": sorted(k for k in sets if k != "updated_at")}
            if gone:
                detail["summaries_removed"] = len(gone)
            if answers:
                detail["answers_removed"] = answers
            self.audit("update", uid, detail, con=con)
            mem = self._memory(self._row_by_uid(con, uid))
        self._emit(Changes("update", memories={uid, *gone}, graph="text" in sets))
        if "text" in sets:
            if self.embedder.ready:
                self.embed_pending()
            else:
                self.wake_background()
            mem = self.get(uid)
        return mem

    @staticmethod
    def _has_vec(con: Connection) -> bool:
        return con.execute("SELECT 1 FROM sqlite_master WHERE name = 'vec_memories'").fetchone() is not None

    @staticmethod
    def _drop_orphan_nodes(con: Connection) -> int:
        return con.execute(
            "DELETE FROM nodes WHERE id NOT IN (SELECT src FROM edges) AND id NOT IN (SELECT dst FROM edges)"
        ).rowcount

    def forget(self, uid: str) -> ForgetResult:
        """Delete a memory or a document and everything derived from it, in one transaction."""
        if uid.startswith("doc_"):
            return self._forget_document(uid)
        with self.mutation() as (con, touched):
            row = self._row_by_uid(con, uid)
            removed = self._delete_memories(con, [row[0]], touched)
            self.audit("forget", uid, removed, con=con)
        erasure.after_forget(self.store)
        self._emit(Changes("forget", memories=set(removed.pop("_uids", [uid])), graph=True))
        return ForgetResult(id=uid, type="memory", removed=removed)

    def compact(self) -> dict[str, int]:
        """Rebuild the file without free pages (VACUUM); sizes before and after, in bytes."""
        result = erasure.compact(self.store)
        self.audit("compact", None, result)
        return result

    @staticmethod
    def _own_summary(con: Connection, rid: int, source: str) -> None:
        """A summary the user edits or states again is theirs: its events' edits and deletes no longer
        take it along."""
        if con.execute("DELETE FROM derivations WHERE derived_id = ?", (rid,)).rowcount:
            con.execute("UPDATE memories SET source = ? WHERE id = ? AND source = 'rollup'", (source, rid))

    @staticmethod
    def _derived_from(con: Connection, ids: list[int]) -> list[int]:
        """Facts summarised (even in part) from these memories."""
        return [r[0] for r in con.execute(
            f"SELECT DISTINCT derived_id FROM derivations WHERE source_id IN ({','.join('?' * len(ids))})", ids)]

    @staticmethod
    def _requeue_sources(con: Connection, derived: list[int], gone: set[int] | None = None) -> None:
        """The events these summaries were made from (except those in `gone`) wait for the next roll-up."""
        keep = sorted(gone or ())
        con.execute(f"UPDATE memories SET processed = 0 WHERE id IN (SELECT source_id FROM derivations "
                    f"WHERE derived_id IN ({','.join('?' * len(derived))})) AND id NOT IN ({','.join('?' * len(keep))})",
                    [*derived, *keep])

    def _delete_memories(self, con: Connection, ids: list[int], touched: _Touched) -> dict[str, Any]:
        """Delete memories plus every fact summarised from any of them (it may repeat what is deleted);
        those summaries' other events are summarised again without it. Edges go by cascade, then orphan
        nodes. A summary the user forgets itself stays gone: its events are not re-queued."""
        seen, todo = set(ids), list(ids)
        derived: set[int] = set()
        while todo:
            new = [d for d in self._derived_from(con, todo) if d not in seen]
            seen.update(new)
            derived.update(new)
            todo = new
        if derived:
            self._requeue_sources(con, sorted(derived), seen)
        uids = [r[0] for r in con.execute(
            f"SELECT uid FROM memories WHERE id IN ({','.join('?' * len(seen))})", sorted(seen)).fetchall()]
        edges = con.execute(
            f"SELECT count(*) FROM edges WHERE memory_id IN ({','.join('?' * len(seen))})", sorted(seen)
        ).fetchone()[0]
        # conflicts pointing at a deleted memory are no longer conflicts
        con.execute(
            f"UPDATE memories SET conflict_with = NULL WHERE conflict_with IN ({','.join('?' * len(uids))})", uids
        )
        con.execute(f"DELETE FROM memories WHERE id IN ({','.join('?' * len(seen))})", sorted(seen))
        nodes = self._drop_orphan_nodes(con)
        answers = self._scrub_transcripts(con, uids)
        touched.memories.update(seen)
        return {"memories": len(seen), "derived": len(seen) - len(ids), "edges": edges, "nodes": nodes,
                "answers": answers, "_uids": uids}

    @staticmethod
    def _scrub_transcripts(con: Connection, uids: list[str]) -> int:
        """Delete stored answers that cited any of these memories or chunks: they carry its text."""
        doomed: set[int] = set()
        for uid in uids:
            for mid, meta in con.execute(
                "SELECT id, meta FROM messages WHERE role = 'assistant' AND meta LIKE ?", (f'%"{uid}"%',)
            ).fetchall():
                if uid in json.loads(meta or "{}").get("sources", []):
                    doomed.add(mid)
        if doomed:
            con.execute(f"DELETE FROM messages WHERE id IN ({','.join('?' * len(doomed))})", sorted(doomed))
        return len(doomed)

    def _forget_document(self, uid: str) -> ForgetResult:
        with self.mutation() as (con, touched):
            doc = con.execute("SELECT id FROM documents WHERE uid = ?", (uid,)).fetchone()
            if doc is None:
                raise NotFound(f"No document with id {uid}.")
            removed = self.delete_document_rows(con, doc[0], touched)
            self.audit("forget_document", uid, removed, con=con)
        erasure.after_forget(self.store)
        self._emit(Changes("forget", documents={uid}, graph=True))
        return ForgetResult(id=uid, type="document", removed=removed)

    def delete_document_rows(self, con: Connection, doc_id: int, touched: _Touched, *,
                             keep_document: bool = False) -> dict[str, int]:
        """Remove a document's chunks (their vectors, FTS rows and edges by trigger/cascade) and the memories
        derived from it. With keep_document the document row stays (a changed file being replaced)."""
        chunk_rows = con.execute("SELECT id, uid FROM chunks WHERE document_id = ?", (doc_id,)).fetchall()
        chunk_ids = [r[0] for r in chunk_rows]
        edges = con.execute(
            "SELECT count(*) FROM edges WHERE chunk_id IN (SELECT id FROM chunks WHERE document_id = ?)", (doc_id,)
        ).fetchone()[0]
        mem_ids = [r[0] for r in con.execute("SELECT id FROM memories WHERE document_id = ?", (doc_id,)).fetchall()]
        derived = self._delete_memories(con, mem_ids, touched) if mem_ids else {"memories": 0}
        con.execute("DELETE FROM chunks WHERE document_id = ?", (doc_id,))
        answers = self._scrub_transcripts(con, [r[1] for r in chunk_rows])
        if not keep_document:
            con.execute("DELETE FROM documents WHERE id = ?", (doc_id,))
        nodes = self._drop_orphan_nodes(con)
        touched.chunks.update(chunk_ids)
        return {"chunks": len(chunk_ids), "edges": edges, "memories": derived["memories"], "nodes": nodes,
                "answers": answers + derived.get("answers", 0)}

    def list_memories(self, *, kind: str | None = None, project: str | None = None, archived: bool | None = False,
                      conflicts_only: bool = False, limit: int = 100, offset: int = 0) -> list[Memory]:
        where: list[str] = []
        args: list[Any] = []
        if kind:
            where.append("kind = ?")
            args.append(self._check_kind(kind))
        if project is not None:
            where.append("project IS ?")
            args.append(project or None)
        if archived is not None:
            where.append("archived = ?")
            args.append(int(archived))
        if conflicts_only:
            where.append("conflict_with IS NOT NULL")
        sql = f"SELECT {self._MEMORY_COLS} FROM memories"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY coalesce(event_at, created_at) DESC, id DESC LIMIT ? OFFSET ?"
        return [self._memory(r) for r in self.con.execute(sql, [*args, limit, offset]).fetchall()]

    def projects(self) -> list[str]:
        rows = self.con.execute(
            "SELECT project FROM memories WHERE project IS NOT NULL UNION "
            "SELECT project FROM documents WHERE project IS NOT NULL ORDER BY 1"
        ).fetchall()
        return [r[0] for r in rows]

    # ------------------------------------------------------------------------------------------------
    # recall
    # ------------------------------------------------------------------------------------------------
    def recall(self, query: str, *, k: int = 10, project: str | None = None, kind: str | None = None,
               since: str | float | None = None, until: str | float | None = None,
               include_archived: bool = False, include_unscoped: bool = False, include_chunks: bool = True,
               record_access: bool = True, candidates: int | None = None) -> list[Hit]:
        """Hybrid recall: BM25 and exact vector search, combined into a calibrated similarity (with the turns
        around a conversation turn as context), then ranked by the engine's formula. Hits below the minimum
        relevance are dropped: a question about nothing in memory returns nothing. docs/retrieval.md.

        With a project, only that project's memories and documents are searched (plus memories with no
        project when include_unscoped). Works by words alone when the embedding model is unavailable.
        """
        query = (query or "").strip()
        if not query:
            raise UserError("Recall needs a question or some words to look for.")
        if k < 1 or k > 1000:
            raise UserError("k must be between 1 and 1000.")
        if kind is not None and kind not in (*KINDS, "chunk"):
            raise UserError(f"Unknown kind '{kind}'; use one of: {', '.join(KINDS)}, chunk.")
        project = (project or "").strip() or None
        f = vectors.Filter(
            projects=None if project is None else ({project, None} if include_unscoped else {project}),
            kinds=None if kind is None else {kind},
            include_archived=include_archived,
            since=parse_time(since),
            until=parse_time(until),
        )
        from .relevance import MIN_HIT_RELEVANCE

        n = max(candidates or self._CANDIDATES, k)
        qvec = self._query_vector(query)
        con = self.con
        with self.store.read():
            lex = self._merge_lexical(con, query, n, f, memories=kind != "chunk", chunks=include_chunks)
            cos: dict[tuple[str, int], float] = {}
            dense: set[tuple[str, int]] = set()
            if qvec is not None:
                dm = self._index["memories"].search(con, qvec, n, f) if kind != "chunk" else []
                dc = (self._index["chunks"].search(con, qvec, n, f)
                      if include_chunks and (kind is None or kind == "chunk") else [])
                merged = sorted([(s, "m", i) for i, s in dm] + [(s, "c", i) for i, s in dc], key=lambda x: -x[0])
                cos.update({(t, i): s for s, t, i in merged[:n]})
                dense = set(cos)
            graph = self._graph_candidates(con, query, f, project)
            keys = list(dict.fromkeys([*lex, *dense, *graph]))
            # conversation context: turns next to a candidate join it (their own signals are looked up)
            near = retrieval.neighbours(con, [i for t, i in keys if t == "m"], f)
            nb: dict[tuple[str, int], dict[int, tuple[str, int]]] = {}
            for i, d in near.items():
                for off, j in d.items():
                    nb.setdefault(("m", i), {})[off] = ("m", j)
                    nb.setdefault(("m", j), {})[-off] = ("m", i)
            keys.extend(key for key in nb if key not in lex and key not in cos and key not in graph)
            if qvec is not None:
                missing = [key for key in keys if key not in cos]
                cos.update(self._fill_cosine(con, missing, qvec))
            sims = ranking.hybrid_similarity(
                keys, lex, cos, neighbours=nb, graph=graph,
                use_lexical=retrieval.match_expression(query) is not None, use_dense=qvec is not None,
            )
            sims = {key: s for key, s in sims.items() if s >= MIN_HIT_RELEVANCE}
            pool = sorted(sims, key=lambda key: -sims[key])[: max(3 * k, 30)]
            hits = self._hydrate(con, {key: sims[key] for key in pool}, cos, set(lex), dense, set(graph))
            hits.sort(key=lambda h: (-h.score, h.id))
            hits = hits[:k]
            self._name_passages(con, hits, qvec, query)
        if record_access:
            self._record_access([h.id for h in hits if not h.id.startswith("chk_")])
        return hits

    def _merge_lexical(self, con: Connection, query: str, n: int, f: vectors.Filter, *, memories: bool,
                       chunks: bool) -> dict[tuple[str, int], float]:
        """{key: BM25 over the IDF sum of the terms searched in its own table}: memories and chunks on one
        scale. Terms very common in the projects searched, or costly in a large table, are left out
        (retrieval.plan); document frequencies come from a per-process cache, so no per-query work scans a
        common term's whole posting list."""
        cache = self.__dict__.get("_doc_freqs")
        if cache is None:
            cache = self.__dict__.setdefault("_doc_freqs", retrieval.DocFreqs())
        out: dict[tuple[str, int], float] = {}
        for t, fts, wanted, search in (("m", "memories_fts", memories, retrieval.lexical_memories),
                                       ("c", "chunks_fts", chunks, retrieval.lexical_chunks)):
            if not wanted or (t == "c" and f.kinds is not None and "chunk" not in f.kinds):
                continue
            plan = retrieval.plan(con, fts, query, cache, f.projects)
            if plan.terms:
                out.update({(t, i): ranking.lexical_ratio(s, plan.idf_sum) for i, s in search(con, plan.terms, n, f)})
        return out

    # Candidates per list (BM25 memories, BM25 chunks, vectors) before context and ranking.
    _CANDIDATES = 50

    # How many of the knowledge graph's linked memories and chunks join the candidates (nearest first).
    _GRAPH_CANDIDATES = 50

    def _graph_candidates(self, con: Connection, query: str, f: vectors.Filter,
                          project: str | None) -> dict[tuple[str, int], float]:
        """{key: graph strength} for the memories and chunks the knowledge graph links to entities named in
        the query (ranking.graph_strength), filtered like every other candidate. One indexed lookup while
        the graph has no edges."""
        if not con.execute("SELECT EXISTS(SELECT 1 FROM edges)").fetchone()[0]:
            return {}
        try:
            keys = self.graph_keys(query, 2, project=project)
        except Exception:  # the graph is an extra signal: recall works without it
            log.warning("graph lookup failed during recall", exc_info=True)
            return {}
        return ranking.graph_strength(retrieval.passing(con, keys, f)[: self._GRAPH_CANDIDATES])

    def _query_vector(self, query: str) -> np.ndarray | None:
        if not self._ensure_space():
            return None
        try:
            if self.con.execute(
                "SELECT EXISTS(SELECT 1 FROM memories WHERE embedded_hash IS NULL) OR "
                "EXISTS(SELECT 1 FROM chunks WHERE embedded_hash IS NULL)"
            ).fetchone()[0] and self.embedder.ready:
                self.embed_pending(limit=512)
            return self.embedder.encode_one(query)
        except EmbeddingUnavailable:
            return None

    def _hydrate(self, con: Connection, fused: dict[tuple[str, int], float], cos: dict[tuple[str, int], float],
                 lex: set, dense: set, graph: set | frozenset = frozenset()) -> list[Hit]:
        """Hits for these keys; `fused` holds each key's similarity."""
        now = time.time()
        mids = [i for (t, i) in fused if t == "m"]
        cids = [i for (t, i) in fused if t == "c"]
        hits: list[Hit] = []
        if mids:
            rows = con.execute(
                f"SELECT {self._MEMORY_COLS} FROM memories WHERE id IN ({','.join('?' * len(mids))})", mids
            ).fetchall()
            for r in rows:
                key = ("m", r[0])
                t_ref = max(r[8] or r[6], r[9] or 0.0)
                rec = ranking.recency(t_ref, now)
                sim = fused[key]
                hits.append(Hit(
                    id=r[1], kind=r[2], text=r[3], project=r[4], importance=round(r[5], 4), recency=round(rec, 4),
                    similarity=round(sim, 4), cosine=None if key not in cos else round(cos[key], 4),
                    score=round(ranking.final_score(sim, r[5], rec), 6), at=iso(r[8]), created_at=iso(r[6]),
                    archived=bool(r[11]), conflict_with=r[13],
                    via=[v for v, s in (("fts", lex), ("vector", dense), ("graph", graph)) if key in s] or ["context"],
                ))
        if cids:
            rows = con.execute(
                "SELECT c.id, c.uid, c.text, d.project, d.created_at, d.uid, d.title, d.path, c.locator "
                f"FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id IN ({','.join('?' * len(cids))})",
                cids,
            ).fetchall()
            for r in rows:
                key = ("c", r[0])
                rec = ranking.recency(r[4], now)
                sim = fused[key]
                imp = IMPORTANCE_BY_SOURCE["document"]
                hits.append(Hit(
                    id=r[1], kind="chunk", text=r[2], project=r[3], importance=imp, recency=round(rec, 4),
                    similarity=round(sim, 4), cosine=None if key not in cos else round(cos[key], 4),
                    score=round(ranking.final_score(sim, imp, rec), 6), created_at=iso(r[4]),
                    document_id=r[5], document_title=r[6], document_path=r[7], locator=r[8] or None,
                    via=[v for v, s in (("fts", lex), ("vector", dense), ("graph", graph)) if key in s] or ["context"],
                ))
        self._describe_conflicts(con, hits)
        return hits

    def _name_passages(self, con: Connection, hits: list[Hit], qvec: np.ndarray | None, query: str) -> None:
        """A hit on a long memory names the passage that matched: of the window that matched better than its
        whole text, the sentences holding the question's words (or the whole window)."""
        if qvec is None or "memories" not in self._index:
            return
        uids = [h.id for h in hits if h.kind != "chunk"]
        if not uids:
            return
        rids = dict(con.execute(
            f"SELECT m.uid, m.id FROM memories m WHERE m.uid IN ({','.join('?' * len(uids))}) "
            "AND EXISTS (SELECT 1 FROM memory_windows w WHERE w.memory_id = m.id)", uids
        ).fetchall()) if vectors.has_windows(con) else {}
        for h in hits:
            if h.id in rids:
                span = self._index["memories"].best_window(con, rids[h.id], qvec)
                h.passage = retrieval.focus(h.text[span[0] : span[1]], query) if span else None

    def _fill_cosine(self, con: Connection, keys: list[tuple[str, int]], qvec: np.ndarray) -> dict[tuple[str, int], float]:
        """Cosine to the query for candidates the vector search did not return (from the vector mirror)."""
        out: dict[tuple[str, int], float] = {}
        for t, table in (("m", "memories"), ("c", "chunks")):
            ids = [i for tt, i in keys if tt == t]
            if ids and table in self._index:
                out.update({(t, i): v for i, v in self._index[table].cosines(con, ids, qvec).items()})
        return out

    def _describe_conflicts(self, con: Connection, hits: list[Hit]) -> None:
        for h in hits:
            if not h.conflict_with:
                continue
            other = con.execute(
                "SELECT text, coalesce(event_at, created_at) FROM memories WHERE uid = ?", (h.conflict_with,)
            ).fetchone()
            if other is None:
                continue
            mine = (h.at or h.created_at or "")[:10]
            h.conflict = (
                f'You said "{h.text}" on {mine} and "{other[0]}" on {iso(other[1])[:10]}; these disagree.'
            )

    def _record_access(self, uids: list[str]) -> None:
        if not uids:
            return
        now = time.time()
        try:
            with self.store.write() as con:  # importance grows as ranking.boosted_importance does
                con.executemany(
                    "UPDATE memories SET access_count = access_count + 1, last_accessed_at = ?, "
                    "importance = min(1.0, importance + ? * (1.0 - importance)) WHERE uid = ?",
                    [(now, ranking.ACCESS_BOOST, uid) for uid in uids],
                )
        except UserError:
            log.info("access not recorded: store busy")

    # ------------------------------------------------------------------------------------------------
    # stats and audit
    # ------------------------------------------------------------------------------------------------
    def stats(self) -> Stats:
        con = self.con
        by_kind = {k: 0 for k in KINDS}
        for kind, count in con.execute(
            "SELECT kind, count(*) FROM memories WHERE archived = 0 GROUP BY kind ORDER BY kind"
        ).fetchall():
            by_kind[kind] = count
        one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
        space = con.execute("SELECT model, dimension FROM embedding_space").fetchone()
        notes: list[str] = []
        if self.embedder.failed is not None:
            notes.append(str(self.embedder.failed))
        notes += self.graph_notes()
        return Stats(
            store=str(self.store.path),
            schema_version=SCHEMA_VERSION,
            memories=one("SELECT count(*) FROM memories WHERE archived = 0"),
            by_kind=by_kind,
            archived=one("SELECT count(*) FROM memories WHERE archived = 1"),
            conflicts=one("SELECT count(*) FROM memories WHERE conflict_with IS NOT NULL"),
            documents=one("SELECT count(*) FROM documents WHERE status = 'ready'"),
            chunks=one("SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id AND d.status='ready'"),
            nodes=one("SELECT count(*) FROM nodes"),
            edges=one("SELECT count(*) FROM edges"),
            pending_embeddings=one(
                "SELECT (SELECT count(*) FROM memories WHERE embedded_hash IS NULL) + "
                "(SELECT count(*) FROM chunks WHERE embedded_hash IS NULL)"
            ),
            pending_extraction=self._pending_extraction(con),
            pending_rollup=one(
                "SELECT count(*) FROM memories WHERE kind = 'episodic' AND processed = 0 AND archived = 0"
            ),
            embedding_model=space[0] if space else (self.settings.embedding_model),
            embedding_dimension=space[1] if space else None,
            embedding_ready=self.embedder.ready,
            notes=notes,
        )

    def audit_log(self, *, limit: int = 200, offset: int = 0) -> list[AuditEntry]:
        rows = self.con.execute(
            "SELECT id, at, actor, action, target, detail FROM audit ORDER BY id DESC LIMIT ? OFFSET ?",
            (limit, offset),
        ).fetchall()
        return [AuditEntry(id=r[0], at=iso(r[1]), actor=r[2], action=r[3], target=r[4], detail=json.loads(r[5]))
                for r in rows]

    def apply_settings(self, settings: Settings) -> None:
        """Save new settings and use them from now on (the language model is reconnected)."""
        from .config import save_settings

        save_settings(settings, self.home)
        self.settings = settings
        self.reset_llm()

    # ------------------------------------------------------------------------------------------------
    # secrets kept for interfaces
    # ------------------------------------------------------------------------------------------------
    def api_token(self) -> str:
        """The HTTP API's bearer token: in the keychain beside the key, else inside the encrypted store."""
        tok = keychain_token(self.profile)
        if tok is not None:
            return tok
        with self.store.write() as con:
            row = con.execute("SELECT value FROM state WHERE key = 'api_token'").fetchone()
            if row:
                return row[0]
            tok = secrets.token_urlsafe(32)
            con.execute("INSERT INTO state(key, value) VALUES ('api_token', ?)", (tok,))
            return tok

    def uids_of(self, table: str, ids: Iterable[int]) -> list[str]:
        ids = list(ids)
        if not ids:
            return []
        return [r[0] for r in self.con.execute(
            f"SELECT uid FROM {table} WHERE id IN ({','.join('?' * len(ids))}) ORDER BY id", ids).fetchall()]
