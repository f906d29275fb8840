"""A server profile as an app that stays open uses it (the desktop): `RemoteApp` is `RemoteEngine` (the HTTP
API's client, engine/remote.py) with the rest of the facade's methods the desktop's bridge calls, so the bridge
opens a profile with `engine.open_profile` and never knows which of the two it has.

- **The settings** of the app (shortcut, appearance) are the profile folder's `settings.json`, as on a local
  profile; search and the language model are the server's.
- **The change feed** is the server's (`GET /changes`): a poll reports what any device wrote, and first
  sends what waits in the outbox, so writes made offline leave as soon as the server answers again.
- **`connection()`** says where the memory is, whether the server answered the last request, how long that
  took and how many writes wait in the outbox ("3 waiting to send").
- What has no door on the server (the graph browser, the activity log, tidying up, watched folders, keys and
  backups) says that it works on a local profile only, as the CLI does.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .config import Settings, load_settings, settings_changes, settings_stamp, update_settings
from .context import Changes
from .errors import EngineError, UserError
from .feed import StoreChanges
from .remote import (
    OUTBOX_FILE,
    Outbox,
    RemoteEngine,
    ServerUnreachable,
    TokenRefused,
)

log = logging.getLogger(__name__)

POLL_TIMEOUT = 5.0  # a poll of the change feed gives up after this (the next one tries again)


@dataclass(frozen=True)
class Connection:
    """Where a server profile's memory is and how it is reached, for people."""

    url: str
    fingerprint: str | None  # the pinned certificate's SHA-256 (None: verified by the system's authorities)
    reachable: bool | None  # None: not asked yet
    detail: str  # why not, when not reachable
    waiting: int  # writes kept in the outbox until the server takes them
    refused: int  # of those, the ones the server refused (they wait for `personal-llm outbox --drop`)
    latency_ms: float | None  # the last request that reached the server
    memories: int | None = None


