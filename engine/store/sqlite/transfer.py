"""Export and import rows: one query per record type for the export, and the merge of a file's records
into this store (inside one transaction)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...errors import UserError
from ...memory_rules import check_text, content_hash, new_uid
from ...records import (
    KNOWN_KEYS,
    ROW_TO_RECORD,
    TIME_EPS,
    AuditRecord,
    ChunkRecord,
    ConversationRecord,
    DerivationRecord,
    DocumentRecord,
    EdgeRecord,
    FactCheckRecord,
    MemoryRecord,
    MessageRecord,
    NodeRecord,
    Record,
    clean_project,
    required_ts,
    to_json,
    to_ts,
)
from ..merging import MergeBase
from ..types import ACTIVITY_SOURCE
from . import memories as memory_rows
from . import vectors as vector_rows
from .db import Connection, marks, padded
from .migrations import SCHEMA_VERSION

EXPORT_SQL: dict[str, str] = {
    "document": "SELECT uid, path, title, mime, content_hash, size, mtime, project, chunk_count, created_at, "
                "updated_at, meta FROM documents WHERE status = 'ready' ORDER BY id",
    "chunk": "SELECT c.uid, d.uid, c.position, c.text, c.locator, c.page, c.heading, c.token_count, c.extracted "
             "FROM chunks c JOIN documents d ON d.id = c.document_id AND d.status = 'ready' ORDER BY c.id",
    "conversation": "SELECT uid, title, project, created_at, updated_at, meta FROM conversations ORDER BY id",
    "message": "SELECT c.uid, m.role, m.content, m.created_at, m.meta FROM messages m "
               "JOIN conversations c ON c.id = m.conversation_id ORDER BY m.id",
    "memory": "SELECT m.uid, m.kind, m.text, m.importance, m.created_at, m.updated_at, m.event_at, "
              "m.last_accessed_at, m.access_count, m.archived, m.archived_at, m.project, m.source, d.uid, c.uid, "
              "m.conflict_with, m.processed, m.extracted, m.meta, m.decayed_at FROM memories m "
              "LEFT JOIN documents d ON d.id = m.document_id AND d.status = 'ready' "
              "LEFT JOIN conversations c ON c.id = m.conversation_id ORDER BY m.id",
    "derivation": "SELECT d.uid, s.uid FROM derivations x JOIN memories d ON d.id = x.derived_id "
                  "JOIN memories s ON s.id = x.source_id ORDER BY x.derived_id, x.source_id",
    "fact_check": "SELECT a.uid, b.uid, f.pair_hash, f.verdict, f.checked_at FROM fact_checks f "
                  "JOIN memories a ON a.id = f.a JOIN memories b ON b.id = f.b ORDER BY f.a, f.b",
    "node": "SELECT name, norm_name, type, aliases, created_at, meta FROM nodes ORDER BY id",
    "edge": "SELECT s.norm_name, e.rel, t.norm_name, e.weight, m.uid, c.uid, e.created_at, e.meta FROM edges e "
            "JOIN nodes s ON s.id = e.src JOIN nodes t ON t.id = e.dst "
            "LEFT JOIN memories m ON m.id = e.memory_id LEFT JOIN chunks c ON c.id = e.chunk_id ORDER BY e.id",
    "audit": "SELECT at, actor, action, target, detail FROM audit ORDER BY id",
}


# ---------------------------------------------------------------------------------------------------
# merging into a store (inside one transaction)
# ---------------------------------------------------------------------------------------------------
def schema_version(con: Connection) -> int:
    """The version of the schema an export's records are read from (its header says it)."""
    return SCHEMA_VERSION


def merger(con: Connection) -> Merger:
    """A new merge of an export's records into the store `con` writes (in its transaction)."""
    return Merger()


