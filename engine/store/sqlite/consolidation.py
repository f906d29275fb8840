"""Consolidation's rows: decay and archive marks, judged fact pairs, roll-up windows and watermarks."""

from __future__ import annotations

import json
from typing import Any

from ..types import MemoryRow
from . import state
from .db import Connection, marks, padded
from .memories import COLS

# When a memory was last used: stored (or imported) or used since. Not when its event happened: a memory
# of 1995 stored today, or a chat history imported today, is as fresh as any other.
LAST_USE = "max(created_at, coalesce(last_accessed_at, 0))"


# -- decay and archive -------------------------------------------------------------------------------------

def idle_since(con: Connection, before: float) -> list[tuple[int, float, float, float | None]]:
    """(id, importance, last use, decayed at) of live memories not used since `before`."""
    return con.execute(
        f"SELECT id, importance, {LAST_USE}, decayed_at FROM memories WHERE archived = 0 AND {LAST_USE} < ?",
        (before,),
    ).fetchall()


def set_decayed(con: Connection, updates: list[tuple[float, float, int]]) -> None:
    """(importance, decayed at, id) for each decayed memory."""
    con.executemany("UPDATE memories SET importance = ?, decayed_at = ? WHERE id = ?", updates)


def below_floor(con: Connection, floor: float, before: float) -> list[tuple[int, str]]:
    """(id, uid) of live memories below the importance floor and not used since `before`."""
    return con.execute(
        f"SELECT id, uid FROM memories WHERE archived = 0 AND importance < ? AND {LAST_USE} < ? ORDER BY id",
        (floor, before),
    ).fetchall()


def archive(con: Connection, ids: list[int], now: float) -> None:
    con.executemany("UPDATE memories SET archived = 1, archived_at = ? WHERE id = ?", [(now, rid) for rid in ids])


def unarchive(con: Connection, rid: int, now: float) -> None:
    """Back in recall, used now: decay starts over."""
    con.execute(
        "UPDATE memories SET archived = 0, archived_at = NULL, decayed_at = NULL, last_accessed_at = ?, "
        "updated_at = ? WHERE id = ?",
        (now, now, rid),
    )


# -- contradictions ----------------------------------------------------------------------------------------

def unflagged_facts(con: Connection) -> dict[int, tuple[str | None, float]]:
    """{id: (project, updated_at)} of live facts not flagged as contradicting another."""
    return {r[0]: (r[1], r[2]) for r in con.execute(
        "SELECT id, project, updated_at FROM memories WHERE kind = 'fact' AND archived = 0 AND conflict_with IS NULL"
    ).fetchall()}


SEARCHED_KEY = "contradictions_searched"  # {"id": highest fact id, "at": time} of the last complete check


def searched_mark(con: Connection) -> tuple[int, float] | None:
    """Where the last complete contradiction check stood: facts up to this id, as they were at this time."""
    value = state.get(con, SEARCHED_KEY)
    if value is None:
        return None
    try:
        mark = json.loads(value)
        return int(mark["id"]), float(mark["at"])
    except (ValueError, KeyError, TypeError):
        return None  # unreadable: search around every fact again


def highest_memory_id(con: Connection) -> int:
    return int(con.execute("SELECT coalesce(max(id), 0) FROM memories").fetchone()[0])


def set_searched_mark(con: Connection, fact_id: int, at: float) -> None:
    state.put(con, SEARCHED_KEY, json.dumps({"id": fact_id, "at": at}))


def same_subject_and_relation(con: Connection) -> list[tuple[int, int]]:
    """Pairs of memories whose edges share subject and relation but not the object (each edge's partners
    found by subject and relation whatever the statistics say: migration m012)."""
    return con.execute(
        "SELECT DISTINCT e1.memory_id, e2.memory_id FROM edges e1 JOIN edges e2 INDEXED BY edges_src_rel "
        "ON e1.src = e2.src "
        "AND e1.rel = e2.rel AND e1.dst <> e2.dst AND e1.memory_id < e2.memory_id ORDER BY 1, 2"
    ).fetchall()


def statements(con: Connection, a: int, b: int) -> list[tuple[int, str, str, str, float]]:
    """(id, uid, text, content hash, when) of two memories, in id order."""
    return con.execute(
        "SELECT id, uid, text, content_hash, coalesce(event_at, created_at) FROM memories "
        "WHERE id IN (?, ?) ORDER BY id", (a, b)).fetchall()


def judged(con: Connection, a: int, b: int) -> str | None:
    """The pair hash under which this pair was last judged."""
    row = con.execute("SELECT pair_hash FROM fact_checks WHERE a = ? AND b = ?", (a, b)).fetchone()
    return None if row is None else row[0]


def still_as_judged(con: Connection, a: int, b: int, hash_a: str, hash_b: str) -> bool:
    """Both facts are live, unflagged and have the words that were judged."""
    return con.execute(
        "SELECT count(*) FROM memories WHERE id IN (?, ?) AND archived = 0 AND conflict_with IS NULL "
        "AND content_hash IN (?, ?)", (a, b, hash_a, hash_b)).fetchone()[0] == 2


def flag(con: Connection, a: int, a_uid: str, b: int, b_uid: str) -> None:
    con.execute("UPDATE memories SET conflict_with = ? WHERE id = ?", (b_uid, a))
    con.execute("UPDATE memories SET conflict_with = ? WHERE id = ?", (a_uid, b))


