"""Export and import rows on PostgreSQL, as engine/store/sqlite/transfer.py: one query per record type for the
export, and the merge of a file's records into the store (inside one transaction), for the user of the
transaction they are given.

Row-level security confines every statement to that user: an export reads only their rows, an import's
lookups (same uid, same content) find only their rows and its inserts take the user from the transaction (the
columns' default), so an import never reads, matches or writes another user's rows. The records are the
SQLite backend's, field for field: booleans and JSON are read back as that backend reads them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from psycopg import Connection

from ...errors import UserError
from ...memory_rules import EPISODIC_DISCOUNT, IMPORTANCE_BY_SOURCE, check_text, content_hash, new_uid
from ...records import (
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
    PlainMemory,
    Record,
    clean_project,
    required_ts,
    to_iso,
    to_json,
    to_ts,
)
from .migrations import SCHEMA_VERSION

EXPORT_SQL: dict[str, str] = {
    "document": "SELECT uid, path, title, mime, content_hash, size, mtime, project, chunk_count, created_at, "
                "updated_at, meta::text FROM documents WHERE status = 'ready' ORDER BY id",
    "chunk": "SELECT c.uid, d.uid, c.position, c.text, c.locator, c.page, c.heading, c.token_count, c.extracted "
             "FROM chunks c JOIN documents d ON d.user_id = c.user_id AND d.id = c.document_id "
             "AND d.status = 'ready' ORDER BY c.id",
    "conversation": "SELECT uid, title, project, created_at, updated_at, meta::text FROM conversations ORDER BY id",
    "message": "SELECT c.uid, m.role, m.content, m.created_at, m.meta::text FROM messages m "
               "JOIN conversations c ON c.user_id = m.user_id AND c.id = m.conversation_id ORDER BY m.id",
    "memory": "SELECT m.uid, m.kind, m.text, m.importance, m.created_at, m.updated_at, m.event_at, "
              "m.last_accessed_at, m.access_count, m.archived, m.archived_at, m.project, m.source, d.uid, c.uid, "
              "m.conflict_with, m.processed, m.extracted, m.meta::text, m.decayed_at FROM memories m "
              "LEFT JOIN documents d ON d.user_id = m.user_id AND d.id = m.document_id AND d.status = 'ready' "
              "LEFT JOIN conversations c ON c.user_id = m.user_id AND c.id = m.conversation_id ORDER BY m.id",
    "derivation": "SELECT d.uid, s.uid FROM derivations x JOIN memories d ON d.user_id = x.user_id "
                  "AND d.id = x.derived_id JOIN memories s ON s.user_id = x.user_id AND s.id = x.source_id "
                  "ORDER BY x.derived_id, x.source_id",
    "fact_check": "SELECT a.uid, b.uid, f.pair_hash, f.verdict, f.checked_at FROM fact_checks f "
                  "JOIN memories a ON a.user_id = f.user_id AND a.id = f.a "
                  "JOIN memories b ON b.user_id = f.user_id AND b.id = f.b ORDER BY f.a, f.b",
    "node": "SELECT name, norm_name, type, aliases::text, created_at, meta::text FROM nodes ORDER BY id",
    "edge": "SELECT s.norm_name, e.rel, t.norm_name, e.weight, m.uid, c.uid, e.created_at, e.meta::text FROM edges e "
            "JOIN nodes s ON s.user_id = e.user_id AND s.id = e.src JOIN nodes t ON t.user_id = e.user_id "
            "AND t.id = e.dst LEFT JOIN memories m ON m.user_id = e.user_id AND m.id = e.memory_id "
            "LEFT JOIN chunks c ON c.user_id = e.user_id AND c.id = e.chunk_id ORDER BY e.id",
    "audit": "SELECT at, actor, action, target, detail::text FROM audit ORDER BY id",
}


def _meta(raw: str | None) -> dict[str, Any]:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {"value": value}


def _aliases(raw: str | None) -> list[str]:
    try:
        value = json.loads(raw or "[]")
    except ValueError:
        return []
    return [str(a) for a in value] if isinstance(value, list) else []


ROW_TO_RECORD: dict[str, Callable[[tuple], Record]] = {
    "document": lambda r: DocumentRecord(
        uid=r[0], path=r[1], title=r[2], mime=r[3], content_hash=r[4], size=r[5], mtime=r[6], project=r[7],
        chunk_count=r[8], created_at=to_iso(r[9]) or "", updated_at=to_iso(r[10]) or "", meta=_meta(r[11])),
    "chunk": lambda r: ChunkRecord(
        uid=r[0], document=r[1], position=r[2], text=r[3], locator=r[4] or "", page=r[5], heading=r[6],
        token_count=r[7], extracted=bool(r[8])),
    "conversation": lambda r: ConversationRecord(
        uid=r[0], title=r[1], project=r[2], created_at=to_iso(r[3]) or "", updated_at=to_iso(r[4]) or "",
        meta=_meta(r[5])),
    "message": lambda r: MessageRecord(
        conversation=r[0], role=r[1], content=r[2], created_at=to_iso(r[3]) or "", meta=_meta(r[4])),
    "memory": lambda r: MemoryRecord(
        uid=r[0], kind=r[1], text=r[2], importance=r[3], created_at=to_iso(r[4]) or "", updated_at=to_iso(r[5]) or "",
        at=to_iso(r[6]), last_accessed_at=to_iso(r[7]), access_count=r[8], archived=bool(r[9]),
        archived_at=to_iso(r[10]), project=r[11], source=r[12], document=r[13], conversation=r[14],
        conflict_with=r[15], processed=bool(r[16]), extracted=bool(r[17]), meta=_meta(r[18]), decayed_at=to_iso(r[19])),
    "derivation": lambda r: DerivationRecord(derived=r[0], source=r[1]),
    "fact_check": lambda r: FactCheckRecord(a=r[0], b=r[1], pair_hash=r[2], verdict=r[3], checked_at=to_iso(r[4]) or ""),
    "node": lambda r: NodeRecord(
        name=r[0], norm_name=r[1], node_type=r[2], aliases=_aliases(r[3]), created_at=to_iso(r[4]) or "",
        meta=_meta(r[5])),
    "edge": lambda r: EdgeRecord(
        src=r[0], rel=r[1], dst=r[2], weight=r[3], memory=r[4], chunk=r[5], created_at=to_iso(r[6]) or "",
        meta=_meta(r[7])),
    "audit": lambda r: AuditRecord(at=to_iso(r[0]) or "", actor=r[1], action=r[2], target=r[3], detail=_meta(r[4])),
}


def schema_version(con: Connection) -> int:
    """The version of the schema an export's records are read from (its header says it): the server's."""
    return SCHEMA_VERSION


def count_records(con: Connection) -> dict[str, int]:
    """How many records of each type an export of this user's rows holds (in one statement)."""
    counts = ", ".join(f"(SELECT count(*) FROM ({sql}) x)" for sql in EXPORT_SQL.values())
    row = con.execute(f"SELECT {counts}").fetchone()
    assert row is not None
    return {kind: int(n) for kind, n in zip(EXPORT_SQL, row, strict=True)}