class Merger(MergeBase):
    """Adds what is new, maps what is already there; old uids resolve to this store's rows."""

    # ---- documents and chunks ------------------------------------------------------------------------
    def _document(self, con: Connection, r: DocumentRecord) -> bool:
        """True when the document was added (its chunks follow it)."""
        project = clean_project(r.project)
        row = con.execute("SELECT id FROM documents WHERE uid = ?", (r.uid,)).fetchone() or con.execute(
            "SELECT id FROM documents WHERE content_hash = ? AND project IS ? AND status = 'ready' ORDER BY id LIMIT 1",
            (r.content_hash, project)).fetchone()
        if row is not None:
            self.doc_ids[r.uid] = row[0]
            self._count("document", False)
            return False
        cur = con.execute(
            "INSERT INTO documents(uid, path, title, mime, content_hash, size, mtime, project, status, chunk_count, "
            "created_at, updated_at, meta) VALUES (?,?,?,?,?,?,?,?, 'ready', ?,?,?,?)",
            (r.uid, r.path, r.title, r.mime, r.content_hash, r.size, r.mtime, project, r.chunk_count,
             required_ts(r.created_at), required_ts(r.updated_at), to_json(r.meta)))
        self.doc_ids[r.uid] = int(cur.lastrowid or 0)
        self.new_document_uids.append(r.uid)
        self._count("document", True)
        return True

    def _chunk(self, con: Connection, r: ChunkRecord) -> None:
        doc_id = self._known(con, self.doc_ids, "documents", r.document)
        if doc_id is None:
            raise UserError(f"The export is inconsistent: chunk {r.uid} belongs to a document it does not hold.")
        row = con.execute("SELECT id FROM chunks WHERE uid = ? OR (document_id = ? AND position = ?) "
                          "ORDER BY uid = ? DESC LIMIT 1", (r.uid, doc_id, r.position, r.uid)).fetchone()
        if row is not None:  # there already (the document was, or an earlier part of this transfer brought it)
            self.chunk_ids[r.uid] = row[0]
            self._count("chunk", False)
            return
        uid = r.uid
        if con.execute("SELECT 1 FROM chunks WHERE uid = ?", (uid,)).fetchone():
            uid = new_uid("chk")
        cur = con.execute(
            "INSERT INTO chunks(uid, document_id, position, text, content_hash, locator, page, heading, token_count, "
            "extracted) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (uid, doc_id, r.position, r.text, content_hash(r.text), r.locator, r.page, r.heading, r.token_count,
             int(r.extracted)))
        rid = int(cur.lastrowid or 0)
        self.chunk_ids[r.uid] = rid
        self.new_chunk_ids.append(rid)
        self.new_chunks[r.uid] = rid
        self._count("chunk", True)

    def _known(self, con: Connection, known: dict[str, int], table: str, uid: str | None) -> int | None:
        """The row id of `uid` in `table`: mapped by this merge, or already in the store (a transfer in parts)."""
        if not uid:
            return None
        if uid not in known:
            row = con.execute(f"SELECT id FROM {table} WHERE uid = ?", (uid,)).fetchone()
            if row is None:
                return None
            known[uid] = row[0]
        return known[uid]

    # ---- conversations -------------------------------------------------------------------------------
    def _conversation(self, con: Connection, r: ConversationRecord) -> bool:
        row = con.execute("SELECT id FROM conversations WHERE uid = ?", (r.uid,)).fetchone()
        if row is not None:
            self.conv_ids[r.uid] = row[0]
            self._count("conversation", False)
            return False
        cur = con.execute(
            "INSERT INTO conversations(uid, title, project, created_at, updated_at, meta) VALUES (?,?,?,?,?,?)",
            (r.uid, r.title, clean_project(r.project), required_ts(r.created_at), required_ts(r.updated_at), to_json(r.meta)))
        self.conv_ids[r.uid] = int(cur.lastrowid or 0)
        self._count("conversation", True)
        return True

    def _message(self, con: Connection, r: MessageRecord) -> None:
        conv_id = self._known(con, self.conv_ids, "conversations", r.conversation)
        if conv_id is None:
            raise UserError("The export is inconsistent: a message belongs to a conversation it does not hold.")
        at = required_ts(r.created_at)
        if con.execute("SELECT 1 FROM messages WHERE conversation_id = ? AND role = ? AND created_at BETWEEN ? AND ? "
                       "AND content = ?", (conv_id, r.role, at - TIME_EPS, at + TIME_EPS, r.content)).fetchone():
            self._count("message", False)  # the same turn is there (the conversation was, or an earlier part)
            return
        con.execute("INSERT INTO messages(conversation_id, role, content, created_at, meta) VALUES (?,?,?,?,?)",
                    (conv_id, r.role, r.content, at, to_json(r.meta)))
        self._count("message", True)

    # ---- memories ------------------------------------------------------------------------------------
    def _existing_memory(self, con: Connection, r: MemoryRecord, chash: str, project: str | None,
                         event_at: float | None) -> tuple[int, str] | None:
        row = con.execute("SELECT id, uid FROM memories WHERE uid = ?", (r.uid,)).fetchone()
        if row is not None:
            return row[0], row[1]
        sql = f"SELECT id, uid FROM {memory_rows.BY_HASH} AND kind = ? AND project IS ?"
        args: list[Any] = [chash, chash, r.kind, project]
        if r.kind == "episodic":  # separate events with the same words are separate memories
            if event_at is None:
                sql += " AND event_at IS NULL"
            else:
                sql += " AND event_at BETWEEN ? AND ?"
                args += [event_at - TIME_EPS, event_at + TIME_EPS]
        row = con.execute(sql + " ORDER BY id LIMIT 1", args).fetchone()
        return None if row is None else (row[0], row[1])

    def _memory(self, con: Connection, r: MemoryRecord) -> None:
        text = check_text(r.text)
        chash, project, event_at = content_hash(text), clean_project(r.project), to_ts(r.at)
        found = self._existing_memory(con, r, chash, project, event_at)
        if found is not None:
            self.mem_ids[r.uid], self.mem_uids[r.uid] = found
            self._count("memory", False)
            return
        doc_id = self._known(con, self.doc_ids, "documents", r.document)
        conv_id = self._known(con, self.conv_ids, "conversations", r.conversation)
        cur = con.execute(
            "INSERT INTO memories(uid, kind, text, content_hash, importance, created_at, updated_at, event_at, "
            "last_accessed_at, access_count, archived, archived_at, project, source, document_id, conversation_id, "
            "conflict_with, processed, extracted, decayed_at, meta) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (r.uid, r.kind, text, chash, r.importance, required_ts(r.created_at), required_ts(r.updated_at), event_at,
             to_ts(r.last_accessed_at), r.access_count, int(r.archived), to_ts(r.archived_at), project, r.source,
             doc_id, conv_id, None, int(r.processed), int(r.extracted), to_ts(r.decayed_at), to_json(r.meta)))
        rid = int(cur.lastrowid or 0)
        self.mem_ids[r.uid], self.mem_uids[r.uid] = rid, r.uid
        self.new_memory_ids.append(rid)
        self.new_memory_uids.append(r.uid)
        self.new_memories[r.uid] = rid
        self._count("memory", True)

    def _fix_conflicts(self, con: Connection, records: list[MemoryRecord]) -> None:
        """Flags between memories, once both ends are known (the other may be earlier or later in the file)."""
        new = set(self.new_memory_uids)
        for r in records:
            if not r.conflict_with or r.uid not in new:
                continue
            other = self.mem_uids.get(r.conflict_with)
            if other is None and con.execute("SELECT 1 FROM memories WHERE uid = ?", (r.conflict_with,)).fetchone():
                other = r.conflict_with
            if other is not None:
                con.execute("UPDATE memories SET conflict_with = ? WHERE uid = ?", (other, r.uid))

    def _derivation(self, con: Connection, r: DerivationRecord) -> None:
        derived = self._known(con, self.mem_ids, "memories", r.derived)
        source = self._known(con, self.mem_ids, "memories", r.source)
        if derived is None or source is None:
            self._count("derivation", False)
            return
        cur = con.execute("INSERT OR IGNORE INTO derivations(derived_id, source_id) VALUES (?,?)", (derived, source))
        self._count("derivation", cur.rowcount > 0)

    def _fact_check(self, con: Connection, r: FactCheckRecord) -> None:
        a, b = self._known(con, self.mem_ids, "memories", r.a), self._known(con, self.mem_ids, "memories", r.b)
        if a is None or b is None or a == b:
            self._count("fact_check", False)
            return
        a, b = min(a, b), max(a, b)
        cur = con.execute("INSERT OR IGNORE INTO fact_checks(a, b, pair_hash, verdict, checked_at) VALUES (?,?,?,?,?)",
                          (a, b, r.pair_hash, r.verdict, required_ts(r.checked_at)))
        self._count("fact_check", cur.rowcount > 0)

    # ---- graph ---------------------------------------------------------------------------------------
    def _node(self, con: Connection, r: NodeRecord) -> None:
        cur = con.execute(
            "INSERT OR IGNORE INTO nodes(name, norm_name, type, aliases, created_at, meta) VALUES (?,?,?,?,?,?)",
            (r.name, r.norm_name, r.node_type, json.dumps(r.aliases, ensure_ascii=False), required_ts(r.created_at),
             to_json(r.meta)))
        self._count("node", cur.rowcount > 0)
        self.node_ids[r.norm_name] = con.execute("SELECT id FROM nodes WHERE norm_name = ?",
                                                 (r.norm_name,)).fetchone()[0]

    def _node_id(self, con: Connection, norm_name: str) -> int | None:
        if norm_name not in self.node_ids:
            row = con.execute("SELECT id FROM nodes WHERE norm_name = ?", (norm_name,)).fetchone()
            if row is None:
                return None
            self.node_ids[norm_name] = row[0]
        return self.node_ids[norm_name]

    def _edge(self, con: Connection, r: EdgeRecord) -> None:
        src, dst = self._node_id(con, r.src), self._node_id(con, r.dst)
        mem = self._known(con, self.mem_ids, "memories", r.memory)
        chunk = self._known(con, self.chunk_ids, "chunks", r.chunk)
        if src is None or dst is None or (mem is None and chunk is None):  # no provenance, no edge
            self._count("edge", False)
            return
        exists = con.execute("SELECT 1 FROM edges WHERE src = ? AND rel = ? AND dst = ? AND memory_id IS ? "
                             "AND chunk_id IS ?", (src, r.rel, dst, mem, chunk)).fetchone()
        if exists:
            self._count("edge", False)
            return
        con.execute("INSERT INTO edges(src, rel, dst, weight, memory_id, chunk_id, created_at, meta) "
                    "VALUES (?,?,?,?,?,?,?,?)",
                    (src, r.rel, dst, r.weight, mem, chunk, required_ts(r.created_at), to_json(r.meta)))
        self._count("edge", True)

    # ---- audit ---------------------------------------------------------------------------------------
    def _audit(self, con: Connection, r: AuditRecord) -> None:
        at = required_ts(r.at)
        detail = json.dumps(r.detail, sort_keys=True)
        exists = con.execute("SELECT 1 FROM audit WHERE at BETWEEN ? AND ? AND actor = ? AND action = ? "
                             "AND target IS ? AND detail = ?",
                             (at - TIME_EPS, at + TIME_EPS, r.actor, r.action, r.target, detail)).fetchone()
        if exists:
            self._count("audit", False)
            return
        con.execute("INSERT INTO audit(at, actor, action, target, detail) VALUES (?,?,?,?,?)",
                    (at, r.actor, r.action, r.target, detail))
        self._count("audit", True)



