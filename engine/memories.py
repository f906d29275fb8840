"""Memories: what the user (or a document, a roll-up, an import) states — stored, edited, forgotten.

A memory is one row; its vector, its graph edges, the summaries made from it and the stored answers that
cite it are derived from its words, so editing or forgetting it takes them along in the same transaction.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
import unicodedata
from datetime import datetime
from typing import Any, cast

import numpy as np

from . import ranking, vectors
from .backfill import Backfill
from .context import Changes, Context
from .db import Connection
from .embeddings import EmbeddingUnavailable
from .errors import NotFound, UserError
from .models import KINDS, ForgetResult, Memory, RememberResult, iso
from .space import Touched

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


MEMORY_COLS = (
    "id, uid, kind, text, project, importance, created_at, updated_at, event_at, last_accessed_at, "
    "access_count, archived, source, conflict_with, embedded_hash, content_hash, meta"
)

def memory_from_row(row: tuple) -> Memory:
    return Memory(
        id=row[1], kind=row[2], text=row[3], project=row[4], importance=round(row[5], 4),
        created_at=iso(row[6]), updated_at=iso(row[7]), at=iso(row[8]), last_accessed_at=iso(row[9]),
        access_count=row[10], archived=bool(row[11]), source=row[12], conflict_with=row[13],
        embedded=row[14] is not None and row[14] == row[15], meta=json.loads(row[16] or "{}"),
    )



def check_text(text: str) -> str:
    text = (text or "").strip()
    if not text:
        raise UserError("There is nothing to remember: the text is empty.")
    if len(text) > MAX_TEXT_CHARS:
        raise UserError(
            f"That text is {len(text):,} characters; a memory holds at most {MAX_TEXT_CHARS:,}. "
            "Save long text as a document instead (ingest)."
        )
    return text

def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise UserError(f"Unknown kind '{kind}'; use one of: {', '.join(KINDS)}.")
    return kind



class Memories:
    """Remember, read, edit and forget memories (`engine.memories`)."""

    def __init__(self, ctx: Context, backfill: Backfill):
        self.ctx = ctx
        self.space = ctx.space
        self.backfill = backfill

    def row_by_uid(self, con: Connection, uid: str) -> tuple:
        row = con.execute(f"SELECT {MEMORY_COLS} FROM memories WHERE uid = ?", (uid,)).fetchone()
        if row is None:
            raise NotFound(f"No memory with id {uid}.")
        return row

    def remember(self, text: str, *, kind: str = "fact", project: str | None = None,
                 importance: float | None = None, at: str | float | datetime | None = None,
                 source: str = "user", meta: dict[str, Any] | None = None, embed: str = "auto",
                 conversation_id: int | None = None, document_id: int | None = None) -> RememberResult:
        """Store a memory (durable and searchable by its words at once).

        embed: "sync" embeds now (loading the model if needed), "auto" embeds now only if the model is
        already loaded, "background" leaves it to the backfill. A near-duplicate of an existing memory in
        the same project is merged into it instead of stored twice.
        """
        text = check_text(text)
        kind = check_kind(kind)
        project = (project or "").strip() or None
        if importance is not None and not 0.0 <= importance <= 1.0:
            raise UserError("Importance must be between 0 and 1.")
        event_at = parse_time(at)
        chash = content_hash(text)
        now = time.time()
        if importance is None:
            importance = IMPORTANCE_BY_SOURCE.get(source, 0.5) - (EPISODIC_DISCOUNT if kind == "episodic" else 0.0)
        vec = wins = None
        want_vec = embed == "sync" or (embed == "auto" and self.space.embedder.ready)
        if want_vec and self.space.ensure():
            try:
                vec = self.space.embedder.encode_one(text)
                wins = self.space.embedder.encode_windows([text], small=True)[0]
            except EmbeddingUnavailable:
                vec = None
        with self.ctx.mutation() as (con, touched):
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
                    self.own_summary(con, row[0], source)
                self.ctx.audit.record("merge_duplicate", row[1], {"kind": kind}, con=con)
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
                self.ctx.audit.record("remember", uid, {"kind": kind, "project": bool(project), "source": source}, con=con)
            mem = memory_from_row(self.row_by_uid(con, uid))
        self.ctx.changes.emit(Changes("remember", memories={uid}))
        if vec is None and not merged:
            self.backfill.wake()
        return RememberResult(id=uid, merged=merged, memory=mem)

    def _find_duplicate(self, con: Connection, text: str, chash: str, kind: str, project: str | None,
                        event_at: float | None, vec: np.ndarray | None) -> tuple | None:
        proj_sql = "project IS ?"
        row = con.execute(
            f"SELECT {MEMORY_COLS} FROM memories WHERE content_hash = ? AND kind = ? AND {proj_sql} "
            "AND archived = 0 ORDER BY id LIMIT 1",
            (chash, kind, project),
        ).fetchone()
        if row is not None and (kind != "episodic" or row[8] == event_at):
            return row
        if vec is None or kind == "episodic":  # separate events are separate memories
            return None
        idx = self.space.index.get("memories")
        if idx is None:
            return None
        hits = idx.search(con, vec, 1, vectors.Filter(projects={project}, kinds={kind}), windows=False)
        if hits and hits[0][1] >= NEAR_DUPLICATE_COSINE:
            return con.execute(f"SELECT {MEMORY_COLS} FROM memories WHERE id = ?", (hits[0][0],)).fetchone()
        return None

    def get(self, uid: str) -> Memory:
        return memory_from_row(self.row_by_uid(self.ctx.con, uid))

    def update(self, uid: str, *, text: str | None = None, kind: str | None = None,
               project: str | None = ..., importance: float | None = None,  # type: ignore[assignment]
               at: str | float | None = ..., archived: bool | None = None) -> Memory:  # type: ignore[assignment]
        """Edit a memory. New text drops at once what was made from the old words: its vector (the edit
        is re-embedded), its graph edges, summaries made from it, stored answers that cited it, and a
        contradiction flag (the pair is judged again)."""
        gone: list[str] = []  # summaries made from the old words
        answers = 0  # stored answers that quoted them
        with self.ctx.mutation() as (con, touched):
            row = self.row_by_uid(con, uid)
            sets: dict[str, Any] = {}
            if text is not None:
                text = check_text(text)
                if text != row[3]:
                    sets.update(text=text, content_hash=content_hash(text), embedded_hash=None)
            if kind is not None:
                sets["kind"] = check_kind(kind)
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
                return memory_from_row(row)
            sets["updated_at"] = time.time()
            con.execute(
                f"UPDATE memories SET {', '.join(f'{k} = ?' for k in sets)} WHERE id = ?", [*sets.values(), row[0]]
            )
            if "text" in sets:
                if self._has_vec(con):
                    vectors.delete(con, "memories", [row[0]])
                con.execute("DELETE FROM edges WHERE memory_id = ?", (row[0],))  # derived from the old words
                con.execute("UPDATE memories SET extracted = 0, processed = 0 WHERE id = ?", (row[0],))
                self.own_summary(con, row[0], "user")  # the user's words now
                # summaries made from the old words go; their events (this one too) are summarised again
                stale = self.derived_from(con, [row[0]])
                if stale:
                    self.requeue_sources(con, stale)
                    removed = self.delete_memories(con, stale, touched)  # scrubs answers citing them too
                    gone, answers = removed["_uids"], removed["answers"]
                self.drop_orphan_nodes(con)
                answers += self.scrub_transcripts(con, [uid])  # they quote the old words
                # a contradiction was about the old words: both sides are judged again by the next consolidation
                con.execute("UPDATE memories SET conflict_with = NULL WHERE id = ? OR conflict_with = ?", (row[0], uid))
            touched.memories.add(row[0])
            detail: dict[str, Any] = {"fields": sorted(k for k in sets if k != "updated_at")}
            if gone:
                detail["summaries_removed"] = len(gone)
            if answers:
                detail["answers_removed"] = answers
            self.ctx.audit.record("update", uid, detail, con=con)
            mem = memory_from_row(self.row_by_uid(con, uid))
        self.ctx.changes.emit(Changes("update", memories={uid, *gone}, graph="text" in sets))
        if "text" in sets:
            if self.space.embedder.ready:
                self.space.embed_pending()
            else:
                self.backfill.wake()
            mem = self.get(uid)
        return mem

    @staticmethod
    def _has_vec(con: Connection) -> bool:
        return con.execute("SELECT 1 FROM sqlite_master WHERE name = 'vec_memories'").fetchone() is not None

    @staticmethod
    def drop_orphan_nodes(con: Connection) -> int:
        return con.execute(
            "DELETE FROM nodes WHERE id NOT IN (SELECT src FROM edges) AND id NOT IN (SELECT dst FROM edges)"
        ).rowcount

    def forget(self, uid: str) -> ForgetResult:
        """Delete a memory and everything derived from it, in one transaction."""
        with self.ctx.mutation() as (con, touched):
            row = self.row_by_uid(con, uid)
            removed = self.delete_memories(con, [row[0]], touched)
            self.ctx.audit.record("forget", uid, removed, con=con)
        self.ctx.changes.emit(Changes("forget", memories=set(removed.pop("_uids", [uid])), graph=True))
        return ForgetResult(id=uid, type="memory", removed=removed)

    @staticmethod
    def own_summary(con: Connection, rid: int, source: str) -> None:
        """A summary the user edits or states again is theirs: its events' edits and deletes no longer
        take it along."""
        if con.execute("DELETE FROM derivations WHERE derived_id = ?", (rid,)).rowcount:
            con.execute("UPDATE memories SET source = ? WHERE id = ? AND source = 'rollup'", (source, rid))

    @staticmethod
    def derived_from(con: Connection, ids: list[int]) -> list[int]:
        """Facts summarised (even in part) from these memories."""
        return [r[0] for r in con.execute(
            f"SELECT DISTINCT derived_id FROM derivations WHERE source_id IN ({','.join('?' * len(ids))})", ids)]

    @staticmethod
    def requeue_sources(con: Connection, derived: list[int], gone: set[int] | None = None) -> None:
        """The events these summaries were made from (except those in `gone`) wait for the next roll-up."""
        keep = sorted(gone or ())
        con.execute(f"UPDATE memories SET processed = 0 WHERE id IN (SELECT source_id FROM derivations "
                    f"WHERE derived_id IN ({','.join('?' * len(derived))})) AND id NOT IN ({','.join('?' * len(keep))})",
                    [*derived, *keep])

    def delete_memories(self, con: Connection, ids: list[int], touched: Touched) -> dict[str, Any]:
        """Delete memories plus every fact summarised from any of them (it may repeat what is deleted);
        those summaries' other events are summarised again without it. Edges go by cascade, then orphan
        nodes. A summary the user forgets itself stays gone: its events are not re-queued."""
        seen, todo = set(ids), list(ids)
        derived: set[int] = set()
        while todo:
            new = [d for d in self.derived_from(con, todo) if d not in seen]
            seen.update(new)
            derived.update(new)
            todo = new
        if derived:
            self.requeue_sources(con, sorted(derived), seen)
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
        nodes = self.drop_orphan_nodes(con)
        answers = self.scrub_transcripts(con, uids)
        touched.memories.update(seen)
        return {"memories": len(seen), "derived": len(seen) - len(ids), "edges": edges, "nodes": nodes,
                "answers": answers, "_uids": uids}

    @staticmethod
    def scrub_transcripts(con: Connection, uids: list[str]) -> int:
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

    def list_memories(self, *, kind: str | None = None, project: str | None = None, archived: bool | None = False,
                      conflicts_only: bool = False, limit: int = 100, offset: int = 0) -> list[Memory]:
        where: list[str] = []
        args: list[Any] = []
        if kind:
            where.append("kind = ?")
            args.append(check_kind(kind))
        if project is not None:
            where.append("project IS ?")
            args.append(project or None)
        if archived is not None:
            where.append("archived = ?")
            args.append(int(archived))
        if conflicts_only:
            where.append("conflict_with IS NOT NULL")
        sql = f"SELECT {MEMORY_COLS} FROM memories"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY coalesce(event_at, created_at) DESC, id DESC LIMIT ? OFFSET ?"
        return [memory_from_row(r) for r in self.ctx.con.execute(sql, [*args, limit, offset]).fetchall()]

    def projects(self) -> list[str]:
        rows = self.ctx.con.execute(
            "SELECT project FROM memories WHERE project IS NOT NULL UNION "
            "SELECT project FROM documents WHERE project IS NOT NULL ORDER BY 1"
        ).fetchall()
        return [r[0] for r in rows]

    def record_access(self, uids: list[str]) -> None:
        if not uids:
            return
        now = time.time()
        try:
            with self.ctx.store.write() as con:  # importance grows as ranking.boosted_importance does
                con.executemany(
                    "UPDATE memories SET access_count = access_count + 1, last_accessed_at = ?, "
                    "importance = min(1.0, importance + ? * (1.0 - importance)) WHERE uid = ?",
                    [(now, ranking.ACCESS_BOOST, uid) for uid in uids],
                )
        except UserError:
            log.info("access not recorded: store busy")

    def uids_of(self, table: str, ids: list[int]) -> list[str]:
        if not ids:
            return []
        return [r[0] for r in self.ctx.con.execute(
            f"SELECT uid FROM {table} WHERE id IN ({','.join('?' * len(ids))}) ORDER BY id", ids).fetchall()]
