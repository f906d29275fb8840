"""Memory rows: read, written and deleted with what is derived from them (edges, summaries, answers)."""

from __future__ import annotations

import itertools
import json
from typing import Any, cast

from ...errors import NotFound
from ..types import ACTIVITY_SOURCE, MemoryRow
from .db import Connection, marks, padded

COLS = (
    "id, uid, kind, text, project, importance, created_at, updated_at, event_at, last_accessed_at, "
    "access_count, archived, source, conflict_with, embedded_hash, content_hash, meta"
)


def _row(found: tuple | None) -> MemoryRow | None:
    return None if found is None else MemoryRow._make(found)


def by_uid(con: Connection, uid: str) -> MemoryRow:
    row = _row(con.execute(f"SELECT {COLS} FROM memories WHERE uid = ?", (uid,)).fetchone())
    if row is None:
        raise NotFound(f"No memory with id {uid}.")
    return row


def by_id(con: Connection, rid: int) -> MemoryRow | None:
    return _row(con.execute(f"SELECT {COLS} FROM memories WHERE id = ?", (rid,)).fetchone())


# memories_hash indexes the first HASH_KEY_CHARS hex digits of the content hash (migration m008), not all 64:
# a quarter of the size, so far more of it stays in the caches of a big store, where a new memory's entry
# lands on a leaf anywhere in it. A statement finds a hash by both terms, through that index by name (planned
# without statistics SQLite chose memories_project and walked every row of the project: remember slowed as
# the store grew, 1.9 ms at 2k rows, 3.1 ms at 6k); two hashes sharing the prefix cost a row read, not a match.
HASH_KEY_CHARS = 10
BY_HASH = (f"memories INDEXED BY memories_hash WHERE substr(content_hash, 1, {HASH_KEY_CHARS}) = "
           f"substr(?, 1, {HASH_KEY_CHARS}) AND content_hash = ?")


def hash_index_reads(con: Connection) -> list[tuple[str, tuple]]:
    """Statements that between them read every leaf of memories_hash, each one of 256 slices of the hash
    range by its first two hex digits (so a write waits for one slice at most: ~0.4 ms each at 500k
    memories)."""
    key = f"substr(content_hash, 1, {HASH_KEY_CHARS})"
    scan = "SELECT count(*) FROM memories INDEXED BY memories_hash WHERE "
    bounds = [f"{i:02x}" for i in range(1, 256)]
    reads: list[tuple[str, tuple]] = [(f"{scan}{key} < ?", (bounds[0],))]
    reads += [(f"{scan}{key} >= ? AND {key} < ?", (a, b)) for a, b in itertools.pairwise(bounds)]
    reads.append((f"{scan}{key} >= ?", (bounds[-1],)))
    return reads


def same_words(con: Connection, chash: str, kind: str, project: str | None,
               exclude: int | None = None) -> MemoryRow | None:
    """The oldest live memory with this content hash, kind and project (other than row `exclude`)."""
    older = "" if exclude is None else f" AND id != {int(exclude)}"
    return _row(con.execute(
        f"SELECT {COLS} FROM {BY_HASH} AND kind = ? AND project IS ? AND archived = 0{older} ORDER BY id LIMIT 1",
        (chash, chash, kind, project),
    ).fetchone())


def take_dedup_pending(con: Connection, rid: int) -> MemoryRow | None:
    """The row, if it still waits for its near-duplicate check (stored before its vector); the mark is
    cleared."""
    row = _row(con.execute(f"SELECT {COLS} FROM memories WHERE id = ? AND dedup_pending = 1 AND archived = 0",
                           (rid,)).fetchone())
    if row is not None:
        con.execute("UPDATE memories SET dedup_pending = 0 WHERE id = ?", (rid,))
    return row


