"""Export and import rows on PostgreSQL, as engine/store/sqlite/transfer.py: one query per record type for the
export, and the merge of a file's records into the store (inside one transaction), for the user of the
transaction they are given.

Row-level security confines every statement to that user: an export reads only their rows, an import's
lookups (same uid, same content) find only their rows and its inserts take the user from the transaction (the
columns' default), so an import never reads, matches or writes another user's rows. The records are the
SQLite backend's, field for field: booleans and JSON are read back as that backend reads them.

A push (engine/remote.py) sends records in batches, each merged in one transaction: a record whose uid is
here already is mapped, never written twice, and ids from earlier batches resolve to the rows they made. A
pull reads them a page at a time (`records_page`), with their vectors (`vectors_of`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
from psycopg import Connection

from ...errors import UserError
from ...memory_rules import check_text, content_hash
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
from .migrations import SCHEMA_VERSION

TRANSFER_LOCK = 0x70757368  # pg_advisory_xact_lock(key, user): one merge of a user's records at a time

# each kind's page: its key columns first (the cursor), then the columns of ROW_TO_RECORD's row
_J = "{a}.user_id = {b}.user_id AND {a}.id = {b}.{c}"
PAGE_SQL: dict[str, tuple[int, str]] = {
    "document": (1, "SELECT id, uid, path, title, mime, content_hash, size, mtime, project, chunk_count, created_at, "
                    "updated_at, meta::text FROM documents WHERE status = 'ready' AND {after} ORDER BY id LIMIT %s"),
    "chunk": (1, "SELECT c.id, c.uid, d.uid, c.position, c.text, c.locator, c.page, c.heading, c.token_count, "
                 "c.extracted FROM chunks c JOIN documents d ON " + _J.format(a="d", b="c", c="document_id")
                 + " AND d.status = 'ready' WHERE {after} ORDER BY c.id LIMIT %s"),
    "conversation": (1, "SELECT id, uid, title, project, created_at, updated_at, meta::text FROM conversations "
                        "WHERE {after} ORDER BY id LIMIT %s"),
    "message": (1, "SELECT m.id, c.uid, m.role, m.content, m.created_at, m.meta::text FROM messages m "
                   "JOIN conversations c ON " + _J.format(a="c", b="m", c="conversation_id")
                   + " WHERE {after} ORDER BY m.id LIMIT %s"),
    "memory": (1, "SELECT m.id, m.uid, m.kind, m.text, m.importance, m.created_at, m.updated_at, m.event_at, "
                  "m.last_accessed_at, m.access_count, m.archived, m.archived_at, m.project, m.source, d.uid, c.uid, "
                  "m.conflict_with, m.processed, m.extracted, m.meta::text, m.decayed_at FROM memories m "
                  "LEFT JOIN documents d ON " + _J.format(a="d", b="m", c="document_id") + " AND d.status = 'ready' "
                  "LEFT JOIN conversations c ON " + _J.format(a="c", b="m", c="conversation_id")
                  + f" WHERE m.source <> '{ACTIVITY_SOURCE}' AND {{after}} ORDER BY m.id LIMIT %s"),
    "derivation": (2, "SELECT x.derived_id, x.source_id, d.uid, s.uid FROM derivations x "
                      "JOIN memories d ON " + _J.format(a="d", b="x", c="derived_id")
                      + " JOIN memories s ON " + _J.format(a="s", b="x", c="source_id")
                      + " WHERE {after} ORDER BY 1, 2 LIMIT %s"),
    "fact_check": (2, "SELECT f.a, f.b, a.uid, b.uid, f.pair_hash, f.verdict, f.checked_at FROM fact_checks f "
                      "JOIN memories a ON " + _J.format(a="a", b="f", c="a")
                      + " JOIN memories b ON " + _J.format(a="b", b="f", c="b") + " WHERE {after} ORDER BY 1, 2 LIMIT %s"),
    "node": (1, "SELECT id, name, norm_name, type, aliases::text, created_at, meta::text FROM nodes WHERE {after} "
                "ORDER BY id LIMIT %s"),
    "edge": (1, "SELECT e.id, s.norm_name, e.rel, t.norm_name, e.weight, m.uid, c.uid, e.created_at, e.meta::text "
                "FROM edges e JOIN nodes s ON " + _J.format(a="s", b="e", c="src")
                + " JOIN nodes t ON " + _J.format(a="t", b="e", c="dst")
                + " LEFT JOIN memories m ON " + _J.format(a="m", b="e", c="memory_id")
                + " LEFT JOIN chunks c ON " + _J.format(a="c", b="e", c="chunk_id")
                + " WHERE {after} ORDER BY e.id LIMIT %s"),
}
_KEYS = {"document": ["id"], "chunk": ["c.id"], "conversation": ["id"], "message": ["m.id"], "memory": ["m.id"],
         "derivation": ["x.derived_id", "x.source_id"], "fact_check": ["f.a", "f.b"], "node": ["id"], "edge": ["e.id"]}
KINDS = tuple(PAGE_SQL)


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


def _first(cur: Any) -> Any:
    """The first column of the one row a statement returns."""
    row = cur.fetchone()
    assert row is not None
    return row[0]


def _one(con: Connection, query: str, args: tuple | list) -> tuple | None:
    return con.execute(query, args).fetchone()


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


def _cursor(after: str | None) -> tuple[int, list[int]]:
    """(index of the kind, its last key) from a page's `next` ("kind:key[,key]"); the start for None."""
    if not after:
        return 0, []
    try:
        kind, _, keys = after.partition(":")
        return KINDS.index(kind), [int(k) for k in keys.split(",")]
    except ValueError as e:
        raise UserError(f"{after[:60]!r} is not a page of records: start without `after`, then hand each page's "
                        "`next` back.") from e