def count_records(con: Connection) -> dict[str, int]:
    """How many records of each type an export of this store holds."""
    return {kind: con.execute(f"SELECT count(*) FROM ({sql})").fetchone()[0] for kind, sql in EXPORT_SQL.items()}


def records(con: Connection) -> Iterator[Record]:
    """Every record of an export, in dependency order (read inside one snapshot)."""
    for kind, sql in EXPORT_SQL.items():
        for row in con.execute(sql):
            yield ROW_TO_RECORD[kind](row)


# ---------------------------------------------------------------------------------------------------
# a push: this store's records in groups, with their vectors
# ---------------------------------------------------------------------------------------------------
_OUTGOING_MEMORY = EXPORT_SQL["memory"].replace(" ORDER BY m.id", f" WHERE m.source <> '{ACTIVITY_SOURCE}' ORDER BY m.id")
_DOCUMENTS = EXPORT_SQL["document"].replace("SELECT uid,", "SELECT id, uid,")
_CHUNKS_OF = ("SELECT c.uid, d.uid, c.position, c.text, c.locator, c.page, c.heading, c.token_count, c.extracted "
              "FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.document_id = ? ORDER BY c.position")
_CONVERSATIONS = EXPORT_SQL["conversation"].replace("SELECT uid,", "SELECT id, uid,")
_MESSAGES_OF = ("SELECT c.uid, m.role, m.content, m.created_at, m.meta FROM messages m "
                "JOIN conversations c ON c.id = m.conversation_id WHERE m.conversation_id = ? ORDER BY m.id")
