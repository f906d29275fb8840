"""Audit rows: one per write, ids and counts only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ...hits import iso
from .db import Connection

if TYPE_CHECKING:  # the boundary model (pydantic) loads when the log is read, not for each row written
    from ...models import AuditEntry


def insert(con: Connection, at: float, actor: str, action: str, target: str | None, detail: dict[str, Any]) -> None:
    con.execute("INSERT INTO audit(at, actor, action, target, detail) VALUES (?,?,?,?,?)",
                (at, actor, action, target, json.dumps(detail, sort_keys=True)))


def entries(con: Connection, limit: int, offset: int) -> list[AuditEntry]:
    rows = con.execute(
        "SELECT id, at, actor, action, target, detail FROM audit ORDER BY id DESC LIMIT ? OFFSET ?", (limit, offset),
    ).fetchall()
    from ...models import AuditEntry

    return [AuditEntry(id=r[0], at=iso(r[1]), actor=r[2], action=r[3], target=r[4], detail=json.loads(r[5]))
            for r in rows]


def newest_first(con: Connection) -> Iterator[tuple[float, AuditEntry]]:
    """Every audit row with its time in seconds, newest first, read as the caller goes (it stops when it has
    enough)."""
    from ...models import AuditEntry

    for r in con.execute("SELECT id, at, actor, action, target, detail FROM audit ORDER BY id DESC"):
        yield float(r[1]), AuditEntry(id=r[0], at=iso(r[1]), actor=r[2], action=r[3], target=r[4],
                                      detail=json.loads(r[5]))


def last_id(con: Connection) -> int:
    """The newest audit row's id: the store's write sequence (every write records one row)."""
    row = con.execute("SELECT max(id) FROM audit").fetchone()
    return int(row[0] or 0)


def since(con: Connection, after: int, limit: int) -> list[tuple[int, str, str, str | None]]:
    """(id, actor, action, target) of the audit rows after `after`, oldest first."""
    rows = con.execute("SELECT id, actor, action, target FROM audit WHERE id > ? ORDER BY id LIMIT ?",
                       (after, limit)).fetchall()
    return [(int(r[0]), str(r[1]), str(r[2]), r[3]) for r in rows]


def data_version(con: Connection) -> int:
    """SQLite's counter of commits made by *other* connections to this file, as seen by `con`."""
    return int(con.execute("PRAGMA data_version").fetchone()[0])
