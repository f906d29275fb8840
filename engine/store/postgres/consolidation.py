"""Consolidation's rows on PostgreSQL: decay and archive marks, judged fact pairs, roll-up windows and watermarks,
as the SQLite backend's functions (engine/store/sqlite/consolidation.py), for the transaction's user."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from ..types import MemoryRow
from . import state
from .memories import COLS

Connection = psycopg.Connection


def _one(con: Connection, query: str, params: tuple[Any, ...] = ()) -> Any:
    """The one value of an aggregate query (it always has a row)."""
    row = con.execute(query, params).fetchone()
    assert row is not None
    return row[0]


# When a memory was last used: stored (or imported) or used since. Not when its event happened: a memory
# of 1995 stored today, or a chat history imported today, is as fresh as any other.
LAST_USE = "greatest(created_at, coalesce(last_accessed_at, 0))"


# -- decay and archive -------------------------------------------------------------------------------------

def idle_since(con: Connection, before: float) -> list[tuple[int, float, float, float | None]]:
    """(id, importance, last use, decayed at) of live memories not used since `before`."""
    return con.execute(
        f"SELECT id, importance, {LAST_USE}, decayed_at FROM memories WHERE NOT archived AND {LAST_USE} < %s",
        (before,),
    ).fetchall()


def set_decayed(con: Connection, updates: list[tuple[float, float, int]]) -> None:
    """(importance, decayed at, id) for each decayed memory."""
    with con.cursor() as cur:
        cur.executemany("UPDATE memories SET importance = %s, decayed_at = %s WHERE id = %s", updates)


def below_floor(con: Connection, floor: float, before: float) -> list[tuple[int, str]]:
    """(id, uid) of live memories below the importance floor and not used since `before`."""
    return con.execute(
        f"SELECT id, uid FROM memories WHERE NOT archived AND importance < %s AND {LAST_USE} < %s ORDER BY id",
        (floor, before),
    ).fetchall()


def archive(con: Connection, ids: list[int], now: float) -> None:
    con.execute("UPDATE memories SET archived = true, archived_at = %s WHERE id = ANY(%s)", (now, list(ids)))


def unarchive(con: Connection, rid: int, now: float) -> None:
    """Back in recall, used now: decay starts over."""
    con.execute(
        "UPDATE memories SET archived = false, archived_at = NULL, decayed_at = NULL, last_accessed_at = %s, "
        "updated_at = %s WHERE id = %s",
        (now, now, rid),
    )


# -- contradictions ----------------------------------------------------------------------------------------

def unflagged_facts(con: Connection) -> dict[int, tuple[str | None, float]]:
    """{id: (project, updated_at)} of live facts not flagged as contradicting another."""
    return {r[0]: (r[1], r[2]) for r in con.execute(
        "SELECT id, project, updated_at FROM memories WHERE kind = 'fact' AND NOT archived AND conflict_with IS NULL"
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
    return int(_one(con, "SELECT coalesce(max(id), 0) FROM memories"))


def set_searched_mark(con: Connection, fact_id: int, at: float) -> None:
    state.put(con, SEARCHED_KEY, json.dumps({"id": fact_id, "at": at}))


def same_subject_and_relation(con: Connection) -> list[tuple[int, int]]:
    """Pairs of memories whose edges share subject and relation but not the object (each edge's partners
    found by subject and relation: the index edges_src_rel)."""
    return con.execute(
        "SELECT DISTINCT e1.memory_id, e2.memory_id FROM edges e1 JOIN edges e2 ON e1.src = e2.src "
        "AND e1.rel = e2.rel AND e1.dst <> e2.dst AND e1.memory_id < e2.memory_id ORDER BY 1, 2"
    ).fetchall()


def statements(con: Connection, a: int, b: int) -> list[tuple[int, str, str, str, float]]:
    """(id, uid, text, content hash, when) of two memories, in id order."""
    return con.execute(
        "SELECT id, uid, text, content_hash, coalesce(event_at, created_at) FROM memories "
        "WHERE id IN (%s, %s) ORDER BY id", (a, b)).fetchall()


def judged(con: Connection, a: int, b: int) -> str | None:
    """The pair hash under which this pair was last judged."""
    row = con.execute("SELECT pair_hash FROM fact_checks WHERE a = %s AND b = %s", (a, b)).fetchone()
    return None if row is None else row[0]


def still_as_judged(con: Connection, a: int, b: int, hash_a: str, hash_b: str) -> bool:
    """Both facts are live, unflagged and have the words that were judged."""
    return _one(con, "SELECT count(*) FROM memories WHERE id IN (%s, %s) AND NOT archived AND conflict_with IS NULL "
                "AND content_hash IN (%s, %s)", (a, b, hash_a, hash_b)) == 2


def flag(con: Connection, a: int, a_uid: str, b: int, b_uid: str) -> None:
    con.execute("UPDATE memories SET conflict_with = %s WHERE id = %s", (b_uid, a))
    con.execute("UPDATE memories SET conflict_with = %s WHERE id = %s", (a_uid, b))


def remember_check(con: Connection, a: int, b: int, pair_hash: str, verdict: str, now: float) -> None:
    con.execute(
        "INSERT INTO fact_checks(a, b, pair_hash, verdict, checked_at) VALUES (%s, %s, %s, %s, %s) "
        "ON CONFLICT (user_id, a, b) DO UPDATE SET pair_hash = excluded.pair_hash, verdict = excluded.verdict, "
        "checked_at = excluded.checked_at",
        (min(a, b), max(a, b), pair_hash, verdict, now),
    )


def flagged(con: Connection) -> list[tuple[MemoryRow, MemoryRow | None]]:
    """(memory row, the row it is flagged against) for every flagged memory, in id order."""
    def row(found: tuple | None) -> MemoryRow | None:
        return None if found is None else MemoryRow._make(found)
    return [(MemoryRow._make(found), row(con.execute(f"SELECT {COLS} FROM memories WHERE uid = %s", (found[13],))
                                         .fetchone()))
            for found in con.execute(f"SELECT {COLS} FROM memories WHERE conflict_with IS NOT NULL ORDER BY id")
            .fetchall()]


def unflag(con: Connection, a: int, b: int, now: float) -> None:
    con.execute("UPDATE memories SET conflict_with = NULL, updated_at = %s WHERE id IN (%s, %s)", (now, a, b))


# -- episodic roll-up --------------------------------------------------------------------------------------

def rollup_scopes(con: Connection) -> list[tuple[int | None, str | None, str | None, str | None]]:
    """(conversation id, conversation uid, conversation project, memory project) of unprocessed events."""
    return con.execute(
        "SELECT DISTINCT m.conversation_id, c.uid, c.project, m.project FROM memories m "
        "LEFT JOIN conversations c ON c.id = m.conversation_id "
        "WHERE m.kind = 'episodic' AND NOT m.processed AND NOT m.archived ORDER BY 1, 4"
    ).fetchall()


def _scope(conv_id: int | None, project: str | None) -> tuple[str, tuple[Any, ...]]:
    if conv_id is not None:
        return "conversation_id = %s", (conv_id,)
    return "conversation_id IS NULL AND project IS NOT DISTINCT FROM %s", (project,)


def _pending(conv_id: int | None, project: str | None) -> tuple[str, tuple[Any, ...]]:
    # new events, and older ones waiting again (edited, or their summary went with a forgotten event)
    where, args = _scope(conv_id, project)
    # the queue's own partial index (memories_rollup) holds only what waits
    return (f"FROM memories WHERE kind = 'episodic' AND NOT processed AND NOT archived "
            f"AND {where}", args)


def watermark(con: Connection, scope: str) -> int:
    row = con.execute("SELECT last_id FROM watermarks WHERE scope = %s", (scope,)).fetchone()
    return row[0] if row else 0


def interrupted(con: Connection, scope: str, mark: int) -> int | None:
    """The last event of a window written past the watermark (a crash came before it was marked)."""
    return _one(con, "SELECT max(last_id) FROM rollups WHERE scope = %s AND last_id > %s", (scope, mark))


def pending_between(con: Connection, conv_id: int | None, project: str | None, after: int, upto: int) -> list[int]:
    pending, args = _pending(conv_id, project)
    return [r[0] for r in con.execute("SELECT id " + pending + " AND id > %s AND id <= %s ORDER BY id",
                                      (*args, after, upto))]


def pending_window(con: Connection, conv_id: int | None, project: str | None, size: int) -> list[tuple[int, str]]:
    """(id, content hash) of the scope's first `size` unprocessed events."""
    pending, args = _pending(conv_id, project)
    return con.execute(f"SELECT id, content_hash {pending} ORDER BY id LIMIT %s", (*args, size)).fetchall()