def records_page(con: Connection, after: str | None, limit: int) -> tuple[list[Record], str | None]:
    """Up to `limit` records after the cursor `after` (None: from the start), in dependency order (every
    document, then every chunk, …), and the cursor of the next page (None: that was the last). The app's own
    activity and the audit log are not among them."""
    index, last = _cursor(after)
    out: list[Record] = []
    while index < len(KINDS) and len(out) < limit:
        kind = KINDS[index]
        width, sql = PAGE_SQL[kind]
        keys = _KEYS[kind]
        if last:
            cond = f"({', '.join(keys)}) > ({', '.join(['%s'] * width)})" if width > 1 else f"{keys[0]} > %s"
            args: list[Any] = [*last, limit - len(out)]
        else:
            cond, args = "true", [limit - len(out)]
        rows = con.execute(sql.format(after=cond), args).fetchall()
        out += [ROW_TO_RECORD[kind](r[width:]) for r in rows]
        if len(out) >= limit and rows:
            return out, f"{kind}:{','.join(str(k) for k in rows[-1][:width])}"
        index, last = index + 1, []
    return out, None


def count_outgoing(con: Connection) -> dict[str, int]:
    """How many records of each type a pull of this user's rows brings (records_page's: no activity, no audit)."""
    counts = {}
    for kind, (_, sql) in PAGE_SQL.items():
        inner = sql.format(after="true").rsplit(" ORDER BY", 1)[0]
        counts[kind] = int(_first(con.execute(f"SELECT count(*) FROM ({inner}) x")))
    return counts


def outgoing(con: Connection) -> Iterator[list[Record]]:
    """Every record, each alone (records_page's order: a document's chunks may come in a later group)."""
    for record in records(con):
        yield [record]


Vectors = dict[str, tuple[np.ndarray, list[tuple[int, int, np.ndarray]]]]


def known(con: Connection, kind: str, keys: list[str]) -> set[str]:
    """Which of these keys (KNOWN_KEYS: a memory's, document's, passage's or conversation's uid, an entity's
    normalised name) the transaction's user holds."""
    table = {"memory": "memories", "document": "documents", "chunk": "chunks", "conversation": "conversations",
             "node": "nodes"}[kind]
    column = KNOWN_KEYS[kind]
    return {str(r[0]) for r in con.execute(f"SELECT {column} FROM {table} WHERE {column} = ANY(%s)",
                                           (list(keys),)).fetchall()}


def turns_of(con: Connection, uids: list[str]) -> dict[str, list[tuple[str, str, float]]]:
    """The turns (role, content, time) of these conversations of the user, by uid."""
    out: dict[str, list[tuple[str, str, float]]] = {}
    for uid, role, content, at in con.execute(
            "SELECT c.uid, m.role, m.content, m.created_at FROM messages m JOIN conversations c ON c.user_id = m.user_id "
            "AND c.id = m.conversation_id WHERE c.uid = ANY(%s)", (list(uids),)).fetchall():
        out.setdefault(str(uid), []).append((str(role), str(content), float(at)))
    return out


def _unpack(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=">f4", offset=4).astype(np.float32)


