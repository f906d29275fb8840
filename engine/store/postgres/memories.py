"""Memory rows on PostgreSQL: the SQLite backend's functions (engine/store/sqlite/memories.py), with the same
names, parameters, meaning and return types, for the user of the transaction they are given.

Every statement runs in a transaction of `Database.transaction(user_id)`: row-level security confines it to
that user's rows, and a new row takes the user from the transaction (the column's default). The rows come
back as the SQLite backend reads them (`MemoryRow`: `archived` 0 or 1, `meta` JSON text), cast in the SELECT.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg import sql

from ...errors import NotFound
from ..types import ACTIVITY_SOURCE, MemoryRow

Connection = psycopg.Connection

COLS = (
    "id, uid, kind, text, project, importance, created_at, updated_at, event_at, last_accessed_at, "
    "access_count, archived::int, source, conflict_with, embedded_hash, content_hash, meta::text"
)
# columns `set_fields` may be given, and those of them that are booleans here (0 and 1 in SQLite)
FIELDS = frozenset({"text", "content_hash", "embedded_hash", "kind", "project", "importance", "event_at",
                    "archived", "archived_at", "updated_at", "processed", "extracted", "dedup_pending", "source",
                    "conflict_with", "last_accessed_at", "access_count", "meta", "decayed_at"})
BOOLEANS = frozenset({"archived", "processed", "extracted", "dedup_pending"})
TABLES = frozenset({"memories", "chunks"})


def _row(found: tuple | None) -> MemoryRow | None:
    return None if found is None else MemoryRow._make(found)


def _table(table: str) -> sql.Identifier:
    if table not in TABLES:
        raise ValueError(f"not a table of rows with text: {table!r}")
    return sql.Identifier(table)


def by_uid(con: Connection, uid: str) -> MemoryRow:
    row = _row(con.execute(f"SELECT {COLS} FROM memories WHERE uid = %s", (uid,)).fetchone())
    if row is None:
        raise NotFound(f"No memory with id {uid}.")
    return row


def by_id(con: Connection, rid: int) -> MemoryRow | None:
    return _row(con.execute(f"SELECT {COLS} FROM memories WHERE id = %s", (rid,)).fetchone())


def hash_index_reads(con: Connection) -> list[tuple[str, tuple]]:
    """Nothing: the duplicate lookup's index lives in the server's shared buffers, kept warm by every user's
    remembering, not in a page cache of this process (the SQLite backend's reason for these reads)."""
    return []


def same_words(con: Connection, chash: str, kind: str, project: str | None,
               exclude: int | None = None) -> MemoryRow | None:
    """The oldest live memory with this content hash, kind and project (other than row `exclude`)."""
    return _row(con.execute(
        f"SELECT {COLS} FROM memories WHERE content_hash = %s AND kind = %s AND project IS NOT DISTINCT FROM %s "
        "AND NOT archived AND id IS DISTINCT FROM %s ORDER BY id LIMIT 1",
        (chash, kind, project, exclude),
    ).fetchone())


def take_dedup_pending(con: Connection, rid: int) -> MemoryRow | None:
    """The row, if it still waits for its near-duplicate check (stored before its vector); the mark is
    cleared."""
    return _row(con.execute(
        f"UPDATE memories SET dedup_pending = false WHERE id = %s AND dedup_pending AND NOT archived "
        f"RETURNING {COLS}", (rid,)).fetchone())


def insert(con: Connection, *, uid: str, kind: str, text: str, chash: str, importance: float, now: float,
           event_at: float | None, project: str | None, source: str, meta: dict[str, Any] | None,
           conversation_id: int | None, document_id: int | None, done: bool, dedup_pending: bool) -> int:
    """A new memory row. `done`: not to be summarised or graphed; `dedup_pending`: checked for
    near-duplicates when its vector arrives."""
    row = con.execute(
        "INSERT INTO memories(uid, kind, text, content_hash, importance, created_at, updated_at, "
        "event_at, project, source, meta, conversation_id, document_id, processed, extracted, "
        "dedup_pending) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s) RETURNING id",
        (uid, kind, text, chash, importance, now, now, event_at, project, source,
         json.dumps(meta or {}), conversation_id, document_id, bool(done), bool(done), bool(dedup_pending)),
    ).fetchone()
    assert row is not None
    return int(row[0])


def mark_embedded(con: Connection, table: str, ids: list[int]) -> None:
    """These rows' vectors are of their current text."""
    con.execute(sql.SQL("UPDATE {} SET embedded_hash = content_hash WHERE id = ANY(%s)").format(_table(table)),
                (list(ids),))


def stated_again(con: Connection, rid: int, importance: float, now: float) -> None:
    """A duplicate was merged into this memory: it counts as used, with the importance given."""
    con.execute(
        "UPDATE memories SET importance = %s, access_count = access_count + 1, last_accessed_at = %s, "
        "updated_at = %s WHERE id = %s",
        (importance, now, now, rid),
    )


def set_fields(con: Connection, rid: int, fields: dict[str, Any]) -> None:
    unknown = set(fields) - FIELDS
    if unknown:
        raise ValueError(f"not a memory field: {sorted(unknown)}")
    values = [bool(v) if k in BOOLEANS else json.dumps(v) if k == "meta" and not isinstance(v, str) else v
              for k, v in fields.items()]
    sets = sql.SQL(", ").join(
        sql.SQL("{} = %s::jsonb" if k == "meta" else "{} = %s").format(sql.Identifier(k)) for k in fields)
    con.execute(sql.SQL("UPDATE memories SET {} WHERE id = %s").format(sets), [*values, rid])


def forget_old_words(con: Connection, rid: int, uid: str) -> None:
    """What was derived from a memory's old words goes: its edges, its extraction and roll-up marks, and
    the contradiction flags on both sides (the next consolidation judges the new words)."""
    con.execute("DELETE FROM edges WHERE memory_id = %s", (rid,))
    con.execute("UPDATE memories SET extracted = false, processed = false, conflict_with = NULL WHERE id = %s",
                (rid,))
    con.execute("UPDATE memories SET conflict_with = NULL WHERE conflict_with = %s", (uid,))


def has_vectors(con: Connection) -> bool:
    """Whether the vector tables are made (`server init` makes them, with the space's dimension)."""
    row = con.execute("SELECT EXISTS (SELECT 1 FROM embedding_space)").fetchone()
    return bool(row and row[0])


def edge_nodes(con: Connection, ids: list[int] | set[int]) -> set[int]:
    """The nodes at either end of these memories' edges (the ones a delete may leave without an edge)."""
    out: set[int] = set()
    for src, dst in con.execute("SELECT src, dst FROM edges WHERE memory_id = ANY(%s)", (sorted(ids),)):
        out.update((src, dst))
    return out


def drop_orphan_nodes(con: Connection, candidates: set[int] | None = None) -> int:
    """Delete nodes no edge uses any more: among `candidates` (the ends of edges just deleted: the same
    cost at any size), or all of them (None)."""
    unused = "NOT EXISTS (SELECT 1 FROM edges WHERE src = nodes.id) AND NOT EXISTS (SELECT 1 FROM edges WHERE dst = nodes.id)"
    if candidates is None:
        return con.execute(f"DELETE FROM nodes WHERE {unused}").rowcount
    return con.execute(f"DELETE FROM nodes WHERE id = ANY(%s) AND {unused}", (sorted(candidates),)).rowcount


def own_summary(con: Connection, rid: int, source: str) -> None:
    """A summary the user edits or states again is theirs: its events' edits and deletes no longer
    take it along."""
    if con.execute("DELETE FROM derivations WHERE derived_id = %s", (rid,)).rowcount:
        con.execute("UPDATE memories SET source = %s WHERE id = %s AND source = 'rollup'", (source, rid))


def derived_from(con: Connection, ids: list[int]) -> list[int]:
    """Facts summarised (even in part) from these memories."""
    return [r[0] for r in con.execute(
        "SELECT DISTINCT derived_id FROM derivations WHERE source_id = ANY(%s)", (list(ids),))]


def requeue_sources(con: Connection, derived: list[int], gone: set[int] | None = None) -> None:
    """The events these summaries were made from (except those in `gone`) wait for the next roll-up."""
    con.execute("UPDATE memories SET processed = false WHERE id IN (SELECT source_id FROM derivations "
                "WHERE derived_id = ANY(%s)) AND NOT id = ANY(%s)", (list(derived), sorted(gone or ())))


def delete(con: Connection, ids: set[int]) -> tuple[list[str], int]:
    """Delete these memories (their edges go by cascade); flags pointing at them are cleared.
    Returns their uids and the number of edges that went with them."""
    bound = sorted(ids)
    uids = [r[0] for r in con.execute("SELECT uid FROM memories WHERE id = ANY(%s)", (bound,))]
    (edges,) = con.execute("SELECT count(*) FROM edges WHERE memory_id = ANY(%s)", (bound,)).fetchone() or (0,)
    # conflicts pointing at a deleted memory are no longer conflicts
    con.execute("UPDATE memories SET conflict_with = NULL WHERE conflict_with = ANY(%s)", (uids,))
    con.execute("DELETE FROM memories WHERE id = ANY(%s)", (bound,))
    return uids, int(edges)


def scrub_transcripts(con: Connection, uids: list[str]) -> int:
    """Delete stored answers that cited any of these memories or chunks: they carry its text (the citations
    are indexed in message_sources)."""
    return con.execute("DELETE FROM messages WHERE id IN (SELECT message_id FROM message_sources WHERE uid = ANY(%s))",
                       (list(uids),)).rowcount


def _where(kind: str | None, project: str | None, archived: bool | None, conflicts_only: bool,
           activity: bool | None, since: float | None = None) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    if activity is not None:
        where.append("source = %s" if activity else "source <> %s")
        args.append(ACTIVITY_SOURCE)
    if kind:
        where.append("kind = %s")
        args.append(kind)
    if project is not None:
        where.append("project IS NOT DISTINCT FROM %s")
        args.append(project or None)
    if archived is not None:
        where.append("archived = %s")
        args.append(bool(archived))
    if conflicts_only:
        where.append("conflict_with IS NOT NULL")
    if since is not None:
        where.append("coalesce(event_at, created_at) >= %s")
        args.append(since)
    return where, args


def listing(con: Connection, *, kind: str | None, project: str | None, archived: bool | None,
            conflicts_only: bool, activity: bool | None, limit: int, offset: int,
            after: tuple[float, int] | None = None, since: float | None = None) -> list[MemoryRow]:
    """Memories newest first; `activity`: only the app's own events (True), all but them (False), or all.
    `after` (the listing_key of the last row of the page before) goes on from there without counting the rows
    before it, as `offset` does. `since`: only memories of that moment (epoch seconds) or later."""
    where, args = _where(kind, project, archived, conflicts_only, activity, since)
    if after is not None:
        where.append("(coalesce(event_at, created_at), id) < (%s, %s)")
        args.extend(after)
    query = f"SELECT {COLS} FROM memories"
    if where:
        query += " WHERE " + " AND ".join(where)
    query += " ORDER BY coalesce(event_at, created_at) DESC, id DESC LIMIT %s OFFSET %s"
    return [MemoryRow._make(r) for r in con.execute(query, [*args, limit, offset]).fetchall()]


def listing_count(con: Connection, *, kind: str | None, project: str | None, archived: bool | None,
                  conflicts_only: bool, activity: bool | None, since: float | None = None) -> int:
    """How many memories `listing` goes through with these filters."""
    where, args = _where(kind, project, archived, conflicts_only, activity, since)
    query = "SELECT count(*) FROM memories" + (" WHERE " + " AND ".join(where) if where else "")
    row = con.execute(query, args).fetchone()
    return int(row[0]) if row else 0



def projects(con: Connection) -> list[str]:
    rows = con.execute(
        "SELECT project FROM memories WHERE project IS NOT NULL UNION "
        "SELECT project FROM documents WHERE project IS NOT NULL ORDER BY 1"
    ).fetchall()
    return [r[0] for r in rows]


def record_use(con: Connection, uids: list[str], now: float, boost: float) -> int:
    """Each memory was used once more now; its importance grows as ranking.boosted_importance does.
    Returns how many of the uids were memories."""
    return sum(con.execute(
        "UPDATE memories SET access_count = access_count + 1, last_accessed_at = %s, "
        "importance = least(1.0, importance + %s * (1.0 - importance)) WHERE uid = %s",
        (now, boost, uid)).rowcount for uid in uids)


def uids_of(con: Connection, table: str, ids: list[int]) -> list[str]:
    if not ids:
        return []
    return [r[0] for r in con.execute(
        sql.SQL("SELECT uid FROM {} WHERE id = ANY(%s) ORDER BY id").format(_table(table)), (list(ids),)).fetchall()]


def row_of(con: Connection, uid: str) -> tuple[int, str]:
    """(row id, source) of a memory."""
    row = con.execute("SELECT id, source FROM memories WHERE uid = %s", (uid,)).fetchone()
    return None if row is None else (int(row[0]), str(row[1]))  # type: ignore[return-value]