class RemoteApp(RemoteEngine):
    """A server profile for an app that stays open (see the module doc)."""

    key_source = "server"

    def __init__(self, server: Any, *, actor: str = "desktop"):
        super().__init__(server)
        self.actor = actor
        self.paused = False
        self.store_path = server.url
        self._listeners: list[Callable[[Changes], None]] = []
        self._settings_stamp = settings_stamp(self.home)
        self.settings = load_settings(self.home)
        self._settings_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._reachable: bool | None = None
        self._detail = ""
        self._latency: float | None = None
        self._memories: int | None = None
        self._sent = True  # the app sends the outbox on each poll (and after each write), not before a read

    # ---- what the app is told -----------------------------------------------------------------------------
    def on_change(self, listener: Callable[[Changes], None]) -> None:
        self._listeners.append(listener)

    def _emit(self, changes: Changes) -> None:
        for listener in list(self._listeners):
            try:
                listener(changes)
            except Exception:
                log.exception("change listener failed")

    def _reached(self, ok: bool, detail: str = "", latency: float | None = None) -> None:
        with self._state_lock:
            self._reachable, self._detail = ok, detail
            if latency is not None:
                self._latency = latency

    def connection(self) -> Connection:
        waiting = refused = 0
        with contextlib.suppress(EngineError, OSError):
            if (self.home / OUTBOX_FILE).exists():
                with Outbox(self.server) as box:
                    waiting, refused = box.count()
        with self._state_lock:
            return Connection(url=self.server.url, fingerprint=self.server.fingerprint, reachable=self._reachable,
                              detail=self._detail, waiting=waiting + refused, refused=refused,
                              latency_ms=self._latency, memories=self._memories)

    def _timed(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        t0 = time.perf_counter()
        try:
            answer = self.client.request(method, path, **kw)
        except (ServerUnreachable, TokenRefused) as e:
            self._reached(False, str(e))
            raise
        self._reached(True, "", (time.perf_counter() - t0) * 1000)
        return answer

    def _read(self, what: str, method: str, path: str, **kw: Any) -> Any:
        try:
            body = super()._read(what, method, path, **kw)
        except (ServerUnreachable, TokenRefused) as e:
            self._reached(False, str(e))
            raise
        self._reached(True)
        return body

    # ---- the change feed and the outbox -------------------------------------------------------------------
    def changes_since(self, token: int | None = None, **_: Any) -> StoreChanges:
        """What any device wrote after `token`; first, what waits in the outbox is sent. Coming back after
        the server could not be reached, everything is reported changed (the views read again)."""
        was = self._reachable
        if self.connection().waiting:
            try:
                self.send_outbox()
            except (ServerUnreachable, TokenRefused) as e:
                self._reached(False, str(e))
                raise
        params = {} if token is None else {"since": token}
        _status, body = self._timed("GET", "/changes", params=params, timeout=POLL_TIMEOUT)
        changes = [Changes(c["action"], set(c["memories"]), set(c["documents"]), bool(c["graph"]))
                   for c in body["changes"]]
        if was is False:
            changes.append(Changes("reconnected", {"*"}, {"*"}, True))
        return StoreChanges(int(body["token"]), changes)

    def send_outbox(self, progress: Callable[[int, int], None] | None = None) -> Any:
        sent = super().send_outbox(progress)
        if sent.delivered:
            self._emit(Changes("sent", {"*"}, {"*"}, True))
        return sent

    def _write(self, op: str, uid: str, target: str | None, payload: dict[str, Any],
               data: bytes | None = None) -> tuple[int, Any] | None:
        t0 = time.perf_counter()
        answer = super()._write(op, uid, target, payload, data)
        if answer is None:
            self._reached(False, self.notices[-1] if self.notices else "")
            del self.notices[:]
        else:
            self._reached(True, "", (time.perf_counter() - t0) * 1000)
        return answer

    # ---- memories: each own write is announced, as the engine's are ----------------------------------------
    def remember(self, text: str, **kw: Any) -> Any:
        result = super().remember(text, **kw)
        self._emit(Changes("remember", {result.id}))
        return result

    def update(self, uid: str, **kw: Any) -> Any:
        memory = super().update(uid, **kw)
        self._emit(Changes("update", {uid}))
        return memory

    def forget(self, uid: str) -> Any:
        result = super().forget(uid)
        self._emit(Changes("forget", {uid}, {uid} if uid.startswith("doc_") else set(), True))
        return result

    def mark_used(self, uids: Iterable[str], *, how: str = "client") -> int:
        """Counted on the server when it is reached now; a use is not worth keeping in the outbox."""
        n = 0
        for uid in uids:
            with contextlib.suppress(UserError):
                self._timed("POST", f"/memory/{uid}/used", timeout=POLL_TIMEOUT)
                n += 1
        return n

    def memory_page(self, *, kind: str | None = None, project: str | None = None, archived: bool | None = False,
                    activity: bool | None = False, limit: int = 50, after: str | None = None, **_: Any) -> Any:
        page = super().memory_page(kind=kind, project=project, archived=archived, activity=activity,
                                   limit=min(limit, 500), after=after)
        return page

    def projects(self) -> list[str]:
        return list(self._read("Listing projects", "GET", "/projects"))

    def stats(self) -> Any:
        stats = super().stats()
        with self._state_lock:
            self._memories = stats.memories
        return stats

    def conflicts(self) -> list[Any]:
        return []  # resolved on a local profile, or through the server's own tools

    def ingest(self, paths: Any, *, project: str | None = None, progress: Any = None, cancel: Any = None,
               **_: Any) -> list[Any]:
        results = super().ingest(paths, project=project)
        self._emit(Changes("ingest", set(), {"*"}))
        return results

    def audit_runs(self, *, limit: int = 200) -> list[Any]:
        return []  # the server's activity log is its operator's (`personal-llm audit` there)

    # ---- the knowledge graph, read from the server ---------------------------------------------------------
    def graph_entities(self, limit: int = 30) -> list[tuple[str, str | None, int]]:
        found = self._read("The graph", "GET", "/graph/entities", params={"limit": limit})
        return [(e["name"], e.get("type"), int(e.get("facts", 0))) for e in found]

    def neighbours(self, entity: str, hops: int = 1) -> Any:
        from .graph import GraphView

        return GraphView.model_validate(self._read("The graph", "GET", "/graph/neighbours",
                                                   params={"entity": entity, "hops": hops}))

    def graph_around_memory(self, uid: str, hops: int = 1) -> Any:
        from .graph import GraphView

        return GraphView.model_validate(self._read("The graph", "GET", f"/memory/{uid}/graph",
                                                   params={"hops": hops}))

    def list_agents(self) -> list[Any]:
        return []  # an agent runs where its tools are: a local profile, or the server's /agent/run

    def watch_status(self) -> Any:
        from .watch import WatchStatus

        return WatchStatus(watching=False, folders=[])  # watched folders are a local profile's

    # ---- the search and language models are the server's -------------------------------------------------
    def embedding_status(self) -> tuple[str, str]:
        return "ready", f"Search runs on the server ({self.server.url})."

    def embedding_failure(self) -> str | None:
        return None

    def start_watching(self) -> None:
        return None

    def start_background(self) -> None:
        return None

    def wait_for_embeddings(self, timeout: float | None = None) -> bool:
        return True

    def health(self, *, refresh: bool = False) -> Any:
        from .models import HealthReport

        try:
            return HealthReport.model_validate(self._read("Checking the server", "GET", "/health"))
        except (ServerUnreachable, TokenRefused) as e:
            return HealthReport(embedding="failed", embedding_detail=str(e), llm_ok=False,
                                llm_detail="The server cannot be reached: recall and Ask wait for it.")

    # ---- the app's own settings (shortcut, appearance) -----------------------------------------------------
    def update_settings(self, changes: Any) -> Settings:
        with self._settings_lock:
            saved = update_settings(dict(changes), self.home)
            self._settings_stamp = settings_stamp(self.home)
            self.settings = saved
        return saved.model_copy(deep=True)

    def apply_settings(self, settings: Settings) -> Settings:
        return self.update_settings(settings_changes(self.settings, settings))

    def reload_settings(self) -> Settings | None:
        stamp = settings_stamp(self.home)
        if stamp == self._settings_stamp:
            return None
        with self._settings_lock:
            self._settings_stamp = stamp
            try:
                self.settings = load_settings(self.home)
            except UserError:
                return None
        return self.settings.model_copy(deep=True)

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_"):
            log.info("%s is not offered on a server profile", name)
        return super().__getattr__(name)

    @staticmethod
    def keychain_backend() -> tuple[str, bool]:
        from .keys import keychain_backend

        return keychain_backend()