EXPORT_BATCH = 2000  # rows fetched at a time (a server-side cursor: a big export is never all in memory)


def records(con: Connection) -> Iterator[Record]:
    """Every record of an export, in dependency order (read inside one snapshot: `PgStore.read`)."""
    for kind, sql in EXPORT_SQL.items():
        with con.cursor(name=f"export_{kind}") as cur:
            cur.itersize = EXPORT_BATCH
            cur.execute(sql)
            for row in cur:
                yield ROW_TO_RECORD[kind](row)


# ---------------------------------------------------------------------------------------------------
# merging into a store (inside one transaction)
# ---------------------------------------------------------------------------------------------------
def merger(con: Connection) -> Merger:
    """A new merge of an export's records into the store `con` writes (in its transaction)."""
    return Merger()


def _one(con: Connection, query: str, args: tuple | list) -> tuple | None:
    return con.execute(query, args).fetchone()


class Merger:
    """Adds what is new, maps what is already there; old uids resolve to this user's rows."""

    def __init__(self) -> None:
        self.added: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        self.doc_ids: dict[str, int] = {}
        self.chunk_ids: dict[str, int] = {}
        self.conv_ids: dict[str, int] = {}
        self.mem_ids: dict[str, int] = {}
        self.mem_uids: dict[str, str] = {}  # uid in the file -> uid in this store
        self.node_ids: dict[str, int] = {}
        self.new_memory_ids: list[int] = []
        self.new_memory_uids: list[str] = []
        self.new_chunk_ids: list[int] = []
        self.new_document_uids: list[str] = []

    def _count(self, kind: str, added: bool) -> None:
        bucket = self.added if added else self.skipped
        bucket[kind] = bucket.get(kind, 0) + 1

    # ---- the whole export ----------------------------------------------------------------------------
    def merge_export(self, con: Connection, records: dict[str, list[Any]]) -> None:
        new_docs = {r.uid for r in records["document"] if self._document(con, r)}
        for r in records["chunk"]:
            self._chunk(con, r, new_docs)
        new_convs = {r.uid for r in records["conversation"] if self._conversation(con, r)}
        for r in records["message"]:
            self._message(con, r, new_convs)
        for r in records["memory"]:
            self._memory(con, r)
        self._fix_conflicts(con, records["memory"])
        for r in records["derivation"]:
            self._derivation(con, r)
        for r in records["fact_check"]:
            self._fact_check(con, r)
        for r in records["node"]:
            self._node(con, r)
        for r in records["edge"]:
            self._edge(con, r)
        for r in records["audit"]:
            self._audit(con, r)

    def merge_plain(self, con: Connection, items: list[PlainMemory]) -> None:
        now = to_iso(time.time()) or ""
        for item in items:
            importance = item.importance
            if importance is None:
                importance = IMPORTANCE_BY_SOURCE["import"] - (EPISODIC_DISCOUNT if item.kind == "episodic" else 0.0)
            at = to_ts(item.at)
            rec = MemoryRecord(uid=new_uid("mem"), kind=item.kind, text=check_text(item.text),
                               importance=importance, created_at=now, updated_at=now, at=to_iso(at),
                               project=item.project, source="import")
            self._memory(con, rec)

    # ---- documents and chunks ------------------------------------------------------------------------
    def _document(self, con: Connection, r: DocumentRecord) -> bool:
        """True when the document was added (its chunks follow it)."""
        project = clean_project(r.project)
        row = _one(con, "SELECT id FROM documents WHERE uid = %s", (r.uid,)) or _one(
            con, "SELECT id FROM documents WHERE content_hash = %s AND project IS NOT DISTINCT FROM %s "
                 "AND status = 'ready' ORDER BY id LIMIT 1", (r.content_hash, project))
        if row is not None:
            self.doc_ids[r.uid] = int(row[0])
            self._count("document", False)
            return False
        row = _one(con, "INSERT INTO documents(uid, path, title, mime, content_hash, size, mtime, project, status, "
                        "chunk_count, created_at, updated_at, meta) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'ready', "
                        "%s, %s, %s, %s::jsonb) RETURNING id",
                   (r.uid, r.path, r.title, r.mime, r.content_hash, r.size, r.mtime, project, r.chunk_count,
                    required_ts(r.created_at), required_ts(r.updated_at), to_json(r.meta)))
        assert row is not None
        self.doc_ids[r.uid] = int(row[0])
        self.new_document_uids.append(r.uid)
        self._count("document", True)
        return True

    def _chunk(self, con: Connection, r: ChunkRecord, new_docs: set[str]) -> None:
        doc_id = self.doc_ids.get(r.document)
        if doc_id is None:
            raise UserError(f"The export is inconsistent: chunk {r.uid} belongs to a document it does not hold.")
        if r.document not in new_docs:  # the document was already here: map to its chunk at that position
            row = _one(con, "SELECT id FROM chunks WHERE uid = %s OR (document_id = %s AND position = %s) "
                            "ORDER BY uid = %s DESC LIMIT 1", (r.uid, doc_id, r.position, r.uid))
            if row is not None:
                self.chunk_ids[r.uid] = int(row[0])
            self._count("chunk", False)
            return
        uid = r.uid
        if _one(con, "SELECT 1 FROM chunks WHERE uid = %s", (uid,)):
            uid = new_uid("chk")
        row = _one(con, "INSERT INTO chunks(uid, document_id, position, text, content_hash, locator, page, heading, "
                        "token_count, extracted) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                   (uid, doc_id, r.position, r.text, content_hash(r.text), r.locator, r.page, r.heading,
                    r.token_count, bool(r.extracted)))
        assert row is not None
        rid = int(row[0])
        self.chunk_ids[r.uid] = rid
        self.new_chunk_ids.append(rid)
        self._count("chunk", True)

    # ---- conversations -------------------------------------------------------------------------------
    def _conversation(self, con: Connection, r: ConversationRecord) -> bool:
        row = _one(con, "SELECT id FROM conversations WHERE uid = %s", (r.uid,))
        if row is not None:
            self.conv_ids[r.uid] = int(row[0])
            self._count("conversation", False)
            return False
        row = _one(con, "INSERT INTO conversations(uid, title, project, created_at, updated_at, meta) "
                        "VALUES (%s, %s, %s, %s, %s, %s::jsonb) RETURNING id",
                   (r.uid, r.title, clean_project(r.project), required_ts(r.created_at), required_ts(r.updated_at),
                    to_json(r.meta)))
        assert row is not None
        self.conv_ids[r.uid] = int(row[0])
        self._count("conversation", True)
        return True

    def _message(self, con: Connection, r: MessageRecord, new_convs: set[str]) -> None:
        conv_id = self.conv_ids.get(r.conversation)
        if conv_id is None:
            raise UserError("The export is inconsistent: a message belongs to a conversation it does not hold.")
        if r.conversation not in new_convs:
            self._count("message", False)
            return
        con.execute("INSERT INTO messages(conversation_id, role, content, created_at, meta) "
                    "VALUES (%s, %s, %s, %s, %s::jsonb)",
                    (conv_id, r.role, r.content, required_ts(r.created_at), to_json(r.meta)))
        self._count("message", True)

    # ---- memories ------------------------------------------------------------------------------------
    def _existing_memory(self, con: Connection, r: MemoryRecord, chash: str, project: str | None,
                         event_at: float | None) -> tuple[int, str] | None:
        row = _one(con, "SELECT id, uid FROM memories WHERE uid = %s", (r.uid,))
        if row is not None:
            return int(row[0]), str(row[1])
        sql = "SELECT id, uid FROM memories WHERE content_hash = %s AND kind = %s AND project IS NOT DISTINCT FROM %s"
        args: list[Any] = [chash, r.kind, project]
        if r.kind == "episodic":  # separate events with the same words are separate memories
            if event_at is None:
                sql += " AND event_at IS NULL"
            else:
                sql += " AND event_at BETWEEN %s AND %s"
                args += [event_at - TIME_EPS, event_at + TIME_EPS]
        row = _one(con, sql + " ORDER BY id LIMIT 1", args)
        return None if row is None else (int(row[0]), str(row[1]))

    def _memory(self, con: Connection, r: MemoryRecord) -> None:
        text = check_text(r.text)
        chash, project, event_at = content_hash(text), clean_project(r.project), to_ts(r.at)
        found = self._existing_memory(con, r, chash, project, event_at)
        if found is not None:
            self.mem_ids[r.uid], self.mem_uids[r.uid] = found
            self._count("memory", False)
            return
        doc_id = self.doc_ids.get(r.document) if r.document else None
        conv_id = self.conv_ids.get(r.conversation) if r.conversation else None
        row = _one(con,
                   "INSERT INTO memories(uid, kind, text, content_hash, importance, created_at, updated_at, event_at, "
                   "last_accessed_at, access_count, archived, archived_at, project, source, document_id, "
                   "conversation_id, conflict_with, processed, extracted, decayed_at, meta) VALUES (%s, %s, %s, %s, "
                   "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, NULL, %s, %s, %s, %s::jsonb) RETURNING id",
                   (r.uid, r.kind, text, chash, r.importance, required_ts(r.created_at), required_ts(r.updated_at),
                    event_at, to_ts(r.last_accessed_at), r.access_count, bool(r.archived), to_ts(r.archived_at),
                    project, r.source, doc_id, conv_id, bool(r.processed), bool(r.extracted), to_ts(r.decayed_at),
                    to_json(r.meta)))
        assert row is not None
        rid = int(row[0])
        self.mem_ids[r.uid], self.mem_uids[r.uid] = rid, r.uid
        self.new_memory_ids.append(rid)
        self.new_memory_uids.append(r.uid)
        self._count("memory", True)

    def _fix_conflicts(self, con: Connection, records: list[MemoryRecord]) -> None:
        """Flags between memories, once both ends are known (the other may be earlier or later in the file)."""
        new = set(self.new_memory_uids)
        for r in records:
            if not r.conflict_with or r.uid not in new:
                continue
            other = self.mem_uids.get(r.conflict_with)
            if other is None and _one(con, "SELECT 1 FROM memories WHERE uid = %s", (r.conflict_with,)):
                other = r.conflict_with
            if other is not None:
                con.execute("UPDATE memories SET conflict_with = %s WHERE uid = %s", (other, r.uid))

    def _derivation(self, con: Connection, r: DerivationRecord) -> None:
        derived, source = self.mem_ids.get(r.derived), self.mem_ids.get(r.source)
        if derived is None or source is None:
            self._count("derivation", False)
            return
        cur = con.execute("INSERT INTO derivations(derived_id, source_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                          (derived, source))
        self._count("derivation", cur.rowcount > 0)

    def _fact_check(self, con: Connection, r: FactCheckRecord) -> None:
        a, b = self.mem_ids.get(r.a), self.mem_ids.get(r.b)
        if a is None or b is None or a == b:
            self._count("fact_check", False)
            return
        a, b = min(a, b), max(a, b)
        cur = con.execute("INSERT INTO fact_checks(a, b, pair_hash, verdict, checked_at) VALUES (%s, %s, %s, %s, %s) "
                          "ON CONFLICT DO NOTHING", (a, b, r.pair_hash, r.verdict, required_ts(r.checked_at)))
        self._count("fact_check", cur.rowcount > 0)

    # ---- graph ---------------------------------------------------------------------------------------
    def _node(self, con: Connection, r: NodeRecord) -> None:
        row = _one(con, "INSERT INTO nodes(name, norm_name, type, aliases, created_at, meta) "
                        "VALUES (%s, %s, %s, %s::jsonb, %s, %s::jsonb) ON CONFLICT (user_id, norm_name) DO NOTHING "
                        "RETURNING id",
                   (r.name, r.norm_name, r.node_type, json.dumps(r.aliases, ensure_ascii=False),
                    required_ts(r.created_at), to_json(r.meta)))
        self._count("node", row is not None)
        if row is None:
            row = _one(con, "SELECT id FROM nodes WHERE norm_name = %s", (r.norm_name,))
        assert row is not None
        self.node_ids[r.norm_name] = int(row[0])

    def _edge(self, con: Connection, r: EdgeRecord) -> None:
        src, dst = self.node_ids.get(r.src), self.node_ids.get(r.dst)
        mem = self.mem_ids.get(r.memory) if r.memory else None
        chunk = self.chunk_ids.get(r.chunk) if r.chunk else None
        if src is None or dst is None or (mem is None and chunk is None):  # no provenance, no edge
            self._count("edge", False)
            return
        exists = _one(con, "SELECT 1 FROM edges WHERE src = %s AND rel = %s AND dst = %s "
                           "AND memory_id IS NOT DISTINCT FROM %s AND chunk_id IS NOT DISTINCT FROM %s",
                      (src, r.rel, dst, mem, chunk))
        if exists:
            self._count("edge", False)
            return
        con.execute("INSERT INTO edges(src, rel, dst, weight, memory_id, chunk_id, created_at, meta) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s::jsonb)",
                    (src, r.rel, dst, r.weight, mem, chunk, required_ts(r.created_at), to_json(r.meta)))
        self._count("edge", True)

    # ---- audit ---------------------------------------------------------------------------------------
    def _audit(self, con: Connection, r: AuditRecord) -> None:
        at = required_ts(r.at)
        detail = json.dumps(r.detail, sort_keys=True)
        exists = _one(con, "SELECT 1 FROM audit WHERE at BETWEEN %s AND %s AND actor = %s AND action = %s "
                           "AND target IS NOT DISTINCT FROM %s AND detail = %s::jsonb",
                      (at - TIME_EPS, at + TIME_EPS, r.actor, r.action, r.target, detail))
        if exists:
            self._count("audit", False)
            return
        con.execute("INSERT INTO audit(at, actor, action, target, detail) VALUES (%s, %s, %s, %s, %s::jsonb)",
                    (at, r.actor, r.action, r.target, detail))
        self._count("audit", True)
