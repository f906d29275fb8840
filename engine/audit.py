"""The audit log: one row per write, with ids, counts and flags — never memory text."""

from __future__ import annotations

import json
import time
from typing import Any

from .db import Connection, Store
from .models import AuditEntry, iso


class AuditLog:
    """Records writes (inside the caller's transaction, or in one of its own) and reads them back."""

    def __init__(self, store: Store, actor: str):
        self.store = store
        self.actor = actor

    def record(self, action: str, target: str | None, detail: dict[str, Any] | None = None,
               con: Connection | None = None, actor: str | None = None) -> None:
        """Record a write. `detail` holds ids, counts and flags only — never memory text. Without `con`
        the entry is written in a transaction of its own."""
        if con is None:
            with self.store.write() as own:
                self.record(action, target, detail, con=own, actor=actor)
            return
        con.execute(
            "INSERT INTO audit(at, actor, action, target, detail) VALUES (?,?,?,?,?)",
            (time.time(), actor or self.actor, action, target, json.dumps(detail or {}, sort_keys=True)),
        )

    def entries(self, *, limit: int = 200, offset: int = 0) -> list[AuditEntry]:
        rows = self.store.con.execute(
            "SELECT id, at, actor, action, target, detail FROM audit ORDER BY id DESC LIMIT ? OFFSET ?",
            (limit, offset),
        ).fetchall()
        return [AuditEntry(id=r[0], at=iso(r[1]), actor=r[2], action=r[3], target=r[4], detail=json.loads(r[5]))
                for r in rows]