def vectors_of(con: Connection, table: str, uids: list[str]) -> Vectors:
    """The current vectors of these memories or chunks (by uid; those whose vector is of their present text),
    each with its memory's windows as (start, end, vector): uid -> (vector, windows)."""
    if not uids:
        return {}
    if table == "memories":
        sql = ("SELECT m.id, m.uid, vector_send(v.embedding) FROM memories m JOIN memory_vectors v "
               "ON v.user_id = m.user_id AND v.memory_id = m.id WHERE m.uid = ANY(%s) AND m.embedded_hash = m.content_hash")
    else:
        sql = ("SELECT c.id, c.uid, vector_send(v.embedding) FROM chunks c JOIN chunk_vectors v "
               "ON v.user_id = c.user_id AND v.chunk_id = c.id WHERE c.uid = ANY(%s) AND c.embedded_hash = c.content_hash")
    found = {int(r[0]): (str(r[1]), _unpack(r[2])) for r in con.execute(sql, (list(uids),)).fetchall()}
    windows: dict[int, list[tuple[int, int, np.ndarray]]] = {}
    if table == "memories" and found:
        for rid, start, end, data in con.execute(
                'SELECT memory_id, start, "end", vector_send(embedding) FROM memory_windows WHERE memory_id = ANY(%s) '
                "ORDER BY memory_id, id", (list(found),)).fetchall():
            windows.setdefault(int(rid), []).append((int(start), int(end), _unpack(data)))
    return {uid: (vec, windows.get(rid, [])) for rid, (uid, vec) in found.items()}


# ---------------------------------------------------------------------------------------------------
# merging into a user's rows (inside one transaction)
# ---------------------------------------------------------------------------------------------------
def merger(con: Connection) -> Merger:
    """A new merge of records into the transaction's user's rows. Merges of one user take turns (an
    advisory lock held to the transaction's end), so two pushes at once store each record once."""
    con.execute("SELECT pg_advisory_xact_lock(%s, current_setting('app.user_id')::integer)", (TRANSFER_LOCK,))
    return Merger()