OUTGOING_KINDS = ("document", "chunk", "conversation", "message", "memory", "derivation", "fact_check", "node", "edge")


def count_outgoing(con: Connection) -> dict[str, int]:
    """How many records of each type a push of this store sends."""
    counts = {kind: n for kind, n in count_records(con).items() if kind in OUTGOING_KINDS}
    counts["memory"] = con.execute(f"SELECT count(*) FROM ({_OUTGOING_MEMORY})").fetchone()[0]
    return counts


def outgoing(con: Connection) -> Iterator[list[Record]]:
    """Every record a push sends, in dependency order, in groups that travel together: a document with its
    passages, a conversation with its turns, every other record alone. The app's own activity (memories of
    ACTIVITY_SOURCE) and the audit log stay: where the records go, their writes are audited there."""
    for doc in con.execute(_DOCUMENTS).fetchall():
        yield [ROW_TO_RECORD["document"](doc[1:]),
               *(ROW_TO_RECORD["chunk"](r) for r in con.execute(_CHUNKS_OF, (doc[0],)).fetchall())]
    for conv in con.execute(_CONVERSATIONS).fetchall():
        yield [ROW_TO_RECORD["conversation"](conv[1:]),
               *(ROW_TO_RECORD["message"](r) for r in con.execute(_MESSAGES_OF, (conv[0],)).fetchall())]
    for kind, sql in (("memory", _OUTGOING_MEMORY), ("derivation", EXPORT_SQL["derivation"]),
                      ("fact_check", EXPORT_SQL["fact_check"]), ("node", EXPORT_SQL["node"]),
                      ("edge", EXPORT_SQL["edge"])):
        for row in con.execute(sql):
            yield [ROW_TO_RECORD[kind](row)]