def window_done(con: Connection, source_hash: str) -> bool:
    return con.execute("SELECT 1 FROM rollups WHERE source_hash = %s", (source_hash,)).fetchone() is not None


def events(con: Connection, ids: list[int]) -> list[tuple[str, float]]:
    """(text, when) of these events in time order."""
    return con.execute(
        "SELECT text, coalesce(event_at, created_at) FROM memories WHERE id = ANY(%s) "
        "ORDER BY coalesce(event_at, created_at), id", (list(ids),)).fetchall()


def turns(con: Connection, ids: list[int]) -> list[tuple[int, str, float]]:
    """(id, text, when) of these events in time order."""
    return con.execute(
        "SELECT id, text, coalesce(event_at, created_at) FROM memories WHERE id = ANY(%s) "
        "ORDER BY coalesce(event_at, created_at), id", (list(ids),)).fetchall()


def derive(con: Connection, fact: int, sources: list[int]) -> None:
    with con.cursor() as cur:
        cur.executemany("INSERT INTO derivations(derived_id, source_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                        [(fact, sid) for sid in sources])


def add_rollup(con: Connection, scope: str, source_hash: str, facts: int, now: float, last_id: int) -> None:
    con.execute("INSERT INTO rollups(scope, source_hash, fact_count, created_at, last_id) VALUES (%s, %s, %s, %s, %s)",
                (scope, source_hash, facts, now, last_id))


def mark_rolled_up(con: Connection, scope: str, ids: list[int], last_id: int, now: float) -> None:
    con.execute("UPDATE memories SET processed = true WHERE id = ANY(%s)", (list(ids),))
    con.execute(
        "INSERT INTO watermarks(scope, last_id, updated_at) VALUES (%s, %s, %s) ON CONFLICT (user_id, scope) "
        "DO UPDATE SET last_id = greatest(watermarks.last_id, excluded.last_id), updated_at = excluded.updated_at",
        (scope, last_id, now),
    )
