"""A server profile as an app that stays open uses it (the desktop): `RemoteApp` is `RemoteEngine` (the HTTP
API's client, engine/remote.py) with the rest of the facade's methods the desktop's bridge calls, so the bridge
opens a profile with `engine.open_profile` and never knows which of the two it has.

- **The settings** of the app (shortcut, appearance) are the profile folder's `settings.json`, as on a local
  profile; search and the language model are the server's.
- **The change feed** is the server's (`GET /changes`): a poll reports what any device wrote, and first
  sends what waits in the outbox, so writes made offline leave as soon as the server answers again.
- **`connection()`** says where the memory is, whether the server answered the last request, how long that
  took and how many writes wait in the outbox ("3 waiting to send").
- **What waits in the outbox shows where it will be**: a capture made offline is listed with the memories,
  marked waiting (`meta["waiting"]`: True, or the server's reason when it refused it); an edit or a forget
  waiting is shown done. When the server cannot be reached, a listing read before is shown again (with what
  waits) instead of nothing; coming back, everything is read again.
- The activity log, conflicts and a document's passages are the account's, read from the server (as the
  token's user); agents and tidying up (which flags the facts that contradict each other) run there, an
  agent's questions answered here. What has no door there (watched folders, keys and backups) is named by
  `unavailable()`, with the reason the app shows on that page.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .config import Settings, load_settings, settings_changes, update_settings
from .context import Changes
from .errors import Cancelled, EngineError, NotFound, UserError
from .feed import StoreChanges
from .memory_rules import EPISODIC_DISCOUNT, IMPORTANCE_BY_SOURCE
from .remote import (
    OUTBOX_FILE,
    Outbox,
    RemoteEngine,
    ServerUnreachable,
    TokenRefused,
)
from .settings_file import settings_stamp

log = logging.getLogger(__name__)

POLL_TIMEOUT = 5.0  # a poll of the change feed gives up after this (the next one tries again)
WAITING = "waiting"  # in a Memory's meta: this device wrote it, and it waits in the outbox
PAGES_KEPT = 16  # listings read last, shown again while the server cannot be reached
EDITABLE = ("text", "kind", "project", "importance", "at", "archived")


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
    token_refused: bool = False  # the server refused the token (revoked): writes wait until a new one is given


class RemoteApp(RemoteEngine):
    """A server profile for an app that stays open (see the module doc)."""

    key_source = "server"

    def __init__(self, server: Any, *, actor: str = "desktop", passphrase: str | None = None,
                 interactive: bool = False):
        super().__init__(server, door=actor, passphrase=passphrase, interactive=interactive)
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
        self._token_refused = False
        self._latency: float | None = None
        self._memories: int | None = None
        self._stats: Any = None  # the server's counts, read last
        self._sent = True  # the app sends the outbox on each poll (and after each write), not before a read
        self._pages: OrderedDict[tuple[Any, ...], Any] = OrderedDict()  # the listings read last (MemoryPage)
        self._pages_lock = threading.Lock()

    def unavailable(self) -> dict[str, str]:
        """What this profile does not offer, each with the reason a page shows in its place."""
        where = f"This profile keeps its memory on your server ({self.server.url})"
        return {
            "folders": "Watched folders feed a profile kept on this computer. Add files on the Documents page: "
                       "they are uploaded to your server.",
            "push": f"{where} already.",
        }

    # ---- what the app is told -----------------------------------------------------------------------------
    def on_change(self, listener: Callable[[Changes], None]) -> None:
        self._listeners.append(listener)

    def _emit(self, changes: Changes) -> None:
        for listener in list(self._listeners):
            try:
                listener(changes)
            except Exception:
                log.exception("change listener failed")

    def _reached(self, ok: bool, detail: str = "", latency: float | None = None, *, refused: bool = False) -> None:
        with self._state_lock:
            self._reachable, self._detail, self._token_refused = ok, detail, refused
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
                              latency_ms=self._latency, memories=self._memories, token_refused=self._token_refused)

    def _timed(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        t0 = time.perf_counter()
        try:
            answer = self.client.request(method, path, **kw)
        except (ServerUnreachable, TokenRefused) as e:
            self._reached(False, str(e), refused=isinstance(e, TokenRefused))
            raise
        self._reached(True, "", (time.perf_counter() - t0) * 1000)
        return answer

    def _read(self, what: str, method: str, path: str, **kw: Any) -> Any:
        try:
            body = super()._read(what, method, path, **kw)
        except (ServerUnreachable, TokenRefused) as e:
            self._reached(False, str(e), refused=isinstance(e, TokenRefused))
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
                self._reached(False, str(e), refused=isinstance(e, TokenRefused))
                raise
        params = {} if token is None else {"since": token}
        _status, body = self._timed("GET", "/changes", params=params, timeout=POLL_TIMEOUT)
        changes = [Changes(c["action"], set(c["memories"]), set(c["documents"]), bool(c["graph"]))
                   for c in body["changes"]]
        if was is False:
            changes.append(Changes("reconnected", {"*"}, {"*"}, True))
        return StoreChanges(int(body["token"]), changes)

    def renew_token(self, token: str, passphrase: str | None = None) -> Connection:
        """Connect this profile again with a new token (the old one was revoked): checked by the server first,
        kept as the old one was (keychain, or sealed under the profile's passphrase); the outbox and its writes
        stay, and leave with the next poll."""
        from .remote import check_server, client_for, connect_profile

        checked = check_server(self.server.url, token, fingerprint=self.server.fingerprint)
        profile = connect_profile(self.home, checked, token, passphrase=passphrase)
        old, self.server, self.client = self.client, profile, client_for(profile, self.door)
        old.close()
        self._reached(True)
        return self.connection()

    def send_outbox(self, progress: Callable[[int, int], None] | None = None) -> Any:
        sent = super().send_outbox(progress)
        if sent.delivered:
            self._emit(Changes("sent", {"*"}, {"*"}, True))
        return sent

    def _write(self, op: str, uid: str, target: str | None, payload: dict[str, Any],
               data: bytes | None = None) -> tuple[int, Any] | None:
        t0 = time.perf_counter()
        try:
            answer = super()._write(op, uid, target, payload, data)
        except TokenRefused as e:  # kept in the outbox, as offline; the app says that the token needs renewing
            self._reached(False, str(e), refused=True)
            return None
        if answer is None:
            self._reached(False, self.notices[-1] if self.notices else "")
            del self.notices[:]
        else:
            self._reached(True, "", (time.perf_counter() - t0) * 1000)
        return answer

    # ---- memories: each own write is announced, as the engine's are ----------------------------------------
    def remember(self, text: str, **kw: Any) -> Any:
        result = super().remember(text, **kw)
        if result.id in self.waiting:
            result = result.model_copy(update={"memory": result.memory.model_copy(
                update={"meta": {**result.memory.meta, WAITING: True}})})
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
        """A page of the server's listing, with what waits in the outbox shown as it will be; while the server
        cannot be reached, the same listing as last read (ServerUnreachable when it was never read)."""
        limit = min(limit, 500)
        key = (kind, project, archived, activity, limit, after)
        try:
            page = super().memory_page(kind=kind, project=project, archived=archived, activity=activity,
                                       limit=limit, after=after)
        except ServerUnreachable:
            with self._pages_lock:
                page = self._pages.get(key)
            if page is None:
                raise
        else:
            with self._pages_lock:
                self._pages[key] = page
                self._pages.move_to_end(key)
                while len(self._pages) > PAGES_KEPT:
                    self._pages.popitem(last=False)
        return self._with_waiting(page, first=after is None, kind=kind, project=project, archived=archived)

    def get(self, uid: str) -> Any:
        """A memory as the server has it, with an edit or a forget waiting in the outbox applied; one captured
        here that waits to be sent, as it will be stored."""
        writes = self._waiting_writes()
        for w in writes:
            if w.op == "remember" and w.uid == uid:
                return self._apply(self._kept(w), writes)
        try:
            memory = super().get(uid)
        except ServerUnreachable:
            with self._pages_lock:
                seen = [m for page in self._pages.values() for m in page.memories if m.id == uid]
            if not seen:
                raise
            memory = seen[-1]
        found = self._apply(memory, writes)
        if found is None:
            raise NotFound(f"No memory with id {uid}.")
        return found

    # ---- what waits in the outbox, shown where it will be -------------------------------------------------
    def _waiting_writes(self) -> list[Any]:
        if not (self.home / OUTBOX_FILE).exists():
            return []
        with contextlib.suppress(EngineError, OSError), Outbox(self.server) as box:
            return [w for w in box.waiting(with_data=False) if w.op in ("remember", "update", "forget")]
        return []

    @staticmethod
    def _kept(w: Any) -> Any:
        """A capture waiting in the outbox as the server will store it (the server's own defaults)."""
        from .models import Memory

        p = w.payload
        kind = p.get("kind") or "fact"
        made = datetime.fromtimestamp(w.made_at, UTC).isoformat(timespec="seconds")
        importance = p.get("importance")
        if importance is None:
            importance = IMPORTANCE_BY_SOURCE["user"] - (EPISODIC_DISCOUNT if kind == "episodic" else 0.0)
        return Memory.model_validate(dict(id=w.uid, kind=kind, text=p["text"], project=p.get("project"), importance=importance,
                      created_at=made, updated_at=made, at=p.get("at"), meta={WAITING: w.refused or True}))

    @staticmethod
    def _apply(memory: Any, writes: list[Any]) -> Any:
        """`memory` with the edits waiting for it applied (marked waiting); None when a forget of it waits."""
        for w in writes:
            if w.target != memory.id:
                continue
            if w.op == "forget":
                return None
            if w.op == "update":
                fields = {k: v for k, v in w.payload.items() if k in EDITABLE}
                memory = memory.model_copy(update={**fields, "meta": {**memory.meta, WAITING: w.refused or True}})
        return memory

    def _with_waiting(self, page: Any, *, first: bool, kind: str | None, project: str | None,
                      archived: bool | None) -> Any:
        writes = self._waiting_writes()
        if not writes:
            return page

        def listed(m: Any) -> bool:
            return ((kind is None or m.kind == kind)
                    and (project is None or (m.project or "") == project)
                    and (archived is None or m.archived == archived))

        new = [self._kept(w) for w in reversed(writes) if w.op == "remember"] if first else []
        out, added, gone = [], 0, 0
        for m in [*new, *page.memories]:
            shown = self._apply(m, writes)
            if shown is not None and listed(shown):
                out.append(shown)
                added += m in new
            elif m not in new:
                gone += 1
        total = None if page.total is None else max(0, page.total + added - gone)
        return page.model_copy(update={"memories": out, "total": total})

    def projects(self) -> list[str]:
        return list(self._read("Listing projects", "GET", "/projects"))

    def stats(self) -> Any:
        """The server's counts, with the captures waiting in the outbox counted (as the listing shows them);
        while the server cannot be reached, the counts read last (ServerUnreachable when never read)."""
        try:
            stats = super().stats()
        except ServerUnreachable:
            with self._state_lock:
                stats = self._stats
            if stats is None:
                raise
            stats = stats.model_copy(deep=True)
        else:
            with self._state_lock:
                self._stats = stats.model_copy(deep=True)
        stats.memories += sum(1 for w in self._waiting_writes() if w.op == "remember")
        with self._state_lock:
            self._memories = stats.memories
        return stats

    def resolve(self, uid: str, keep: str) -> Any:
        result = super().resolve(uid, keep)
        self._emit(Changes("resolve", {*result.kept, *result.archived}))
        return result

    def ingest(self, paths: Any, *, project: str | None = None, progress: Any = None, cancel: Any = None,
               **_: Any) -> list[Any]:
        results = super().ingest(paths, project=project)
        self._emit(Changes("ingest", set(), {"*"}))
        return results

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



# ---------------------------------------------------------------------------------------------------------
# moving a memory between this computer and a server, for the app (the CLI's push and pull)
# ---------------------------------------------------------------------------------------------------------
def _reporting(progress: Callable[[int, int], None] | None,
               cancel: threading.Event | None) -> Callable[[int, int], None]:
    """A progress callback that stops the move (Cancelled) once `cancel` is set: after the page being moved,
    which is stored whole; the move is resumable, so running it again finishes it."""
    def report(done: int, total: int) -> None:
        if progress is not None:
            progress(done, total)
        if cancel is not None and cancel.is_set():
            raise Cancelled()

    return report


def push_to_server(eng: Any, url: str, token: str, *, fingerprint: str | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   cancel: threading.Event | None = None) -> Any:
    """Send every memory of the local profile's engine `eng` into the account at `url` (engine.remote
    push_store: each with its id, so nothing is stored twice). The server is checked first as `connect`
    checks it. Returns what moved (remote.Moved)."""
    from .remote import ServerClient, check_server, pinned_context, push_store

    if eng.connection() is not None:
        raise UserError("This profile keeps its memory on a server already.")
    checked = check_server(url, token, fingerprint=fingerprint or None)
    client = ServerClient(checked.url, token, fingerprint=checked.fingerprint,
                          verify=pinned_context(checked.certificate) if checked.certificate else True,
                          door=getattr(eng, "actor", None))
    try:
        return push_store(eng, client, _reporting(progress, cancel))
    finally:
        client.close()


@dataclass(frozen=True)
class Copied:
    moved: Any  # remote.Moved
    home: Path
    recovery_key: str | None  # the new profile's, when this copy made it: shown to the user once
    cancelled: bool = False  # stopped by the user after `moved.memories` (run it again to complete it)


def copy_to_local(eng: Any, local: Any, *, progress: Callable[[int, int], None] | None = None,
                  cancel: threading.Event | None = None) -> Copied:
    """Copy every memory of the server profile's account (`eng`, a RemoteApp) into `local`, the engine of a
    profile kept on this computer (engine.remote pull_into: resumable, nothing stored twice); it is embedded
    when that profile is opened. A profile made just now has its recovery key in the answer (once), cancelled
    or not: a cancelled copy stays as far as it went, and running it again completes it."""
    from .remote import Moved, RemoteEngine, pull_into

    if not isinstance(eng, RemoteEngine):
        raise UserError("This profile keeps its memory on this computer already.")
    if local.connection() is not None:
        raise UserError("That profile lives on a server too: copy into a profile kept on this computer.")
    seen = [0]

    def counted(done: int, total: int) -> None:
        seen[0] = done
        if progress is not None:
            progress(done, total)

    with RemoteEngine(eng.server, door=eng.door) as remote:
        try:
            moved = pull_into(remote, local, _reporting(counted, cancel))
        except Cancelled:
            return Copied(Moved(records=seen[0]), local.home, local.recovery_key, cancelled=True)
    return Copied(moved, local.home, local.recovery_key)
