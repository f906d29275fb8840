"""Watched folders: folders the user keeps indexed (`engine.watch`).

The user adds folders (`personal-llm watch add`, the app's Settings); each has a project, include and
exclude patterns and a pause switch. A watcher keeps the store following them:

- **Who watches.** The app and `personal-llm serve` while they run, or `personal-llm watch run` in the
  foreground. One process per profile watches: the watcher holds the profile's ``watch.lock``; another
  process that wants to watch waits (re-trying every few seconds) until the holder exits.
- **A rescan at start, events while running.** When the watcher starts, and whenever a folder is added,
  resumed or comes back (a USB stick plugged in again), it scans the folder; then file-system events
  (`watchfiles`, debounced) bring new, changed, moved and deleted files within seconds. A scan reads only
  files whose size or modification time differ from the stored document's, so a rescan of a folder that
  did not change reads nothing.
- **Each file goes through the normal ingest** (engine/ingest.py, with the folder's project): a changed
  file replaces its document (same id, unchanged passages keep their vectors); a renamed or moved file
  (also from one watched folder to another) keeps its document, memory and vectors, because files are
  ingested before gone files are forgotten and the ingest recognises a moved file by its content hash.
  A file deleted or moved out of the folder, or now excluded by its patterns, is forgotten with
  everything derived from it (engine/ingest.py `Documents.forget`).
- **Failed files.** A file that cannot be read is in the folder's errors; a document whose ingest failed
  (status ``failed``) is retried only when the file changes (its content hash), or when the user ingests
  it again. An empty file is skipped until it has content (editors create files empty, then write).
- **What is skipped.** Hidden files and folders (a name starting with ``.``), version-control and tool
  folders (``.git``, ``.hg``, ``.svn``, ``node_modules``, ``__pycache__``, ``.venv``, …), the profile's own
  folder, files that look like secrets (engine/pathpolicy.py ``SECRET_NAMES``), types the ingest does not
  read, and files over the size cap (``settings.max_file_mb``). Symbolic links are never followed: a link
  (to a file or a folder, inside the folder or out of it) is skipped, and an event whose path runs
  through one is dropped, so nothing outside the folder is ever read through it (and a link loop is
  harmless).
- **Crashes and missing folders.** A scan records when it started and when it finished; one that did not
  finish (the program was killed) is simply done again by the next start, and a half-ingested document
  is finished by the ingest (engine/ingest.py). A folder that is missing (an unmounted drive) is marked
  unavailable and its documents are kept; it is scanned again when it is back.
- **Patterns.** ``include`` and ``exclude`` are glob patterns (``*.md``, ``drafts``, ``notes/2019/*``).
  A pattern without ``/`` is matched against names: an exclude pattern against every folder and the file
  name on the way, an include pattern against the file name. A pattern with ``/`` is matched against
  the path relative to the watched folder. No include pattern: every supported file.

A watched folder is also an allowed folder for the HTTP API's path policy (engine/pathpolicy.py).
Nothing here logs file contents; the log carries counts and timings.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from . import erasure
from .audit import DOOR
from .context import Changes, Context
from .errors import NotFound, UserError
from .ingest import SKIP_DIRS, Documents, display_path
from .locking import SoleHolder
from .memory_rules import check_project
from .models import iso
from .parsers import SUPPORTED_EXTENSIONS
from .pathpolicy import SECRET_NAMES, PathPolicy
from .store import documents as doc_rows
from .store import watch as rows

log = logging.getLogger(__name__)

WATCH_LOCK = "watch.lock"
WATCH_ACTOR = "watch"  # the activity log's name for what the watcher writes
SKIP_FOLDERS = SKIP_DIRS | {".hg", ".svn", ".bzr", "_darcs", "CVS", ".tox", ".mypy_cache", ".pytest_cache",
                            ".idea", "$RECYCLE.BIN", "System Volume Information"}
QUIET_MS = 300
"""Events are gathered until no new one has come for this long (a save that writes in steps is one batch)…"""
DEBOUNCE_MS = 2000
"""…or for at most this long while they keep coming; then the batch is applied."""
POLL_MS = 1000
"""How often the watcher looks for folders added, removed, paused or gone while it watches."""
LOCK_RETRY_S = 3.0
"""How often a process that wants to watch tries again while another one holds the lock."""
BATCH_FILES = 64
MAX_ERRORS = 50


class FolderError(BaseModel):
    path: str
    error: str


class WatchedFolder(BaseModel):
    path: str
    project: str | None = None
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    paused: bool = False
    available: bool = Field(default=True, description="False when the folder was missing at the last look")
    files: int = Field(default=0, description="Documents from this folder that are searchable")
    pending: int = Field(default=0, description="Files found and not read yet, and documents being indexed")
    failed: int = Field(default=0, description="Documents that could not be ingested (status failed)")
    skipped: int = Field(default=0, description="Files left out at the last scan (empty or over the size cap)")
    errors: list[FolderError] = Field(default_factory=list, description="Files that could not be read, and why")
    added_at: str
    scanned_at: str | None = Field(default=None, description="When the last scan finished")
    scan_interrupted: bool = Field(default=False, description="A scan started and did not finish; the next "
                                                              "start of the watcher finishes it")


class WatchStatus(BaseModel):
    watching: bool = Field(description="A watcher runs for this profile (this program or another one)")
    folders: list[WatchedFolder]


class WatchRemoved(BaseModel):
    path: str
    forgotten: int = Field(default=0, description="Documents of the folder that were forgotten (with --forget)")
    kept: int = Field(default=0, description="Documents of the folder that stay in memory")


class ScanReport(BaseModel):
    path: str
    available: bool = True
    found: int = 0
    added: int = 0
    replaced: int = 0
    unchanged: int = 0
    forgotten: int = 0
    failed: int = 0
    skipped: int = 0


@dataclass
class _Folder:
    id: int
    path: str
    project: str | None
    include: list[str]
    exclude: list[str]
    paused: bool
    available: bool
    row: tuple


@dataclass
class _Plan:
    folder: _Folder
    scope: list[str] | None  # None: the whole folder
    report: ScanReport
    candidates: dict[str, tuple[int, float]] = field(default_factory=dict)
    errors: list[tuple[str, str]] = field(default_factory=list)


def _folder(row: tuple) -> _Folder:
    return _Folder(id=row[0], path=row[1], project=row[2], include=json.loads(row[3] or "[]"),
                   exclude=json.loads(row[4] or "[]"), paused=bool(row[5]), available=bool(row[6]), row=row)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(os.path.join(folder, ""))


def _real(path: str | Path) -> str:
    return os.path.realpath(os.path.abspath(os.path.expanduser(str(path))))


def _matches(pattern: str, rel: str, *, names: Iterable[str]) -> bool:
    if "/" in pattern:
        return fnmatch.fnmatchcase(rel, pattern.strip("/"))
    return any(fnmatch.fnmatchcase(n, pattern) for n in names)


def _patterns(values: Iterable[str] | None, what: str) -> list[str]:
    out = []
    for v in values or ():
        v = (v or "").strip()
        if not v:
            continue
        if len(v) > 200 or "\x00" in v:
            raise UserError(f"The {what} pattern {v[:40]!r}… is not a usable glob pattern.")
        out.append(v)
    return out


class _Either:
    """Set when any of the events is set (watchfiles' stop_event)."""

    def __init__(self, *events: threading.Event):
        self.events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


class Watch:
    """Watched folders: their configuration, scans and the watcher (`engine.watch`)."""

    def __init__(self, ctx: Context, documents: Documents):
        self.ctx = ctx
        self.documents = documents
        self._lock = SoleHolder(ctx.home / WATCH_LOCK)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._work = threading.Lock()  # one scan or batch of events at a time in this process
        self._profile = _real(ctx.home)
        self._secret_policy: PathPolicy | None = None

    # --- configuration -----------------------------------------------------------------------------------
    def add(self, path: str | Path, *, project: str | None = None, include: Iterable[str] | None = None,
            exclude: Iterable[str] | None = None) -> WatchedFolder:
        """Watch a folder (or change the project and patterns of one watched). The watcher scans it soon."""
        proj = check_project(project)
        if self.ctx.profile is None:
            raise UserError("A server watches no folders: its users' documents come by upload (docs/server.md).")
        real = _real(path)
        shown = display_path(path)
        if not os.path.isdir(real):
            raise UserError(f"{shown} is not a folder.")
        if real == os.path.abspath(os.sep) or real == str(Path(real).anchor):
            raise UserError(f"{shown} is the whole disk; watch the folders that hold your documents instead.")
        if _within(real, self._profile):
            raise UserError(f"{shown} is inside your Personal LLM profile, which is never indexed.")
        if (why := self._secrets().secret(real)) is not None:
            raise UserError(f"Not watched: {why}.")
        for other in self._folders():
            if other.path != real and (_within(real, other.path) or _within(other.path, real)):
                inner, outer = (real, other.path) if _within(real, other.path) else (other.path, real)
                raise UserError(f"{display_path(inner)} is inside {display_path(outer)}, and a folder can be "
                                "watched only once; remove one of them first (`personal-llm watch remove`).")
        with self.ctx.store.write() as con:
            rows.add(con, real, proj, json.dumps(_patterns(include, "include")),
                     json.dumps(_patterns(exclude, "exclude")), time.time())
            self.ctx.audit.record("watch_add", None, {"project": proj is not None}, con=con)
        self._changed()
        return self._status_of(self._get(real))

    def remove(self, path: str | Path, *, forget: bool = False) -> WatchRemoved:
        """Stop watching a folder. Its documents stay in memory unless ``forget``."""
        folder = self._get(_real(path), raw=path)
        with self.ctx.store.write() as con:
            rows.remove(con, folder.path)
            self.ctx.audit.record("watch_remove", None, {"forget": forget}, con=con)
        uids = [r[1] for r in doc_rows.under(self.ctx.con, folder.path)]
        forgotten = 0
        if forget:
            for uid in uids:
                forgotten += self._forget(uid)
            if forgotten:
                erasure.after_forget(self.ctx.store)
        self._changed()
        return WatchRemoved(path=folder.path, forgotten=forgotten, kept=len(uids) - forgotten)

    def set_paused(self, path: str | Path, paused: bool) -> WatchedFolder:
        """Pause (events and scans leave the folder alone) or resume (it is scanned again) a folder."""
        folder = self._get(_real(path), raw=path)
        with self.ctx.store.write() as con:
            rows.set_paused(con, folder.path, paused)
        self._changed()
        return self._status_of(self._get(folder.path))

    def status(self) -> WatchStatus:
        if self.ctx.profile is None:  # a server's user: no folders (`add`), no watcher, no lock file
            return WatchStatus(watching=False, folders=[])
        watching = self._lock.held or self._lock.held_elsewhere()
        return WatchStatus(watching=watching, folders=[self._status_of(f) for f in self._folders()])

    def paths(self) -> list[str]:
        """The watched folders (resolved), paused or not: allowed folders for the API's path policy."""
        return [f.path for f in self._folders()]

    # --- the watcher ---------------------------------------------------------------------------------------
    @property
    def watching(self) -> bool:
        """True while this process holds the profile's watch lock."""
        return self._lock.held

    def start(self) -> None:
        """Watch in a background thread (it waits for the lock while another process watches)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, args=(self._stop,), name="folder-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def run(self, stop: threading.Event, on_report: Callable[[ScanReport], None] | None = None) -> None:
        """Watch until ``stop`` is set: scans, then events (see the module doc). Blocks. What it writes is the
        watched folders' doing in the activity log (actor "watch"), not the program's that runs it: a file
        saved in a folder was "added by the HTTP API" under `serve`, and "by you" in the app."""
        door = DOOR.set(WATCH_ACTOR)
        try:
            while not stop.is_set():
                if not self._lock.try_acquire():
                    stop.wait(LOCK_RETRY_S)
                    continue
                try:
                    self._watch(stop, on_report)
                except Exception as e:  # the watcher must outlive a bad moment (a folder vanishing mid-call)
                    log.exception("folder watcher failed (%s); restarting", type(e).__name__)
                    stop.wait(LOCK_RETRY_S)
                finally:
                    self._lock.release()
        finally:
            DOOR.reset(door)

    def scan(self, paths: Iterable[str | Path] | None = None,
             cancel: threading.Event | None = None) -> list[ScanReport]:
        """Scan watched folders now (all that are not paused, or these), bringing the store up to date."""
        wanted = None if paths is None else {_real(p) for p in paths}
        folders = [f for f in self._folders() if not f.paused and (wanted is None or f.path in wanted)]
        return self._apply([_Plan(f, None, ScanReport(path=f.path)) for f in folders], cancel)

    # --- inside the watcher --------------------------------------------------------------------------------
    def _watch(self, stop: threading.Event, on_report: Callable[[ScanReport], None] | None) -> None:
        import watchfiles

        def tell(reports: list[ScanReport]) -> None:
            for report in reports:
                if on_report is not None:
                    on_report(report)

        scanned: set[str] = set()  # folders scanned since they were last (re)watched
        log.info("watching folders")
        while not stop.is_set():
            self._wake.clear()
            key = self._config_key()
            roots = [f for f in self._folders() if not f.paused and self._check_available(f)]
            scanned &= {f.path for f in roots}  # one paused, removed or gone is scanned again when back
            if not roots:
                while not stop.is_set() and not self._wake.is_set() and self._config_key() == key:
                    stop.wait(POLL_MS / 1000)
                continue
            by_path = {f.path: f for f in roots}
            fresh = [f for f in roots if f.path not in scanned]
            try:
                # the scan runs once the watch is set up (at its first yield), so that nothing changed
                # during the scan is missed: the watcher keeps what happens meanwhile for the next yield
                for changes in watchfiles.watch(
                        *by_path, watch_filter=self._event_wanted, debounce=DEBOUNCE_MS, step=QUIET_MS,
                        stop_event=_Either(stop, self._wake), rust_timeout=POLL_MS, yield_on_timeout=True,
                        raise_interrupt=False, ignore_permission_denied=True):
                    if fresh:
                        tell(self._apply([_Plan(f, None, ScanReport(path=f.path)) for f in fresh], stop))
                        scanned |= {f.path for f in fresh}
                        fresh = []
                    if changes:
                        tell(self._on_events(by_path, {p for _, p in changes}, stop))
                    if self._wake.is_set() or self._config_key() != key:
                        break
            except OSError as e:  # a folder went between the look and the watch
                log.info("watch restarted: %s", type(e).__name__)
                stop.wait(POLL_MS / 1000)

    def _on_events(self, by_path: dict[str, _Folder], changed: set[str],
                   stop: threading.Event) -> list[ScanReport]:
        scopes: dict[str, list[str]] = {}
        for p in changed:
            root = max((r for r in by_path if _within(p, r)), key=len, default=None)
            if root is not None:
                scopes.setdefault(root, []).append(p)
        plans = [_Plan(by_path[r], sorted(ps), ScanReport(path=r)) for r, ps in scopes.items()]
        return self._apply(plans, stop)

    def _event_wanted(self, _change: object, path: str) -> bool:
        if _within(path, self._profile):
            return False
        name = os.path.basename(path)
        return not (name.startswith(".") or name in SKIP_FOLDERS)

    def _config_key(self) -> tuple:
        return tuple((p, paused, os.path.isdir(p)) for p, paused in rows.config_key(self.ctx.con))

    def _check_available(self, folder: _Folder) -> bool:
        here = os.path.isdir(folder.path)
        if here != folder.available:
            with self.ctx.store.write() as con:
                rows.set_available(con, folder.id, here)
            folder.available = here
            log.info("watched folder %s", "is back" if here else "is unavailable; its documents are kept")
            self.ctx.changes.emit(Changes("watch"))
        return here

    # --- scanning ------------------------------------------------------------------------------------------
    def _apply(self, plans: list[_Plan], cancel: threading.Event | None) -> list[ScanReport]:
        """Find the files of each plan, ingest new and changed ones (all plans first, so that a file moved
        between folders is a move), then forget the documents whose files went."""
        with self._work:
            live = []
            for plan in plans:
                if not self._check_available(plan.folder):
                    plan.report.available = False
                    continue
                if plan.scope is None:
                    with self.ctx.store.write() as con:
                        rows.scan_started(con, plan.folder.id, time.time())
                self._find(plan)
                live.append(plan)
            for plan in live:
                self._ingest(plan, cancel)
            cancelled = cancel is not None and cancel.is_set()
            for plan in live:
                if cancelled:
                    break
                if self._check_available(plan.folder):
                    self._forget_gone(plan)
                self._record(plan)
            if any(p.report.forgotten for p in live):
                erasure.after_forget(self.ctx.store)
            if live:
                self.ctx.changes.emit(Changes("watch"))
            return [p.report for p in plans]

    def _find(self, plan: _Plan) -> None:
        folder = plan.folder
        max_bytes = int(self.ctx.settings.max_file_mb * 1024 * 1024)

        def consider(path: str, st: os.stat_result) -> None:
            if not stat.S_ISREG(st.st_mode) or self._excluded(folder, path):
                return
            if st.st_size == 0 or st.st_size > max_bytes:
                plan.report.skipped += 1
                return
            plan.candidates[path] = (st.st_size, st.st_mtime)

        def walk(top: str) -> None:
            try:
                with os.scandir(top) as it:
                    entries = list(it)
            except OSError as e:
                if not isinstance(e, FileNotFoundError):
                    plan.errors.append((display_path(top), f"can't be read: {e.strerror or e}"))
                return
            for entry in entries:
                if entry.name.startswith(".") or entry.name in SKIP_FOLDERS or _within(entry.path, self._profile):
                    continue
                try:
                    if entry.is_symlink():
                        continue  # never followed: neither out of the folder nor round in a loop
                    if entry.is_dir(follow_symlinks=False):
                        walk(entry.path)
                    elif Path(entry.name).suffix.lower() in SUPPORTED_EXTENSIONS:
                        consider(entry.path, entry.stat(follow_symlinks=False))
                except OSError as e:
                    plan.errors.append((display_path(entry.path), f"can't be read: {e.strerror or e}"))

        if plan.scope is None:
            walk(folder.path)
        else:
            for path in plan.scope:
                if not self._plain(folder, path):
                    continue
                try:
                    st = os.lstat(path)
                except OSError:
                    continue  # gone: the forget step sees to it
                if stat.S_ISDIR(st.st_mode):
                    if not self._hidden(folder, path):
                        walk(path)
                elif Path(path).suffix.lower() in SUPPORTED_EXTENSIONS:
                    consider(path, st)
        plan.report.found = len(plan.candidates)

    def _ingest(self, plan: _Plan, cancel: threading.Event | None) -> None:
        stored = {r[0]: r for r in doc_rows.under(self.ctx.con, plan.folder.path)}
        todo = []
        for path, (size, mtime) in plan.candidates.items():
            row = stored.get(path)
            if row is not None and row[2] in ("ready", "failed") and row[4] == size and row[5] == mtime:
                plan.report.unchanged += 1  # the same size and time: not read again
                continue
            todo.append(path)
        folder = plan.folder
        for start in range(0, len(todo), BATCH_FILES):
            if cancel is not None and cancel.is_set():
                return
            with self.ctx.store.write() as con:
                rows.set_queued(con, folder.id, len(todo) - start)
            batch = todo[start:start + BATCH_FILES]
            results = self.documents.ingest(batch, project=folder.project, cancel=cancel, retry_failed=False,
                                            allow=functools.partial(self._allowed, folder))
            for r in results:
                if r.status in ("added", "replaced", "unchanged"):
                    setattr(plan.report, r.status, getattr(plan.report, r.status) + 1)
                elif r.error != "cancelled":
                    plan.report.failed += 1
                    plan.errors.append((r.path or "", r.error or "could not be read"))
        with self.ctx.store.write() as con:
            rows.set_queued(con, folder.id, 0)

    def _forget_gone(self, plan: _Plan) -> None:
        folder = plan.folder
        for path, uid, *_ in doc_rows.under(self.ctx.con, folder.path):
            if plan.scope is not None and not any(_within(path, s) for s in plan.scope):
                continue
            if path in plan.candidates:
                continue
            gone = not os.path.lexists(path)
            if gone or (self._plain(folder, path) and self._excluded(folder, path)):
                plan.report.forgotten += self._forget(uid)

    def _forget(self, uid: str) -> int:
        try:
            self.documents.forget(uid)
        except NotFound:
            return 0
        return 1

    def _record(self, plan: _Plan) -> None:
        folder = plan.folder
        now = time.time()
        errors = [(p, e) for p, e in plan.errors]
        if plan.scope is not None:  # events: keep the errors of files these events did not touch
            old = [(p, e) for p, e in json.loads(folder.row[9] or "[]")
                   if not any(_within(p, s) for s in plan.scope)]
            errors = old + errors
        text = json.dumps(errors[-MAX_ERRORS:])
        with self.ctx.store.write() as con:
            if plan.scope is None:
                rows.scan_finished(con, folder.id, now, plan.report.skipped, text)
            else:
                rows.set_errors(con, folder.id, text)
        fresh = rows.by_path(self.ctx.con, folder.path)
        if fresh is not None:
            plan.folder.row = fresh

    # --- rules ---------------------------------------------------------------------------------------------
    def _plain(self, folder: _Folder, path: str) -> bool:
        """True when the path runs through no symbolic link below the folder (what an event names may)."""
        parent = os.path.dirname(path)
        return _within(path, folder.path) and _real(parent) == parent and not os.path.islink(path)

    def _hidden(self, folder: _Folder, path: str) -> bool:
        rel = os.path.relpath(path, folder.path)
        parts = [] if rel == "." else Path(rel).parts
        return (any(p.startswith(".") or p in SKIP_FOLDERS for p in parts) or _within(path, self._profile))

    def _excluded(self, folder: _Folder, path: str) -> bool:
        """True when the folder's rules leave this file out (not its size: that is checked when found)."""
        if self._hidden(folder, path) or Path(path).suffix.lower() not in SUPPORTED_EXTENSIONS:
            return True
        rel = Path(os.path.relpath(path, folder.path)).as_posix()
        parts = rel.split("/")
        name = parts[-1]
        if any(fnmatch.fnmatch(name.lower(), pat) for pat in SECRET_NAMES):
            return True
        if any(_matches(p, rel, names=parts) for p in folder.exclude):
            return True
        return bool(folder.include) and not any(_matches(p, rel, names=[name]) for p in folder.include)

    def _allowed(self, folder: _Folder, path: Path) -> str | None:
        """The ingest's path policy for a watched folder: inside it, through no symbolic link, and no hard
        link to a file of the places of secrets (engine/pathpolicy.py)."""
        p = str(path)
        if not _within(p, folder.path) or _real(p) != p:
            return f"{display_path(path)} leads outside the watched folder (a symbolic link); skipped"
        try:
            st = os.stat(p, follow_symlinks=False)
        except OSError:
            return None  # gone or unreadable: the read says so
        if (why := self._secrets().linked(path, st)) is not None:
            return why.replace("which the API never reads", "which is never indexed") + "; skipped"
        return None

    def _secrets(self) -> PathPolicy:
        if self._secret_policy is None:
            self._secret_policy = PathPolicy([], profile=self.ctx.home)
        return self._secret_policy

    # --- rows ----------------------------------------------------------------------------------------------
    def _folders(self) -> list[_Folder]:
        return [_folder(r) for r in rows.all_folders(self.ctx.con)]

    def _get(self, real: str, raw: str | Path | None = None) -> _Folder:
        row = rows.by_path(self.ctx.con, real)
        if row is None and raw is not None:
            row = rows.by_path(self.ctx.con, os.path.abspath(os.path.expanduser(str(raw))))
        if row is None:
            raise NotFound(f"{display_path(raw or real)} is not a watched folder (`personal-llm watch list` "
                           "lists them).")
        return _folder(row)

    def _status_of(self, folder: _Folder) -> WatchedFolder:
        counts = doc_rows.count_under(self.ctx.con, folder.path)
        r = folder.row
        errors = [FolderError(path=p, error=e) for p, e in json.loads(r[9] or "[]")]
        started, finished = r[11], r[12]
        return WatchedFolder(
            path=folder.path, project=folder.project, include=folder.include, exclude=folder.exclude,
            paused=folder.paused, available=folder.available, files=counts.get("ready", 0),
            pending=int(r[7]) + counts.get("pending", 0), failed=counts.get("failed", 0), skipped=int(r[8]),
            errors=errors, added_at=iso(r[10]) or "", scanned_at=iso(finished),
            scan_interrupted=started is not None and (finished is None or finished < started)
            and not self._lock.held)

    def _changed(self) -> None:
        self._wake.set()
        self.ctx.changes.emit(Changes("watch"))