def insert(con: Connection, *, uid: str, kind: str, text: str, chash: str, importance: float, now: float,
           event_at: float | None, project: str | None, source: str, meta: dict[str, Any] | None,
           conversation_id: int | None, document_id: int | None, done: bool, dedup_pending: bool) -> int:
    """A new memory row. `done`: not to be summarised or graphed; `dedup_pending`: checked for
    near-duplicates when its vector arrives."""
    cur = con.execute(
        "INSERT INTO memories(uid, kind, text, content_hash, importance, created_at, updated_at, "
        "event_at, project, source, meta, conversation_id, document_id, processed, extracted, "
        "dedup_pending) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (uid, kind, text, chash, importance, now, now, event_at, project, source,
         json.dumps(meta or {}), conversation_id, document_id, int(done), int(done), int(dedup_pending)),
    )
    return cast(int, cur.lastrowid)


def mark_embedded(con: Connection, table: str, ids: list[int]) -> None:
    """These rows' vectors are of their current text."""
    con.executemany(f"UPDATE {table} SET embedded_hash = content_hash WHERE id = ?", [(i,) for i in ids])


def stated_again(con: Connection, rid: int, importance: float, now: float) -> None:
    """A duplicate was merged into this memory: it counts as used, with the importance given."""
    con.execute(
        "UPDATE memories SET importance = ?, access_count = access_count + 1, last_accessed_at = ?, "
        "updated_at = ? WHERE id = ?",
        (importance, now, now, rid),
    )


def set_fields(con: Connection, rid: int, fields: dict[str, Any]) -> None:
    con.execute(f"UPDATE memories SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?", [*fields.values(), rid])


def forget_old_words(con: Connection, rid: int, uid: str) -> None:
    """What was derived from a memory's old words goes: its edges, its extraction and roll-up marks, and
    the contradiction flags on both sides (the next consolidation judges the new words)."""
    con.execute("DELETE FROM edges WHERE memory_id = ?", (rid,))
    con.execute("UPDATE memories SET extracted = 0, processed = 0 WHERE id = ?", (rid,))
    con.execute("UPDATE memories SET conflict_with = NULL WHERE id = ?", (rid,))
    con.execute("UPDATE memories SET conflict_with = NULL WHERE conflict_with = ?", (uid,))


def has_vectors(con: Connection) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE name = 'vec_memories'").fetchone() is not None


def edge_nodes(con: Connection, ids: list[int] | set[int]) -> set[int]:
    """The nodes at either end of these memories' edges (the ones a delete may leave without an edge)."""
    order = sorted(ids)
    out: set[int] = set()
    for p in range(0, len(order), 500):
        part = order[p : p + 500]
        for src, dst in con.execute(f"SELECT src, dst FROM edges WHERE memory_id IN ({marks(part)})", padded(part)):
            out.update((src, dst))
    return out


def drop_orphan_nodes(con: Connection, candidates: set[int] | None = None) -> int:
    """Delete nodes no edge uses any more: among `candidates` (the ends of edges just deleted: the same
    cost at any size), or all of them (None)."""
    if candidates is None:
        return con.execute(
            "DELETE FROM nodes WHERE id NOT IN (SELECT src FROM edges) AND id NOT IN (SELECT dst FROM edges)"
        ).rowcount
    order = sorted(candidates)
    gone = 0
    for p in range(0, len(order), 500):
        part = order[p : p + 500]
        gone += con.execute(
            f"DELETE FROM nodes WHERE id IN ({marks(part)}) AND NOT EXISTS (SELECT 1 FROM edges WHERE src = nodes.id) "
            "AND NOT EXISTS (SELECT 1 FROM edges WHERE dst = nodes.id)", padded(part)
        ).rowcount
    return gone


def own_summary(con: Connection, rid: int, source: str) -> None:
    """A summary the user edits or states again is theirs: its events' edits and deletes no longer
    take it along."""
    if con.execute("DELETE FROM derivations WHERE derived_id = ?", (rid,)).rowcount:
        con.execute("UPDATE memories SET source = ? WHERE id = ? AND source = 'rollup'", (source, rid))


def derived_from(con: Connection, ids: list[int]) -> list[int]:
    """Facts summarised (even in part) from these memories."""
    return [r[0] for r in con.execute(
        f"SELECT DISTINCT derived_id FROM derivations WHERE source_id IN ({marks(ids)})", padded(ids))]


