"""The audit log: one row per write, with ids, counts and flags — never memory text."""

from __future__ import annotations

import logging
import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from .errors import DiskFull, StoreReadOnly
from .store import Connection, Store
from .store import audit as rows

if TYPE_CHECKING:  # the boundary models (pydantic) load when one is made: a recall makes none
    from .models import AuditEntry, AuditRun

log = logging.getLogger(__name__)

# The programs of a device that may name themselves to a server (engine/remote.py's DOOR_HEADER), so that its
# user's log says who wrote as it would on that device: the app (its quick capture too), the command line, an
# assistant over MCP, a program of the SDK. A label within the token's own user's log, never a right.
DOORS = frozenset({"desktop", "cli", "mcp", "sdk"})
# the door of the request being answered (a server's API sets it for the request): recorded instead of the
# engine's own actor, unless an entry names its actor itself (consolidation, an agent's tool)
DOOR: ContextVar[str | None] = ContextVar("personal_llm_door", default=None)


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
            # an entry of its own follows what was done (an export, a backup, a change already committed): a
            # store that can't be written now (opened read-only, or the disk just filled) does not undo that
            if self.store.read_only is not None:
                log.info("not in the audit log (the store is read-only): %s", action)
                return
            try:
                with self.store.write() as own:
                    self.record(action, target, detail, con=own, actor=actor)
            except (DiskFull, StoreReadOnly) as e:
                log.warning("not in the audit log (%s): %s", type(e).__name__, action)
            return
        rows.insert(con, time.time(), actor or DOOR.get() or self.actor, action, target, detail or {})

    def entries(self, *, limit: int = 200, offset: int = 0) -> list[AuditEntry]:
        return rows.entries(self.store.con, limit, offset)

    def runs(self, *, limit: int = 200, keep: int = 50, gap: float = 300.0) -> list[AuditRun]:
        """The newest `limit` runs of the log: consecutive rows with the same actor, action and kind, at most
        `gap` seconds apart, each counted whole (it reads back until the run ends) with its `keep` newest rows.
        `totals` sums each count of the rows' details; a flag's total is how many rows had it."""
        from .models import AuditRun

        out: list[AuditRun] = []
        key: tuple[Any, ...] | None = None
        last_at = 0.0
        for at, e in rows.newest_first(self.store.con):
            k = (e.actor, e.action, (e.detail or {}).get("kind"), (e.target or "")[:4])  # mem_, doc_, chk_
            if key is None or k != key or last_at - at > gap:
                if len(out) == limit:
                    break
                out.append(AuditRun(count=0, newest_at=e.at, oldest_at=e.at, entries=[]))
                key = k
            run = out[-1]
            run.count += 1
            run.oldest_at = e.at
            if len(run.entries) < keep:
                run.entries.append(e)
            for name, value in (e.detail or {}).items():
                if isinstance(value, int):  # a flag counts the rows that have it
                    run.totals[name] = run.totals.get(name, 0) + int(value)
            last_at = at
        return out

