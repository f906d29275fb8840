"""The audit log: one row per write, with ids, counts and flags — never memory text."""

from __future__ import annotations

import time
from typing import Any

from .models import AuditEntry
from .store.sqlite import audit as rows
from .store.sqlite.db import Connection, Store


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
        rows.insert(con, time.time(), actor or self.actor, action, target, detail or {})

    def entries(self, *, limit: int = 200, offset: int = 0) -> list[AuditEntry]:
        return rows.entries(self.store.con, limit, offset)