class Merger(MergeBase):
    """Adds what is new, maps what is already there (by uid, then as SQLite's merge does by content)."""

    def _known(self, con: Connection, known: dict[str, int], table: str, uid: str | None) -> int | None:
        if not uid:
            return None
        if uid not in known:
            row = con.execute(f"SELECT id FROM {table} WHERE uid = %s", (uid,)).fetchone()
            if row is None:
                return None
            known[uid] = int(row[0])
        return known[uid]

    # ---- documents and chunks ------------------------------------------------------------------------
    def _document(self, con: Connection, r: DocumentRecord) -> None:
        project = clean_project(r.project)
        row = con.execute("SELECT id FROM documents WHERE uid = %s", (r.uid,)).fetchone() or con.execute(
            "SELECT id FROM documents WHERE content_hash = %s AND project IS NOT DISTINCT FROM %s AND status = 'ready' "
            "ORDER BY id LIMIT 1", (r.content_hash, project)).fetchone()
        if row is not None:
            self.doc_ids[r.uid] = int(row[0])
            self._count("document", False)
            return
        rid = _first(con.execute(
            "INSERT INTO documents(uid, path, title, mime, content_hash, size, mtime, project, status, chunk_count, "
            "created_at, updated_at, meta) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,'ready',%s,%s,%s,%s::jsonb) RETURNING id",
            (r.uid, r.path, r.title, r.mime, r.content_hash, r.size, r.mtime, project, r.chunk_count,
             required_ts(r.created_at), required_ts(r.updated_at), to_json(r.meta))))
        self.doc_ids[r.uid] = int(rid)
        self.new_document_uids.append(r.uid)
        self._count("document", True)

    def _chunk(self, con: Connection, r: ChunkRecord) -> None:
        doc_id = self._known(con, self.doc_ids, "documents", r.document)
        if doc_id is None:
            raise UserError(f"The records are inconsistent: passage {r.uid} belongs to a document they do not hold.")
        row = con.execute("SELECT id FROM chunks WHERE uid = %s OR (document_id = %s AND position = %s) "
                          "ORDER BY uid = %s DESC LIMIT 1", (r.uid, doc_id, r.position, r.uid)).fetchone()
        if row is not None:
            self.chunk_ids[r.uid] = int(row[0])
            self._count("chunk", False)
            return
        rid = int(_first(con.execute(
            "INSERT INTO chunks(uid, document_id, position, text, content_hash, locator, page, heading, token_count, "
            "extracted) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) RETURNING id",
            (r.uid, doc_id, r.position, r.text, content_hash(r.text), r.locator, r.page, r.heading, r.token_count,
             r.extracted))))
        self.chunk_ids[r.uid] = rid
        self.new_chunk_ids.append(rid)
        self.new_chunks[r.uid] = rid
        self._count("chunk", True)

    # ---- conversations -------------------------------------------------------------------------------
    def _conversation(self, con: Connection, r: ConversationRecord) -> None:
        if self._known(con, self.conv_ids, "conversations", r.uid) is not None:
            self._count("conversation", False)
            return
        rid = _first(con.execute(
            "INSERT INTO conversations(uid, title, project, created_at, updated_at, meta) "
            "VALUES (%s,%s,%s,%s,%s,%s::jsonb) RETURNING id",
            (r.uid, r.title, clean_project(r.project), required_ts(r.created_at), required_ts(r.updated_at),
             to_json(r.meta))))
        self.conv_ids[r.uid] = int(rid)
        self._count("conversation", True)

    def _message(self, con: Connection, r: MessageRecord) -> None:
        conv_id = self._known(con, self.conv_ids, "conversations", r.conversation)
        if conv_id is None:
            raise UserError("The records are inconsistent: a turn belongs to a conversation they do not hold.")
        at = required_ts(r.created_at)
        if con.execute("SELECT 1 FROM messages WHERE conversation_id = %s AND role = %s AND created_at BETWEEN %s "
                       "AND %s AND content = %s", (conv_id, r.role, at - TIME_EPS, at + TIME_EPS, r.content)).fetchone():
            self._count("message", False)
            return
        con.execute("INSERT INTO messages(conversation_id, role, content, created_at, meta) "
                    "VALUES (%s,%s,%s,%s,%s::jsonb)", (conv_id, r.role, r.content, at, to_json(r.meta)))
        self._count("message", True)

    # ---- memories ------------------------------------------------------------------------------------
    def _memory(self, con: Connection, r: MemoryRecord) -> None:
        self._memories(con, [r])

    def _memories(self, con: Connection, records: list[MemoryRecord]) -> None:
        """Memories as one batch: two lookups (by uid, by content) and one insert for all of them, not three
        round trips each (a push's batch of 500 took 3 s that way on a loaded server)."""
        if not records:
            return
        by_uid: dict[str, tuple[int, str]] = {str(u): (int(i), str(u)) for u, i in con.execute(
            "SELECT uid, id FROM memories WHERE uid = ANY(%s)", ([r.uid for r in records],)).fetchall()}
        rows = [(r, check_text(r.text)) for r in records]
        hashes = list({content_hash(text) for r, text in rows if r.uid not in by_uid})
        # content hash -> (id, uid, kind, project, event_at) of the memories holding it, oldest first
        by_hash: dict[str, list[tuple[int | None, str, str, str | None, float | None]]] = {}
        for h, i, u, kind, project, at in con.execute(
                "SELECT content_hash, id, uid, kind, project, event_at FROM memories WHERE content_hash = ANY(%s) "
                "ORDER BY id", (hashes,)).fetchall() if hashes else []:
            by_hash.setdefault(str(h), []).append((int(i), str(u), str(kind), project, at))
        new: list[tuple[MemoryRecord, tuple]] = []
        for r, text in rows:
            chash, project, event_at = content_hash(text), clean_project(r.project), to_ts(r.at)
            found = by_uid.get(r.uid) or next(
                ((i, u) for i, u, kind, p, at in by_hash.get(chash, [])
                 if kind == r.kind and p == project and (r.kind != "episodic" or (
                     at is None if event_at is None else at is not None and abs(at - event_at) <= TIME_EPS))), None)
            if found is not None:  # there already (or earlier in this batch: its id comes with the insert)
                self.mem_uids[r.uid] = found[1]
                if found[0] is not None:
                    self.mem_ids[r.uid] = found[0]
                self._count("memory", False)
                continue
            by_uid[r.uid] = (None, r.uid)  # type: ignore[assignment]
            by_hash.setdefault(chash, []).append((None, r.uid, r.kind, project, event_at))
            new.append((r, (r.uid, r.kind, text, chash, r.importance, required_ts(r.created_at),
                            required_ts(r.updated_at), event_at, to_ts(r.last_accessed_at), r.access_count, r.archived,
                            to_ts(r.archived_at), project, r.source,
                            self._known(con, self.doc_ids, "documents", r.document),
                            self._known(con, self.conv_ids, "conversations", r.conversation), None, r.processed,
                            r.extracted, to_ts(r.decayed_at), to_json(r.meta))))
        ids: dict[str, int] = {}
        for part in range(0, len(new), 1000):  # 21 parameters a row, PostgreSQL takes 65,535
            chunk = new[part:part + 1000]
            values = ",".join(["(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s::jsonb)"] * len(chunk))
            ids.update((str(u), int(i)) for u, i in con.execute(
                "INSERT INTO memories(uid, kind, text, content_hash, importance, created_at, updated_at, event_at, "
                "last_accessed_at, access_count, archived, archived_at, project, source, document_id, "
                "conversation_id, conflict_with, processed, extracted, decayed_at, meta) VALUES "
                + values + " RETURNING uid, id", [x for _, row in chunk for x in row]).fetchall())
        for r, _ in new:
            rid = ids[r.uid]
            self.mem_ids[r.uid], self.mem_uids[r.uid] = rid, r.uid
            self.new_memory_ids.append(rid)
            self.new_memory_uids.append(r.uid)
            self.new_memories[r.uid] = rid
            self._count("memory", True)
        for r, _ in rows:  # mapped to a memory this batch added
            if r.uid not in self.mem_ids and self.mem_uids.get(r.uid) in ids:
                self.mem_ids[r.uid] = ids[self.mem_uids[r.uid]]

    def _fix_conflicts(self, con: Connection, records: list[MemoryRecord]) -> None:
        new = set(self.new_memory_uids)
        for r in records:
            if not r.conflict_with or r.uid not in new:
                continue
            other = self.mem_uids.get(r.conflict_with)
            if other is None and con.execute("SELECT 1 FROM memories WHERE uid = %s", (r.conflict_with,)).fetchone():
                other = r.conflict_with
            if other is not None:
                con.execute("UPDATE memories SET conflict_with = %s WHERE uid = %s", (other, r.uid))

    def _derivation(self, con: Connection, r: DerivationRecord) -> None:
        derived = self._known(con, self.mem_ids, "memories", r.derived)
        source = self._known(con, self.mem_ids, "memories", r.source)
        if derived is None or source is None:
            self._count("derivation", False)
            return
        cur = con.execute("INSERT INTO derivations(derived_id, source_id) VALUES (%s,%s) ON CONFLICT DO NOTHING",
                          (derived, source))
        self._count("derivation", cur.rowcount > 0)

    def _fact_check(self, con: Connection, r: FactCheckRecord) -> None:
        a, b = self._known(con, self.mem_ids, "memories", r.a), self._known(con, self.mem_ids, "memories", r.b)
        if a is None or b is None or a == b:
            self._count("fact_check", False)
            return
        a, b = min(a, b), max(a, b)
        cur = con.execute("INSERT INTO fact_checks(a, b, pair_hash, verdict, checked_at) VALUES (%s,%s,%s,%s,%s) "
                          "ON CONFLICT DO NOTHING", (a, b, r.pair_hash, r.verdict, required_ts(r.checked_at)))
        self._count("fact_check", cur.rowcount > 0)

    # ---- graph ---------------------------------------------------------------------------------------
    def _node(self, con: Connection, r: NodeRecord) -> None:
        row = con.execute(
            "INSERT INTO nodes(name, norm_name, type, aliases, created_at, meta) VALUES (%s,%s,%s,%s::jsonb,%s,%s::jsonb) "
            "ON CONFLICT (user_id, norm_name) DO NOTHING RETURNING id",
            (r.name, r.norm_name, r.node_type, json.dumps(r.aliases, ensure_ascii=False), required_ts(r.created_at),
             to_json(r.meta))).fetchone()
        self._count("node", row is not None)
        self.node_ids.pop(r.norm_name, None)
        if row is not None:
            self.node_ids[r.norm_name] = int(row[0])

    def _node_id(self, con: Connection, norm_name: str) -> int | None:
        if norm_name not in self.node_ids:
            row = con.execute("SELECT id FROM nodes WHERE norm_name = %s", (norm_name,)).fetchone()
            if row is None:
                return None
            self.node_ids[norm_name] = int(row[0])
        return self.node_ids[norm_name]

    def _edge(self, con: Connection, r: EdgeRecord) -> None:
        src, dst = self._node_id(con, r.src), self._node_id(con, r.dst)
        mem = self._known(con, self.mem_ids, "memories", r.memory)
        chunk = self._known(con, self.chunk_ids, "chunks", r.chunk)
        if src is None or dst is None or (mem is None and chunk is None):  # no provenance, no edge
            self._count("edge", False)
            return
        if con.execute("SELECT 1 FROM edges WHERE src = %s AND rel = %s AND dst = %s AND memory_id IS NOT DISTINCT "
                       "FROM %s AND chunk_id IS NOT DISTINCT FROM %s", (src, r.rel, dst, mem, chunk)).fetchone():
            self._count("edge", False)
            return
        con.execute("INSERT INTO edges(src, rel, dst, weight, memory_id, chunk_id, created_at, meta) "
                    "VALUES (%s,%s,%s,%s,%s,%s,%s,%s::jsonb)",
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
