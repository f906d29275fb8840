"""The store's change feed across processes: what others (the CLI, the HTTP API, MCP, another engine on the
same file) wrote since a token, so an open app can follow the store whoever writes to it.

Every write records one audit row in its own transaction, so the audit log's last id is the store's write
sequence: a token is that id. Polling costs one read of `data_version` (SQLite's count of commits by other
connections, kept in memory: nothing is read from disk when nobody wrote) and, only when that moved, one
index lookup for the rows after the token, on a connection of the feed's own with a small page cache
(`Store.small`: SQLite empties a connection's cache when another has committed, at a cost that grows with
the cache). Writes by this engine's own actor are left out: they were announced in-process already
(`Engine.on_change`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .context import Changes
from .store import Store
from .store import audit as rows

DOCUMENT_ACTIONS = frozenset({"ingest", "ingest_failed", "ingest_abandoned", "forget_document", "move_document"})
QUIET_ACTIONS = frozenset({"use", "ask", "backup", "export", "key_notice", "compact"})  # nothing a view shows
MAX_ROWS = 2000  # more than this at once: a bulk write; the views reload everything anyway


@dataclass
class StoreChanges:
    """What others wrote after a token: `token` to pass next time; `changes` empty when nothing happened."""

    token: int
    changes: list[Changes] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(self.changes)


class OutsideWrites:
    """Reads the feed for one open engine (any thread; each thread's connection keeps its own version)."""

    def __init__(self, store: Store, actor: str) -> None:
        self.store = store
        self.actor = actor
        self._seen = threading.local()

    def token(self) -> int:
        return rows.last_id(self.store.small)

    def since(self, token: int | None, *, everyone: bool = False) -> StoreChanges:
        """What was written after `token`: by other actors, or by `everyone` (a server's client, whose own
        writes reach it through the same actor as another device's)."""
        con = self.store.small  # its cache is small: emptying it after another's commit costs nothing
        version = rows.data_version(con)
        if token is not None and getattr(self._seen, "version", None) == version:
            return StoreChanges(token)  # no other connection committed since this thread last looked
        self._seen.version = version
        if token is None:
            return StoreChanges(rows.last_id(con))
        found = rows.since(con, token, MAX_ROWS)
        if not found:
            return StoreChanges(token)
        last = found[-1][0]
        if len(found) == MAX_ROWS:
            last = rows.last_id(con)
        outside = found if everyone else [r for r in found if r[1] != self.actor]
        merged: dict[str, Changes] = {}
        for _id, _actor, action, target in outside:
            if action in QUIET_ACTIONS:
                continue
            c = merged.setdefault(action, Changes(action))
            if action in DOCUMENT_ACTIONS:
                c.documents.add(target or "*")
            else:
                c.memories.add(target or "*")
                c.graph = c.graph or action in ("extract_triples", "forget", "consolidate", "import")
        return StoreChanges(last, list(merged.values()))
