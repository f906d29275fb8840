"""Audit rows: one per write, ids and counts only."""

from __future__ import annotations

import json
from typing import Any

from ..db import Connection
from ..models import AuditEntry, iso


def insert(con: Connection, at: float, actor: str, action: str, target: str | None, detail: dict[str, Any]) -> None:
    con.execute("INSERT INTO audit(at, actor, action, target, detail) VALUES (?,?,?,?,?)",
                (at, actor, action, target, json.dumps(detail, sort_keys=True)))


def entries(con: Connection, limit: int, offset: int) -> list[AuditEntry]:
    rows = con.execute(
        "SELECT id, at, actor, action, target, detail FROM audit ORDER BY id DESC LIMIT ? OFFSET ?", (limit, offset),
    ).fetchall()
    return [AuditEntry(id=r[0], at=iso(r[1]), actor=r[2], action=r[3], target=r[4], detail=json.loads(r[5]))
            for r in rows]