Vectors = dict[str, tuple[np.ndarray, list[tuple[int, int, np.ndarray]]]]


def vectors_of(con: Connection, table: str, uids: list[str]) -> Vectors:
    """The current vectors of these memories or chunks (by uid; those whose vector is of their present text),
    each with its memory's windows as (start, end, vector): uid -> (vector, windows)."""
    if not uids or con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (f"vec_{table}_f32",)).fetchone() is None:
        return {}
    name = "memories" if table == "memories" else "chunks"
    ids: dict[int, str] = {}
    for p in range(0, len(uids), 500):
        part = uids[p : p + 500]
        ids.update((int(r[0]), str(r[1])) for r in con.execute(
            f"SELECT id, uid FROM {name} WHERE uid IN ({marks(part)}) AND embedded_hash = content_hash",
            padded(part)).fetchall())
    found = vector_rows.read_vectors(con, name, list(ids))
    windows: dict[int, list[tuple[int, int, np.ndarray]]] = {}
    if name == "memories" and found and vector_rows.has_windows(con):
        keys = list(found)
        for p in range(0, len(keys), 500):
            rids = keys[p : p + 500]
            for rid, start, end, blob in con.execute(
                    "SELECT w.memory_id, w.start, w.end, v.embedding FROM memory_windows w "
                    f"JOIN vec_memory_windows v ON v.rowid = w.id WHERE w.memory_id IN ({marks(rids)}) "
                    "ORDER BY w.memory_id, w.id", padded(rids)).fetchall():
                windows.setdefault(int(rid), []).append((int(start), int(end), np.frombuffer(blob, dtype=np.float32)))
    return {ids[rid]: (vec, windows.get(rid, [])) for rid, vec in found.items()}


def known(con: Connection, kind: str, keys: list[str]) -> set[str]:
    """Which of these keys (KNOWN_KEYS: a memory's, document's, passage's or conversation's uid, an entity's
    normalised name) this store holds."""
    table = {"memory": "memories", "document": "documents", "chunk": "chunks", "conversation": "conversations",
             "node": "nodes"}[kind]
    column = KNOWN_KEYS[kind]
    found: set[str] = set()
    for p in range(0, len(keys), 500):
        part = keys[p : p + 500]
        found.update(str(r[0]) for r in con.execute(
            f"SELECT {column} FROM {table} WHERE {column} IN ({marks(part)})", padded(part)).fetchall())
    return found


def turns_of(con: Connection, uids: list[str]) -> dict[str, list[tuple[str, str, float]]]:
    """The turns (role, content, time) of these conversations, by uid."""
    out: dict[str, list[tuple[str, str, float]]] = {}
    for p in range(0, len(uids), 500):
        part = uids[p : p + 500]
        for uid, role, content, at in con.execute(
                "SELECT c.uid, m.role, m.content, m.created_at FROM messages m JOIN conversations c ON c.id = m.conversation_id "
                f"WHERE c.uid IN ({marks(part)})", padded(part)).fetchall():
            out.setdefault(str(uid), []).append((str(role), str(content), float(at)))
    return out


def records_page(con: Connection, after: str | None, limit: int) -> tuple[list[Record], str | None]:
    """Up to `limit` records after the cursor `after` ("kind:offset"; None: from the start), in dependency
    order, and the cursor of the next page (None: that was the last). The app's own activity and the audit
    log are not among them."""
    queries = {kind: (_OUTGOING_MEMORY if kind == "memory" else EXPORT_SQL[kind]) for kind in OUTGOING_KINDS}
    kinds = list(queries)
    index, offset = 0, 0
    if after:
        kind, _, raw = after.partition(":")
        if kind not in queries or not raw.isdigit():
            raise UserError(f"{after[:60]!r} is not a page of records: start without `after`, then hand each page's "
                            "`next` back.")
        index, offset = kinds.index(kind), int(raw)
    out: list[Record] = []
    while index < len(kinds) and len(out) < limit:
        kind = kinds[index]
        found = con.execute(f"{queries[kind]} LIMIT ? OFFSET ?", (limit - len(out), offset)).fetchall()
        out += [ROW_TO_RECORD[kind](r) for r in found]
        if len(out) >= limit and found:
            return out, f"{kind}:{offset + len(found)}"
        index, offset = index + 1, 0
    return out, None