def remember_check(con: Connection, a: int, b: int, pair_hash: str, verdict: str, now: float) -> None:
    con.execute(
        "INSERT INTO fact_checks(a, b, pair_hash, verdict, checked_at) VALUES (?,?,?,?,?) "
        "ON CONFLICT(a, b) DO UPDATE SET pair_hash = excluded.pair_hash, verdict = excluded.verdict, "
        "checked_at = excluded.checked_at",
        (min(a, b), max(a, b), pair_hash, verdict, now),
    )


def flagged(con: Connection) -> list[tuple[MemoryRow, MemoryRow | None]]:
    """(memory row, the row it is flagged against) for every flagged memory, in id order."""
    def row(found: tuple | None) -> MemoryRow | None:
        return None if found is None else MemoryRow._make(found)
    return [(MemoryRow._make(found), row(con.execute(f"SELECT {COLS} FROM memories WHERE uid = ?", (found[13],))
                                         .fetchone()))
            for found in con.execute(f"SELECT {COLS} FROM memories WHERE conflict_with IS NOT NULL ORDER BY id")
            .fetchall()]


def unflag(con: Connection, a: int, b: int, now: float) -> None:
    con.execute("UPDATE memories SET conflict_with = NULL, updated_at = ? WHERE id IN (?, ?)", (now, a, b))


# -- episodic roll-up --------------------------------------------------------------------------------------

def rollup_scopes(con: Connection) -> list[tuple[int | None, str | None, str | None, str | None]]:
    """(conversation id, conversation uid, conversation project, memory project) of unprocessed events."""
    return con.execute(
        "SELECT DISTINCT m.conversation_id, c.uid, c.project, m.project FROM memories m "
        "LEFT JOIN conversations c ON c.id = m.conversation_id "
        "WHERE m.kind = 'episodic' AND m.processed = 0 AND m.archived = 0 ORDER BY 1, 4"
    ).fetchall()


def _scope(conv_id: int | None, project: str | None) -> tuple[str, tuple[Any, ...]]:
    if conv_id is not None:
        return "conversation_id = ?", (conv_id,)
    return "conversation_id IS NULL AND project IS ?", (project,)


def _pending(conv_id: int | None, project: str | None) -> tuple[str, tuple[Any, ...]]:
    # new events, and older ones waiting again (edited, or their summary went with a forgotten event)
    where, args = _scope(conv_id, project)
    # the queue's own index (m011), which holds only what waits; by the counts alone SQLite would take
    # memories_project and walk every episodic memory of the project
    return (f"FROM memories INDEXED BY memories_rollup WHERE kind = 'episodic' AND processed = 0 AND archived = 0 "
            f"AND {where}", args)


def watermark(con: Connection, scope: str) -> int:
    row = con.execute("SELECT last_id FROM watermarks WHERE scope = ?", (scope,)).fetchone()
    return row[0] if row else 0


def interrupted(con: Connection, scope: str, mark: int) -> int | None:
    """The last event of a window written past the watermark (a crash came before it was marked)."""
    return con.execute("SELECT max(last_id) FROM rollups WHERE scope = ? AND last_id > ?", (scope, mark)).fetchone()[0]


def pending_between(con: Connection, conv_id: int | None, project: str | None, after: int, upto: int) -> list[int]:
    pending, args = _pending(conv_id, project)
    return [r[0] for r in con.execute("SELECT id " + pending + " AND id > ? AND id <= ? ORDER BY id",
                                      (*args, after, upto))]


def pending_window(con: Connection, conv_id: int | None, project: str | None, size: int) -> list[tuple[int, str]]:
    """(id, content hash) of the scope's first `size` unprocessed events."""
    pending, args = _pending(conv_id, project)
    return con.execute(f"SELECT id, content_hash {pending} ORDER BY id LIMIT ?", (*args, size)).fetchall()


def window_done(con: Connection, source_hash: str) -> bool:
    return con.execute("SELECT 1 FROM rollups WHERE source_hash = ?", (source_hash,)).fetchone() is not None


def events(con: Connection, ids: list[int]) -> list[tuple[str, float]]:
    """(text, when) of these events in time order."""
    return con.execute(
        f"SELECT text, coalesce(event_at, created_at) FROM memories WHERE id IN ({marks(ids)}) "
        "ORDER BY coalesce(event_at, created_at), id", padded(ids)).fetchall()


def turns(con: Connection, ids: list[int]) -> list[tuple[int, str, float]]:
    """(id, text, when) of these events in time order."""
    return con.execute(
        f"SELECT id, text, coalesce(event_at, created_at) FROM memories WHERE id IN ({marks(ids)}) "
        "ORDER BY coalesce(event_at, created_at), id", padded(ids)).fetchall()


def derive(con: Connection, fact: int, sources: list[int]) -> None:
    con.executemany("INSERT OR IGNORE INTO derivations(derived_id, source_id) VALUES (?, ?)",
                    [(fact, sid) for sid in sources])


def add_rollup(con: Connection, scope: str, source_hash: str, facts: int, now: float, last_id: int) -> None:
    con.execute("INSERT INTO rollups(scope, source_hash, fact_count, created_at, last_id) VALUES (?,?,?,?,?)",
                (scope, source_hash, facts, now, last_id))


def mark_rolled_up(con: Connection, scope: str, ids: list[int], last_id: int, now: float) -> None:
    con.executemany("UPDATE memories SET processed = 1 WHERE id = ?", [(i,) for i in ids])
    con.execute(
        "INSERT INTO watermarks(scope, last_id, updated_at) VALUES (?,?,?) ON CONFLICT(scope) "
        "DO UPDATE SET last_id = max(last_id, excluded.last_id), updated_at = excluded.updated_at",
        (scope, last_id, now),
    )
