"""Memories: what the user (or a document, a roll-up, an import) states — stored, edited, forgotten.

A memory is one row; its vector, its graph edges, the summaries made from it and the stored answers that
cite it are derived from its words, so editing or forgetting it takes them along in the same transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from . import ranking
from .backfill import Backfill
from .context import Changes, Context
from .embeddings import EmbeddingUnavailable, Windows
from .errors import StoreUnavailable, UserError
from .memory_rules import (
    AUTO_EMBED_CHARS,
    EPISODIC_DISCOUNT,
    IMPORTANCE_BY_SOURCE,
    NEAR_DUPLICATE_COSINE,
    check_client_uid,
    check_kind,
    check_project,
    check_text,
    content_hash,
    new_uid,
    parse_time,
    says_the_same,
)
from .space import Touched
from .store import Connection, state, tallies, vectors
from .store import conversations as conversation_rows
from .store import memories as rows
from .store.types import ACTIVITY_SOURCE, Filter, MemoryRow, to_memory

if TYPE_CHECKING:  # the boundary models (pydantic) load when one is made: a recall makes none
    from .models import ForgetResult, Memory, MemoryPage, RememberResult

log = logging.getLogger(__name__)

# From this many memories on, a process that stays open keeps the duplicate lookup's index in the writer's
# page cache (Memories.keep_index_cached); a smaller index stays in the caches by itself.
CACHED_INDEX_MIN_MEMORIES = 20_000
# The fields of a memory that the vector mirror keeps beside its vector (engine/store/sqlite/vectors.py _SOURCES): an edit
# of another (importance) leaves the mirror as it is.
MIRRORED_FIELDS = frozenset({"text", "kind", "project", "event_at", "archived"})

@dataclass
class Remembered:
    """One memory to store (`Memories.remember_many`): the arguments of `remember`."""

    text: str
    kind: str = "fact"
    project: str | None = None
    importance: float | None = None
    at: str | float | datetime | None = None
    source: str = "user"
    meta: dict[str, Any] | None = None
    uid: str | None = None  # made by the client (a device's outbox): a repeat of it is the same write
    created: str | float | datetime | None = None  # when it was first stored (on the device it comes from)


@dataclass
class _Prepared:
    text: str
    kind: str
    project: str | None
    importance: float
    event_at: float | None
    chash: str
    now: float
    source: str
    meta: dict[str, Any] | None
    uid: str | None = None


# A client-made id (Remembered.uid) is recorded with the memory it became (itself, or the one it was merged
# into) under this key of the small state: a write sent again (its answer was lost on the way) finds it there
# and is answered as the first time, stored and merged nothing again (docs/server.md).
CLIENT_WRITE_KEY = "client-write:"


class Memories:
    """Remember, read, edit and forget memories (`engine.memories`)."""

    def __init__(self, ctx: Context, backfill: Backfill):
        self.ctx = ctx
        self.space = ctx.space
        self.backfill = backfill

    def keep_index_cached(self) -> None:
        """For a process that stays open: the writer holds the duplicate lookup's index (memories_hash) in
        its page cache. Every remember reads one leaf of it, anywhere in it, and writes one; in a big store
        that leaf had mostly left the machine's caches and came from disk (remember 1.35 ms at 1M memories
        against 0.96 with the index held, the same as at 1k: docs/performance.md). About 8 MB for 500k
        memories, read in ~0.1 s in the background; again after another program's write (which empties the
        writer's cache). Started with the background work (Engine.start_background): a one-command process
        (the CLI) does without."""

        def reads(con: Connection) -> list[tuple[str, tuple]]:
            if sum(t.n for t in tallies.memory_tallies(con)) < CACHED_INDEX_MIN_MEMORIES:
                return []
            return rows.hash_index_reads(con)

        self.ctx.store.keep_cached(reads)

    @staticmethod
    def row_by_uid(con: Connection, uid: str) -> MemoryRow:
        return rows.by_uid(con, uid)

    def remember(self, text: str, *, kind: str = "fact", project: str | None = None,
                 importance: float | None = None, at: str | float | datetime | None = None,
                 source: str = "user", meta: dict[str, Any] | None = None, embed: str = "auto",
                 conversation_id: int | None = None, document_id: int | None = None,
                 uid: str | None = None, created: str | float | datetime | None = None) -> RememberResult:
        """Store a memory (durable and searchable by its words at once).

        embed: "sync" embeds now (loading the model if needed), "auto" embeds now only if the model is
        already loaded and the text is at most AUTO_EMBED_CHARS long, "background" leaves it to the backfill
        (a fact stored without its vector is checked for near-duplicates when the vector arrives). A
        near-duplicate of an existing memory in the same project is merged into it instead of stored twice.
        `uid`: an id the client made (see CLIENT_WRITE_KEY): sent again, it stores nothing again. `created`: when
        it was first stored, on the device it comes from (never later than now).
        """
        return self.remember_many([Remembered(text, kind=kind, project=project, importance=importance, at=at,
                                              source=source, meta=meta, uid=uid, created=created)], embed=embed,
                                  conversation_id=conversation_id, document_id=document_id)[0]

    def remember_many(self, items: list[Remembered], *, embed: str = "auto", conversation_id: int | None = None,
                      document_id: int | None = None) -> list[RememberResult]:
        """Store several memories (the turns of a conversation, a list of notes) as `remember` stores one,
        in one transaction, embedded in one batch before it (outside the write lock). Each is merged into
        a near-duplicate already stored, or stored earlier in the same batch, as `remember` would; nothing
        is stored when one of them is refused (an empty text, an unknown kind)."""
        prepared = [self._prepare(item) for item in items]
        if not prepared:
            return []
        texts = [p.text for p in prepared]
        # "auto": a sentence or a note is embedded at once (its near-duplicate merges at once); a long text is
        # left to the background backfill, which embeds in batches many times faster (and checks it then)
        # a write sent again (its client ids recorded) is answered from that record: nothing to embed for it
        known = {p.uid for p in prepared if p.uid is not None
                 and state.get(self.ctx.con, CLIENT_WRITE_KEY + p.uid) is not None}
        want = [(p.uid is None or p.uid not in known)
                and (embed == "sync" or (embed == "auto" and self.space.embedder.ready and len(t) <= AUTO_EMBED_CHARS))
                for p, t in zip(prepared, texts, strict=True)]
        vecs: list[np.ndarray | None] = [None] * len(texts)
        wins: list[Windows | None] = [None] * len(texts)
        todo = [i for i, w in enumerate(want) if w]
        if todo and self.space.ensure():
            try:
                batch = [texts[i] for i in todo]
                encoded = self.space.embedder.encode(batch)
                windows = self.space.embedder.encode_windows(batch, small=len(batch) == 1)
                for j, i in enumerate(todo):
                    vecs[i], wins[i] = encoded[j], windows[j]
            except EmbeddingUnavailable:
                vecs = [None] * len(texts)

        def store() -> tuple[list[tuple[str, bool]], list[RememberResult]]:
            results: list[tuple[str, bool]] = []
            with self.ctx.mutation() as (con, touched):
                # stored in this batch: (row, vector, kind, project, text)
                fresh: list[tuple[int, np.ndarray, str, str | None, str]] = []
                for p, vec, win in zip(prepared, vecs, wins, strict=True):
                    if p.uid is not None and (done := state.get(con, CLIENT_WRITE_KEY + p.uid)) is not None:
                        rows.by_uid(con, done)  # NotFound when it has been forgotten since: not stored again
                        results.append((done, done != p.uid))
                        continue
                    dup = self._find_duplicate(con, p.text, p.chash, p.kind, p.project, p.event_at, vec)
                    if dup is None and vec is not None and p.kind != "episodic":
                        near = [rid for rid, v, k, proj, text in fresh if k == p.kind and proj == p.project
                                and float(v @ vec) >= NEAR_DUPLICATE_COSINE and says_the_same(p.text, text)]
                        dup = rows.by_id(con, near[0]) if near else None
                    if dup is not None:
                        rows.stated_again(con, dup[0], max(ranking.boosted_importance(dup[5], 0.1), p.importance), p.now)
                        if p.source != "rollup":  # stated on its own now: no longer only a summary of events
                            rows.own_summary(con, dup[0], p.source)
                        self.ctx.audit.record("merge_duplicate", dup[1], {"kind": p.kind}, con=con)
                        results.append((dup[1], True))
                        if p.uid is not None:
                            state.put(con, CLIENT_WRITE_KEY + p.uid, dup[1])
                        continue
                    uid = p.uid or new_uid("mem")
                    rid = rows.insert(con, uid=uid, kind=p.kind, text=p.text, chash=p.chash, importance=p.importance,
                                      now=p.now, event_at=p.event_at, project=p.project, source=p.source, meta=p.meta,
                                      conversation_id=conversation_id, document_id=document_id,
                                      # the app's own events are not summarised or graphed
                                      done=p.source == ACTIVITY_SOURCE,
                                      # checked for near-duplicates when embedded
                                      dedup_pending=vec is None and p.kind != "episodic")
                    if vec is not None:
                        vectors.put(con, "memories", [rid], vec[None, :], [win])
                        rows.mark_embedded(con, "memories", [rid])
                        fresh.append((rid, vec, p.kind, p.project, p.text))
                    touched.memories.add(rid)
                    self.ctx.audit.record("remember", uid, {"kind": p.kind, "project": bool(p.project),
                                                            "source": p.source}, con=con)
                    results.append((uid, False))
                    if p.uid is not None:
                        state.put(con, CLIENT_WRITE_KEY + p.uid, uid)
                from .models import RememberResult

                out = [RememberResult(id=uid, merged=merged, memory=to_memory(rows.by_uid(con, uid)))
                       for uid, merged in results]
            return results, out

        try:
            results, out = store()
        except StoreUnavailable:
            if not any(p.uid for p in prepared):
                raise
            # the same client ids written at once by another request (one whose client gave up waiting for
            # it): its commit made this transaction fail; tried again, it finds them stored
            log.info("a write with client-made ids failed; trying it again once")
            results, out = store()
        self.ctx.changes.emit(Changes("remember", memories={uid for uid, _ in results}))
        if any(v is None and not merged for v, (_, merged) in zip(vecs, results, strict=True)):
            self.backfill.wake()
        return out

    def _prepare(self, item: Remembered) -> _Prepared:
        text = check_text(item.text)
        kind = check_kind(item.kind)
        project = check_project(item.project)
        importance = item.importance
        if importance is not None and not 0.0 <= importance <= 1.0:
            raise UserError("Importance must be between 0 and 1.")
        if importance is None:
            importance = (IMPORTANCE_BY_SOURCE.get(item.source, 0.5)
                          - (EPISODIC_DISCOUNT if kind == "episodic" else 0.0))
        now = time.time()
        created = parse_time(item.created)
        return _Prepared(text=text, kind=kind, project=project, importance=importance, event_at=parse_time(item.at),
                         chash=content_hash(text), now=min(created, now) if created is not None else now, source=item.source, meta=item.meta,
                         uid=check_client_uid(item.uid, "mem"))

    def _find_duplicate(self, con: Connection, text: str, chash: str, kind: str, project: str | None,
                        event_at: float | None, vec: np.ndarray | None, *, exclude: int | None = None) -> tuple | None:
        """The memory this text would duplicate: the same words (an episodic event: at the same time), or
        for facts and how-tos a vector at least NEAR_DUPLICATE_COSINE close, in the same project and kind.
        `exclude`: a row not to match (the late check of a row stored without a vector)."""
        row = rows.same_words(con, chash, kind, project, exclude)
        if row is not None and (kind != "episodic" or row[8] == event_at):
            return row
        if vec is None or kind == "episodic":  # separate events are separate memories
            return None
        idx = self.space.index.get("memories")
        if idx is None:
            return None
        for rid, _cosine in idx.near(con, vec, NEAR_DUPLICATE_COSINE, Filter(projects={project}, kinds={kind})):
            if rid != exclude and (row := rows.by_id(con, rid)) is not None and says_the_same(text, row[3]):
                return row
        return None

    def merge_late_duplicates(self, con: Connection, touched: Touched, ids: list[int],
                              vecs: list[np.ndarray]) -> dict[int, tuple[str, str]]:
        """One rule for every door: a fact or how-to that `remember` stored before its vector existed (a
        quick capture, a remember while the model loaded, embed="background") is checked for near-duplicates
        when its vector arrives, as one embedded at once is checked, and the two become one memory: the
        older stays (as when a fact is stated again) and gains the use. Returns {row id whose vector is not
        to be stored: (its uid, the uid it went into)}. Called by the vector space as it stores vectors."""
        out: dict[int, tuple[str, str]] = {}
        for rid, vec in zip(ids, vecs, strict=True):
            row = rows.take_dedup_pending(con, rid)
            if row is None:
                continue
            dup = self._find_duplicate(con, row[3], row[15], row[2], row[4], row[8], vec, exclude=rid)
            if dup is None:
                continue
            keep, gone = (dup, row) if dup[0] < rid else (row, dup)
            rows.stated_again(con, keep[0], max(ranking.boosted_importance(keep[5], 0.1), gone[5]), time.time())
            if gone[12] != "rollup":
                rows.own_summary(con, keep[0], gone[12])
            self.delete_memories(con, [gone[0]], touched)
            self.ctx.audit.record("merge_duplicate", keep[1], {"kind": row[2], "late": True}, con=con)
            if gone[0] == rid:
                out[rid] = (gone[1], keep[1])
            else:
                touched.memories.add(rid)
        return out

    def announce_merged(self, uids: set[str]) -> None:
        """After the late merges committed: the views learn which memories changed."""
        self.ctx.changes.emit(Changes("merge", memories=uids))

    def get(self, uid: str) -> Memory:
        return to_memory(rows.by_uid(self.ctx.con, uid))

    def update(self, uid: str, *, text: str | None = None, kind: str | None = None,
               project: str | None = ..., importance: float | None = None,  # type: ignore[assignment]
               at: str | float | None = ..., archived: bool | None = None,  # type: ignore[assignment]
               embed: str = "auto") -> Memory:
        """Edit a memory. New text drops at once what was made from the old words: its vector (the edit
        is re-embedded: at once when the model is loaded or `embed` is "sync", which loads it — a CLI
        process ends before a background embedding would), its graph edges, summaries made from it, stored
        answers that cited it, and a contradiction flag (the pair is judged again)."""
        if embed not in ("auto", "sync"):
            raise UserError(f"Unknown embed mode '{embed}'; use auto or sync.")
        gone: list[str] = []  # summaries made from the old words
        answers = 0  # stored answers that quoted them
        with self.ctx.mutation() as (con, touched):
            row = rows.by_uid(con, uid)
            sets: dict[str, Any] = {}
            if text is not None:
                text = check_text(text)
                if text != row[3]:
                    sets.update(text=text, content_hash=content_hash(text), embedded_hash=None)
            if kind is not None:
                sets["kind"] = check_kind(kind)
            if project is not ...:
                sets["project"] = check_project(project)
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
                return to_memory(row)
            if sets.keys() & {"text", "kind", "project", "event_at"}:
                self._refuse_a_copy(con, row, sets)
            sets["updated_at"] = time.time()
            rows.set_fields(con, row[0], sets)
            if "text" in sets:
                if rows.has_vectors(con):
                    vectors.delete(con, "memories", [row[0]])
                ends = rows.edge_nodes(con, [row[0]])
                # edges, marks and contradiction flags were about the old words (the pair is judged again)
                rows.forget_old_words(con, row[0], uid)
                rows.own_summary(con, row[0], "user")  # the user's words now
                # summaries made from the old words go; their events (this one too) are summarised again
                stale = rows.derived_from(con, [row[0]])
                if stale:
                    rows.requeue_sources(con, stale)
                    removed = self.delete_memories(con, stale, touched)  # scrubs answers citing them too
                    gone, answers = removed["_uids"], removed["answers"]
                rows.drop_orphan_nodes(con, ends)
                answers += rows.scrub_transcripts(con, [uid])  # they quote the old words
            if sets.keys() & MIRRORED_FIELDS:  # the vector mirror holds these (not importance)
                touched.memories.add(row[0])
            detail: dict[str, Any] = {"fields": sorted(k for k in sets if k != "updated_at")}
            if gone:
                detail["summaries_removed"] = len(gone)
            if answers:
                detail["answers_removed"] = answers
            self.ctx.audit.record("update", uid, detail, con=con)
            mem = to_memory(rows.by_uid(con, uid))
        self.ctx.changes.emit(Changes("update", memories={uid, *gone}, graph="text" in sets))
        if "text" in sets:
            if "importance" not in sets:  # rewording a memory is using it (an importance set by hand stays)
                self.mark_used([uid], how="edited")
            if self.space.embedder.ready:
                self.space.embed_pending()
            elif embed == "sync":
                self._embed_edit(row[0], sets["text"], sets["content_hash"])
            else:
                self.backfill.wake()
            mem = self.get(uid)
        return mem

    @staticmethod
    def _refuse_a_copy(con: Connection, row: tuple, sets: dict[str, Any]) -> None:
        """An edit may not make a memory say what another one says (remember would have merged them)."""
        kind, project = sets.get("kind", row[2]), sets.get("project", row[4])
        other = rows.same_words(con, sets.get("content_hash", row[15]), kind, project, row[0])
        if other is not None and (kind != "episodic" or other[8] == sets.get("event_at", row[8])):
            raise UserError(f"Memory {other[1]} already says this; forget one of the two instead of making "
                            "them the same.")

    def _embed_edit(self, rid: int, text: str, chash: str) -> None:
        """Embed an edited memory now, loading the model (what waits otherwise stays for the background)."""
        try:
            if self.space.ensure():
                vec = self.space.embedder.encode([text])
                wins = self.space.embedder.encode_windows([text], small=True)
                self.space.store_vectors("memories", [(rid, chash)], vec, wins)
                return
        except EmbeddingUnavailable:
            pass
        self.backfill.wake()

    def forget(self, uid: str) -> ForgetResult:
        """Delete a memory and everything derived from it, in one transaction."""
        with self.ctx.mutation() as (con, touched):
            row = rows.by_uid(con, uid)
            removed = self.delete_memories(con, [row[0]], touched)
            self.ctx.audit.record("forget", uid, removed, con=con)
        self.ctx.changes.emit(Changes("forget", memories=set(removed.pop("_uids", [uid])), graph=True))
        from .models import ForgetResult

        return ForgetResult(id=uid, type="memory", removed=removed)

    def forget_conversation(self, uid: str) -> ForgetResult:
        """Delete a conversation (cnv_…): its transcript, its turns and every fact read from them, in one
        transaction."""
        with self.ctx.mutation() as (con, touched):
            conversation = conversation_rows.row_id(con, uid)
            ids = conversation_rows.memory_ids(con, conversation)
            removed: dict[str, Any] = self.delete_memories(con, ids, touched) if ids else {"memories": 0}
            removed["messages"] = conversation_rows.delete(con, conversation)
            gone: list[str] = removed.pop("_uids", [])
            self.ctx.audit.record("forget_conversation", uid, removed, con=con)
        self.ctx.changes.emit(Changes("forget", memories=set(gone), graph=True))
        from .models import ForgetResult

        return ForgetResult(id=uid, type="conversation", removed=removed)

    def delete_memories(self, con: Connection, ids: list[int], touched: Touched) -> dict[str, Any]:
        """Delete memories plus every fact summarised from any of them (it may repeat what is deleted);
        those summaries' other events are summarised again without it. Edges go by cascade, then orphan
        nodes. A summary the user forgets itself stays gone: its events are not re-queued."""
        seen, todo = set(ids), list(ids)
        derived: set[int] = set()
        while todo:
            new = [d for d in rows.derived_from(con, todo) if d not in seen]
            seen.update(new)
            derived.update(new)
            todo = new
        if derived:
            rows.requeue_sources(con, sorted(derived), seen)
        ends = rows.edge_nodes(con, seen)
        uids, edges = rows.delete(con, seen)
        nodes = rows.drop_orphan_nodes(con, ends)
        answers = rows.scrub_transcripts(con, uids)
        touched.deleted("memories", seen)
        return {"memories": len(seen), "derived": len(seen) - len(ids), "edges": edges, "nodes": nodes,
                "answers": answers, "_uids": uids}

    def list_memories(self, *, kind: str | None = None, project: str | None = None, archived: bool | None = False,
                      conflicts_only: bool = False, activity: bool | None = False, limit: int = 100,
                      offset: int = 0) -> list[Memory]:
        """Memories newest first. The app's own events ("Ingested X") are left out unless activity is True
        (only them) or None (everything)."""
        if limit < 1 or offset < 0:
            raise UserError("A page of memories needs a limit of at least 1 and an offset of 0 or more.")
        return [to_memory(r) for r in rows.listing(
            self.ctx.con, kind=check_kind(kind) if kind else None, project=project, archived=archived,
            conflicts_only=conflicts_only, activity=activity, limit=limit, offset=offset)]

    def page(self, *, kind: str | None = None, project: str | None = None, archived: bool | None = False,
             conflicts_only: bool = False, activity: bool | None = False, limit: int = 200,
             after: str | None = None, since: float | None = None, with_total: bool = True) -> MemoryPage:
        """A page of list_memories and the listing's total; `after` is the `next` of the page before. Each page
        costs the same wherever it is in the listing (no rows are skipped by counting). `since`: only memories
        of that moment (epoch seconds) or later. Without `with_total` the total is not counted (None): a
        page after the first, whose total the caller has."""
        if limit < 1:
            raise UserError("A page of memories needs a limit of at least 1.")
        key: tuple[float, int] | None = None
        if after:
            try:
                when, _, rid = after.partition(":")
                key = (float(when), int(rid))
            except ValueError:
                raise UserError(f"'{after}' is not a place in the list of memories (use a page's next).") from None
        filters: dict[str, Any] = {"kind": check_kind(kind) if kind else None, "project": project,
                                   "archived": archived, "conflicts_only": conflicts_only, "activity": activity,
                                   "since": since}
        with self.ctx.store.read() as con:  # the page and the count from one snapshot
            found = rows.listing(con, **filters, limit=limit + 1, offset=0, after=key)
            total = rows.listing_count(con, **filters) if with_total else None
        more = len(found) > limit
        found = found[:limit]
        last = found[-1] if found and more else None
        nxt = f"{last.event_at if last.event_at is not None else last.created_at!r}:{last.id}" if last else None
        from .models import MemoryPage

        return MemoryPage(memories=[to_memory(r) for r in found], total=total, next=nxt)

    def projects(self) -> list[str]:
        return rows.projects(self.ctx.con)

    # What counts as a use (docs/retrieval.md, "Use means use"): the user opens, edits or copies a memory in
    # the app, an answer cites it ([n] in the answer's text), or a client says so (POST /memory/{id}/used,
    # the MCP tool `mark_used`, `personal-llm used`, recall with record_access). Appearing in a result
    # list, search-as-you-type, an API or MCP recall, and sources retrieved but not cited are not uses.
    USE_KINDS = ("opened", "edited", "copied", "cited", "client", "recall")

    def mark_used(self, uids: Iterable[str], *, how: str = "client") -> int:
        """Count memories as used: access count + 1, last used now (recency), importance a step towards 1
        (ranking.boosted_importance). Unknown ids and document passages are skipped; returns how many
        memories were counted. Never blocks on a busy store (a use is a hint, not data)."""
        if how not in self.USE_KINDS:
            raise UserError(f"Unknown kind of use '{how}'; use one of: {', '.join(self.USE_KINDS)}.")
        ids = list(dict.fromkeys(u for u in uids if u and u.startswith("mem_")))
        if not ids:
            return 0
        try:
            with self.ctx.store.write() as con:  # importance grows as ranking.boosted_importance does
                n = rows.record_use(con, ids, time.time(), ranking.ACCESS_BOOST)
                if n:
                    self.ctx.audit.record("use", ids[0] if len(ids) == 1 else None, {"how": how, "memories": n},
                                          con=con)
        except UserError:
            log.info("use not recorded: store busy")
            return 0
        return n

    def uids_of(self, table: str, ids: list[int]) -> list[str]:
        return rows.uids_of(self.ctx.con, table, ids)
