"""Audit rows on PostgreSQL: one per write, ids and counts only (the SQLite backend's functions). A user's
audit ids are their write sequence, given out in commit order (migrations: `feed`), so the change feed's
`since(token)` misses no row of theirs, whoever wrote it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg

from ...models import AuditEntry, iso

Connection = psycopg.Connection
PAGE = 500  # rows read at a time by newest_first


def insert(con: Connection, at: float, actor: str, action: str, target: str | None, detail: dict[str, Any]) -> None:
    con.execute("INSERT INTO audit(at, actor, action, target, detail) VALUES (%s, %s, %s, %s, %s::jsonb)",
                (at, actor, action, target, json.dumps(detail, sort_keys=True)))


def _entry(r: tuple) -> AuditEntry:
    return AuditEntry(id=r[0], at=iso(r[1]), actor=r[2], action=r[3], target=r[4], detail=r[5])


def entries(con: Connection, limit: int, offset: int) -> list[AuditEntry]:
    rows = con.execute(
        "SELECT id, at, actor, action, target, detail FROM audit ORDER BY id DESC LIMIT %s OFFSET %s", (limit, offset),
    ).fetchall()
    return [_entry(r) for r in rows]


def newest_first(con: Connection) -> Iterator[tuple[float, AuditEntry]]:
    """Every audit row with its time in seconds, newest first, read as the caller goes (it stops when it has
    enough), PAGE rows at a time."""
    before: int | None = None
    while True:
        rows = con.execute("SELECT id, at, actor, action, target, detail FROM audit WHERE id < %s "
                           "ORDER BY id DESC LIMIT %s", (before if before is not None else 2**62, PAGE)).fetchall()
        for r in rows:
            yield float(r[1]), _entry(r)
        if len(rows) < PAGE:
            return
        before = rows[-1][0]


def last_id(con: Connection) -> int:
    """The newest audit row's id: the user's write sequence (every write records one row)."""
    row = con.execute("SELECT max(id) FROM audit").fetchone()
    return int(row[0] or 0) if row else 0


def since(con: Connection, after: int, limit: int) -> list[tuple[int, str, str, str | None]]:
    """(id, actor, action, target) of the audit rows after `after`, oldest first."""
    rows = con.execute("SELECT id, actor, action, target FROM audit WHERE id > %s ORDER BY id LIMIT %s",
                       (after, limit)).fetchall()
    return [(int(r[0]), str(r[1]), str(r[2]), r[3]) for r in rows]


def data_version(con: Connection) -> int:
    """What moves when the user's rows may have changed: their write sequence (one row read; SQLite's
    counter of other connections' commits has no equivalent across a server's connections)."""
    row = con.execute("SELECT last_id FROM feed").fetchone()
    return int(row[0]) if row else 0