def requeue_sources(con: Connection, derived: list[int], gone: set[int] | None = None) -> None:
    """The events these summaries were made from (except those in `gone`) wait for the next roll-up."""
    keep = sorted(gone or ())
    con.execute(f"UPDATE memories SET processed = 0 WHERE id IN (SELECT source_id FROM derivations "
                f"WHERE derived_id IN ({marks(derived)})) AND id NOT IN ({marks(keep)})",
                [*padded(derived), *padded(keep)])


def delete(con: Connection, ids: set[int]) -> tuple[list[str], int]:
    """Delete these memories (their edges go by cascade); flags pointing at them are cleared.
    Returns their uids and the number of edges that went with them."""
    in_ids, bound = marks(ids), padded(sorted(ids))
    uids = [r[0] for r in con.execute(f"SELECT uid FROM memories WHERE id IN ({in_ids})", bound)]
    edges = con.execute(f"SELECT count(*) FROM edges WHERE memory_id IN ({in_ids})", bound).fetchone()[0]
    # conflicts pointing at a deleted memory are no longer conflicts
    con.execute(f"UPDATE memories SET conflict_with = NULL WHERE conflict_with IN ({marks(uids)})", padded(uids))
    con.execute(f"DELETE FROM memories WHERE id IN ({in_ids})", bound)
    return uids, edges


def scrub_transcripts(con: Connection, uids: list[str]) -> int:
    """Delete stored answers that cited any of these memories or chunks: they carry its text (the citations
    are indexed in message_sources)."""
    doomed: set[int] = set()
    for p in range(0, len(uids), 500):
        part = uids[p : p + 500]
        doomed.update(r[0] for r in con.execute(
            f"SELECT message_id FROM message_sources WHERE uid IN ({marks(part)})", padded(part)).fetchall())
    if doomed:
        con.execute(f"DELETE FROM messages WHERE id IN ({marks(doomed)})", padded(sorted(doomed)))
    return len(doomed)


def _where(kind: str | None, project: str | None, archived: bool | None, conflicts_only: bool,
           activity: bool | None, since: float | None = None) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    if activity is not None:
        where.append("source IS NOT ?" if not activity else "source IS ?")
        args.append(ACTIVITY_SOURCE)
    if kind:
        where.append("kind = ?")
        args.append(kind)
    if project is not None:
        where.append("project IS ?")
        args.append(project or None)
    if archived is not None:
        where.append("archived = ?")
        args.append(int(archived))
    if conflicts_only:
        where.append("conflict_with IS NOT NULL")
    if since is not None:
        where.append("coalesce(event_at, created_at) >= ?")
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
        where.append("(coalesce(event_at, created_at), id) < (?, ?)")
        args.extend(after)
    query = f"SELECT {COLS} FROM memories"
    if where:
        query += " WHERE " + " AND ".join(where)
    query += " ORDER BY coalesce(event_at, created_at) DESC, id DESC LIMIT ? OFFSET ?"
    return [MemoryRow._make(r) for r in con.execute(query, [*args, limit, offset]).fetchall()]


def listing_count(con: Connection, *, kind: str | None, project: str | None, archived: bool | None,
                  conflicts_only: bool, activity: bool | None, since: float | None = None) -> int:
    """How many memories `listing` goes through with these filters."""
    where, args = _where(kind, project, archived, conflicts_only, activity, since)
    query = "SELECT count(*) FROM memories" + (" WHERE " + " AND ".join(where) if where else "")
    return int(con.execute(query, args).fetchone()[0])



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
        "UPDATE memories SET access_count = access_count + 1, last_accessed_at = ?, "
        "importance = min(1.0, importance + ? * (1.0 - importance)) WHERE uid = ?",
        (now, boost, uid)).rowcount for uid in uids)


def uids_of(con: Connection, table: str, ids: list[int]) -> list[str]:
    if not ids:
        return []
    return [r[0] for r in con.execute(
        f"SELECT uid FROM {table} WHERE id IN ({marks(ids)}) ORDER BY id", padded(ids)).fetchall()]


def row_of(con: Connection, uid: str) -> tuple[int, str]:
    """(row id, source) of a memory."""
    return con.execute("SELECT id, source FROM memories WHERE uid = ?", (uid,)).fetchone()
