"""Imports of the user's history from elsewhere (`engine.imports`): ChatGPT and Claude conversations,
Obsidian vaults.

- **Conversations** become what an exchange with `ask` becomes: a conversation row with its messages
  (the transcript, with the original times), and each message an episodic memory (source ``import``,
  its time the message's) tied to the conversation, reading "In “title” you said: …" or "In “title”
  ChatGPT said: …" so that recall finds it with its conversation. A conversation is identified by the
  source and the source's id (``meta.import``), each message by its id, so importing the same export
  again adds nothing and a later export of a continued conversation adds only the new messages. One
  conversation is written in one transaction. The whole export is read and checked before anything is
  written: a malformed one is an error that stores nothing.
- **An Obsidian vault** is ingested as a folder (engine/ingest.py: notes, and the attachments of a
  supported type; ``.obsidian/`` and other hidden entries are skipped), so a note's front matter and
  tags land in its document's meta (engine/parsers.py); then each ``[[wikilink]]`` between two notes (or
  a note and an attachment) becomes a graph edge "links to" between their nodes, derived from the chunk
  holding the link: forgetting the note's document forgets the edge.

Every import is audited (counts, never text). Message text is never logged.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ..context import Changes, Context
from ..embeddings import EmbeddingUnavailable
from ..graph import Graph
from ..ingest import Allow, Documents, IngestProgress
from ..memories import Memories
from ..memory_rules import (
    EPISODIC_DISCOUNT,
    IMPORTANCE_BY_SOURCE,
    MAX_TEXT_CHARS,
    check_project,
    content_hash,
    new_uid,
)
from ..store import conversations as conv_rows
from ..store import documents as doc_rows
from ..store import memories as memory_rows
from . import obsidian
from .chats import ChatConversation, ExportError, load_export, parse_chatgpt, parse_claude

log = logging.getLogger(__name__)

Source = Literal["chatgpt", "claude", "obsidian"]
SPEAKERS = {"chatgpt": "ChatGPT", "claude": "Claude"}
LINK_REL = "links to"


class ImportReport(BaseModel):
    """What an import added. A second import of the same export adds nothing (all counts 0 but skipped)."""

    source: Source
    conversations: int = Field(default=0, description="Conversations added (or continued with new messages)")
    messages: int = Field(default=0, description="Messages added (each one an episodic memory)")
    skipped: int = Field(default=0, description="Conversations already imported, unchanged")
    empty: int = Field(default=0, description="Conversations without a message that has text")
    documents: int = Field(default=0, description="Notes and attachments added or updated")
    unchanged: int = Field(default=0, description="Notes and attachments already stored as they are")
    links: int = Field(default=0, description="Links between notes added to the graph")
    failed: list[str] = Field(default_factory=list, description="Files that could not be read, and why")


class Imports:
    """Import conversation histories and vaults (`engine.imports`)."""

    def __init__(self, ctx: Context, memories: Memories, documents: Documents, graph: Graph):
        self.ctx = ctx
        self.memories = memories
        self.documents = documents
        self.graph = graph

    # --- conversations ------------------------------------------------------------------------------
    def import_chats(self, source: Literal["chatgpt", "claude"], path: str | Path, *, project: str | None = None,
                     progress: Callable[[int, int], None] | None = None,
                     cancel: threading.Event | None = None, embed: bool = True,
                     data: bytes | None = None) -> ImportReport:
        """Import a ChatGPT or Claude export (its zip or its conversations.json). Raises ExportError for a
        file that is not such an export (nothing stored). ``progress(done, total)`` counts conversations;
        ``cancel`` stops between conversations (those done stay; importing again finishes the rest). With
        ``embed`` the new memories are embedded before returning when the model is available (else, and
        without it, by the background backfill). With ``data``, the export's bytes as a client uploaded
        them (``path`` then only names the file; nothing is read from or written to a disk)."""
        path = Path(path) if data is not None else Path(path).expanduser()
        kind = SPEAKERS[source]
        loaded = load_export(path, kind, data)
        parsed = (parse_chatgpt if source == "chatgpt" else parse_claude)(loaded, path.name)
        project = check_project(project)
        report = ImportReport(source=source)
        for n, conv in enumerate(parsed, start=1):
            if cancel is not None and cancel.is_set():
                break
            if not conv.messages:
                report.empty += 1
            else:
                added = self._import_conversation(source, conv, project)
                if added:
                    report.conversations += 1
                    report.messages += added
                else:
                    report.skipped += 1
            if progress is not None:
                progress(n, len(parsed))
        self.ctx.audit.record(f"import_{source}", None, {
            "conversations": report.conversations, "messages": report.messages, "skipped": report.skipped,
            "empty": report.empty, "project": bool(project)})
        if report.messages:
            self.ctx.changes.emit(Changes("import"))
            embedded = 0
            if embed and self.ctx.space.available():
                try:
                    embedded = self.ctx.space.embed_pending(cancel=cancel)
                except EmbeddingUnavailable:
                    log.info("import: embedding deferred to the background")
            if not embedded:
                self.memories.backfill.wake()
        log.info("imported from %s: %d conversations, %d messages (%d unchanged, %d empty)", source,
                 report.conversations, report.messages, report.skipped, report.empty)
        return report

    def _import_conversation(self, source: str, conv: ChatConversation, project: str | None) -> int:
        """Write a conversation's new messages (and their memories) in one transaction; how many."""
        speaker = SPEAKERS[source]
        importance = IMPORTANCE_BY_SOURCE["import"] - EPISODIC_DISCOUNT
        now = time.time()
        with self.ctx.mutation() as (con, touched):
            existing = conv_rows.imported(con, source, conv.id)
            if existing is None:
                uid = f"cnv_{secrets.token_hex(6)}"
                cid = conv_rows.start_imported(con, uid, conv.title, project, conv.created_at, conv.updated_at,
                                               {"import": {"source": source, "id": conv.id}})
                known: set[str] = set()
            else:
                cid, uid = existing
                known = conv_rows.imported_message_ids(con, cid)
            new = [m for m in conv.messages if m.id not in known]
            if not new:
                return 0
            conv_rows.add_imported_messages(con, cid, [(m.role, m.text, m.at, m.id) for m in new], conv.updated_at)
            for m in new:
                who = "you" if m.role == "user" else speaker
                text = f"In “{conv.title}” {who} said: {m.text}"[:MAX_TEXT_CHARS].strip()
                rid = memory_rows.insert(
                    con, uid=new_uid("mem"), kind="episodic", text=text, chash=content_hash(text),
                    importance=importance, now=now, event_at=m.at or None, project=project, source="import",
                    meta={"conversation": uid, "role": m.role, "imported_from": source},
                    conversation_id=cid, document_id=None, done=False, dedup_pending=False)
                touched.memories.add(rid)
            self.ctx.audit.record("import_conversation", uid, {"messages": len(new), "source": source}, con=con)
        return len(new)

    # --- Obsidian -----------------------------------------------------------------------------------
    def import_obsidian(self, vault: str | Path, *, project: str | None = None,
                        progress: Callable[[IngestProgress], None] | None = None,
                        cancel: threading.Event | None = None, allow: Allow | None = None) -> ImportReport:
        """Ingest an Obsidian vault's notes and attachments and turn its wikilinks into graph edges."""
        root = Path(vault).expanduser()
        if not root.is_dir():
            raise ExportError(f"{root.name or root} is not a folder: give the vault's folder (the one holding "
                              "its notes and .obsidian/)")
        root = root.absolute()
        results = self.documents.ingest([root], project=project, progress=progress, cancel=cancel, allow=allow)
        report = ImportReport(source="obsidian")
        by_key: dict[str, tuple[str, str]] = {}  # link key -> (graph name, document uid)
        notes: list[tuple[Path, str]] = []
        for r in results:
            if r.status == "failed" or r.document_id is None or r.path is None:
                report.failed.append(r.error or "failed")
                continue
            report.documents += r.status in ("added", "replaced")
            report.unchanged += r.status == "unchanged"
            path = Path(r.path)
            try:
                keys = obsidian.note_keys(root, path)
            except ValueError:  # reached through a link out of the vault
                keys = [obsidian.note_key(path.name)]
            for key in keys:
                by_key.setdefault(key, (obsidian.note_title(path), r.document_id))
            if path.suffix.lower() in obsidian.NOTE_SUFFIXES:
                notes.append((path, r.document_id))
        if cancel is None or not cancel.is_set():
            report.links = self._link_notes(notes, by_key)
        self.ctx.audit.record("import_obsidian", None, {
            "documents": report.documents, "unchanged": report.unchanged, "links": report.links,
            "failed": len(report.failed), "project": bool(project)})
        if report.links:
            self.ctx.changes.emit(Changes("import", graph=True))
        return report

    def _link_notes(self, notes: list[tuple[Path, str]], by_key: dict[str, tuple[str, str]]) -> int:
        added = 0
        now = time.time()
        for path, uid in notes:
            with self.ctx.mutation() as (con, _touched):
                doc_id = doc_rows.row_id(con, uid)
                if doc_id is None:
                    continue
                chunks = doc_rows.chunk_texts(con, doc_id)
                if not chunks:
                    continue
                source = obsidian.note_title(path)
                for chunk_id, text in chunks:
                    for link in obsidian.links(text):
                        key = obsidian.note_key(link.target) if not Path(link.target).suffix or \
                            Path(link.target).suffix.lower() in obsidian.NOTE_SUFFIXES else link.target.casefold()
                        target = by_key.get(key) or by_key.get(key.rsplit("/", 1)[-1])
                        if target is None or target[1] == uid:
                            continue
                        added += self.graph.link(con, source, LINK_REL, target[0], chunk_id, now, "note")
        return added


__all__ = ["ExportError", "ImportReport", "Imports"]
