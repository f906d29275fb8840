"""Documents: files and texts ingested as chunks with provenance (`engine.documents`).

How a file becomes a document, and what the rules are:

- **Finding files.** Named files are taken as they are (an unsupported type fails with a readable error).
  Folders are walked in name order, following links, skipping hidden entries and ``.git``,
  ``node_modules``, ``__pycache__`` and ``.venv``; inside folders only supported types are taken. A link
  back into a folder being walked (a symlink loop), a broken link, a pipe or an unreadable file is reported
  as a ``failed`` result; the walk goes on. A file reached twice (through links) is ingested once. With
  OCR turned off (``settings.ocr.enabled``) pictures inside folders are passed over.
- **Identity.** A file document is keyed by its absolute path (links are not resolved: the path the user
  sees) and the SHA-256 of its bytes; an uploaded text (``ingest_text``) by its title and hash.
  * same path, same hash: ``unchanged`` (nothing is read beyond the hash, nothing written);
  * same path, new hash: ``replaced`` — the old chunks and everything derived from them go and the new
    ones come in one transaction; the document keeps its id. Vectors of chunks whose text did not change
    are kept, so editing a long file re-embeds only what changed;
  * new path, and a document with the same hash whose file no longer exists: the file was moved or
    renamed; the document's path is updated and the result is ``unchanged`` (no re-embedding);
  * the same content at two paths that both exist: two documents, because they are two files the user
    can edit or delete independently.
  The project is set when a document is added; re-ingesting an unchanged file into another project does
  not move it.
- **Crash safety.** The document row (status ``pending``) and all its chunks are written in one
  transaction, then the chunks are embedded in batches (a batch may hold chunks of several small files:
  the model is much faster on full batches), then the status flips to ``ready`` in a second
  transaction that also records the ingest as an episodic memory ("Ingested report.pdf (42 chunks)",
  tied to the document so it goes when the document goes). Recall, stats and ``list_documents`` see only
  ``ready`` documents, so a crash never shows half a document. A ``pending`` document carries its
  owner (``meta.owner``: the engine indexing it, which holds a lock of its own, engine/locking.py
  ``IngestOwner``); once that lock is free the ingest was interrupted, and the document is finished by
  the next ingest of the same file, or by :meth:`Documents.resume_pending_documents` (the app and
  ``serve`` call it after opening the store, ``personal-llm ingest`` before its files); until then stats
  names it. A document another engine is indexing now is left to it. Without an embedding model the document is ``ready`` at once and its
  chunks are embedded later by the background backfill.
- **Limits and giving up.** A document that would cost too much to read (engine/limits.py: a zip bomb,
  deep XML, too much text, more than ``limits.MAX_CHUNKS`` chunks) is ``failed`` before anything is
  written. A pending document counts its attempts (the first ingest is one, each resume another); after
  ``limits.MAX_RESUME_ATTEMPTS`` it is given up: its chunks go and its row stays with status ``failed`` and
  ``meta.failed`` = the reason (invisible to recall, never resumed), listed by
  ``list_documents(failed=True)`` and counted in stats. Only a new ingest of the file (or upload of the
  bytes) tries it again; a watched folder (engine/watch.py) ingests with ``retry_failed=False``, so it
  retries a failed file only once its content changes.
- **Names and policies.** A file name that is not valid UTF-8 fails alone (shown with ``\\xNN``
  escapes). ``allow`` (the HTTP API's path policy, engine/pathpolicy.py) is asked about every file and
  folder found; what it refuses is a ``failed`` result.
- **Cancellation** (the ``cancel`` event, checked between files and between embedding batches) never
  raises: files whose chunks were still waiting for vectors are rolled back (their pending rows are
  removed; one that was replacing an older version is removed too, since its old chunks are already
  gone), files already done stay, and the result list still has one entry per file found: the
  interrupted files and those not reached are ``failed`` with the error ``"cancelled"``.
- **Failures.** A file that cannot be read (too big, empty, damaged, encrypted, unsupported) is ``failed``
  with a message written for people and changes nothing; the other files go on. An unexpected error
  while embedding fails (and rolls back) the files with chunks in that batch; the others go on.

Document text is never logged or audited; audit entries carry ids, counts and flags.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import mimetypes
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from . import limits
from .chunking import ChunkDraft, TooManyChunks, chunk_document, make_token_counter
from .context import Changes, Context
from .embeddings import EmbeddingUnavailable
from .errors import NotFound, UserError
from .locking import IngestOwner
from .memories import Memories
from .memory_rules import check_project, new_uid
from .models import ForgetResult, iso
from .parse_worker import Readers
from .parsers import (
    IMAGE_EXTENSIONS,
    SUPPORTED_EXTENSIONS,
    DocumentError,
    OcrCancelled,
    OcrOptions,
    ParsedDocument,
    parse_text,
)
from .space import Touched
from .store import Connection, vectors
from .store import documents as rows
from .store import memories as memory_rows
from .store.types import ACTIVITY_SOURCE

log = logging.getLogger(__name__)

EMBED_BATCH_SIZE = 64
"""Chunks per model call while ingesting (see bench/ingest_throughput.py for the measurement)."""

SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv"})
CANCELLED = "cancelled"
_MB = 1024 * 1024

Stage = Literal["scanning", "parsing", "embedding", "done"]
Status = Literal["added", "unchanged", "replaced", "failed", "waiting"]  # waiting: in a server profile's outbox


class IngestProgress(BaseModel):
    """Where an ingest is. Files and bytes count over the whole run; chunks over the current file."""

    files_total: int
    files_done: int = 0
    chunks_done: int = Field(default=0, description="Chunks of the current file embedded (or stored) so far")
    chunks_total: int | None = Field(default=None, description="Chunks of the current file, once it is parsed")
    current_file: str | None = None
    bytes_done: int = Field(default=0, description="Bytes of the files done, plus the embedded part of the current one")
    bytes_total: int = 0
    stage: Stage = "scanning"
    pages_done: int = Field(default=0, description="Pages (or pictures) of the current file read by OCR so far")
    pages_total: int | None = Field(default=None, description="Pages of the current file that need OCR, once known")


class IngestResult(BaseModel):
    path: str | None = Field(description="Absolute path of the file; None for an uploaded text")
    document_id: str | None = None
    chunks: int = 0
    status: Status
    error: str | None = Field(default=None, description="Why it failed, written for people")


class Document(BaseModel):
    id: str
    path: str | None
    title: str
    mime: str
    chunks: int
    size: int
    project: str | None = None
    created_at: str
    updated_at: str
    error: str | None = Field(default=None, description="Why it could not be ingested (failed documents only)")
    ocr_pages: list[int] = Field(default_factory=list,
                                 description="Pages (or pictures) whose text was read by OCR: it may hold errors")


class Passage(BaseModel):
    """One passage of a document and where it is in it; read by id it also names its document."""

    id: str
    text: str
    position: int | None = None
    locator: str | None = Field(default=None, description='Where it is, e.g. "p. 4" or "Setup > Install"')
    page: int | None = None
    heading: str | None = None
    document_id: str | None = None
    document_title: str | None = None
    document_path: str | None = None


Allow = Callable[[Path], "str | None"]
"""A path policy: None when a file or folder may be read, else why not (see engine.pathpolicy)."""


# ---------------------------------------------------------------------------------------------------
# finding files
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Found:
    """A file to ingest, or a path that failed before it could be read (``error`` set)."""

    path: Path
    size: int = 0
    error: str | None = None


def _os_error(path: Path, e: OSError) -> str:
    name = display_path(path.name)
    if e.errno == errno.ELOOP:
        return f"{name} is a symbolic link loop; skipped"
    if isinstance(e, FileNotFoundError):
        return f"{name} doesn't exist (was it moved or deleted?)"
    return f"{name} can't be read: {e.strerror or e}"


def display_path(path: str | Path) -> str:
    """The path as text that can be stored, printed and sent as JSON: bytes of a file name that are not
    UTF-8 (which POSIX file systems allow) appear as ``\\xNN``."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(text).decode("utf-8", "backslashreplace")
    return text


def _name_problem(path: Path) -> str | None:
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return (f"{display_path(path.name)}: the name is not valid UTF-8 text, so it can't be stored; rename it "
                "and add it again")
    return None


def _human_size(n: int) -> str:
    return f"{n / _MB:.3g} MB" if n >= _MB else f"{max(1, round(n / 1024))} KB"


def _file_problem(path: Path, st: os.stat_result, max_bytes: int) -> str | None:
    """What stops this file from being read, checked before any byte is (a pipe would block)."""
    name, ext = path.name, path.suffix.lower()
    if ext not in SUPPORTED_EXTENSIONS:
        kind = f"{ext} files aren't" if ext else "Files without an extension aren't"
        return f"{name}: {kind} supported. Supported types: {', '.join(sorted(SUPPORTED_EXTENSIONS))}"
    if not stat.S_ISREG(st.st_mode):
        return f"{name} is not a regular file (a pipe, device or socket); skipped"
    if st.st_size == 0:
        return f"{name} is empty"
    if st.st_size > max_bytes:
        return f"{name} is too big ({_human_size(st.st_size)}); the limit is {_human_size(max_bytes)}"
    return None


def scan(paths: Sequence[str | Path], allow: Allow | None = None, *, pictures: bool = True) -> list[_Found]:
    """Files named and files in folders named, in a stable order; problems are entries with an error.

    Without ``pictures`` (OCR turned off) image files inside folders are passed over like unsupported
    types; an image named explicitly is still taken (and fails saying OCR is off).

    ``allow`` (a path policy) is asked about every file and every folder before it is read or walked;
    what it refuses is an entry with its reason as the error."""
    found: list[_Found] = []
    seen_files: set[str] = set()
    seen_dirs: set[tuple[int, int]] = set()

    def refused(path: Path) -> bool:
        problem = _name_problem(path) or (allow(path) if allow is not None else None)
        if problem is not None:
            found.append(_Found(path, error=problem))
        return problem is not None

    def add_file(path: Path, st: os.stat_result) -> None:
        real = os.path.realpath(path)
        if real not in seen_files:
            seen_files.add(real)
            if not refused(path):
                found.append(_Found(path, st.st_size))

    def walk(folder: Path, ancestors: frozenset[tuple[int, int]]) -> None:
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            found.append(_Found(folder, error=_os_error(folder, e)))
            return
        for entry in entries:
            if entry.name.startswith(".") or entry.name in SKIP_DIRS:
                continue
            path = Path(entry.path)
            supported = path.suffix.lower() in SUPPORTED_EXTENSIONS and (
                pictures or path.suffix.lower() not in IMAGE_EXTENSIONS)
            try:
                st = path.stat()
            except OSError as e:
                if e.errno == errno.ELOOP or supported:
                    found.append(_Found(path, error=_os_error(path, e)))
                continue
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if key in ancestors:
                    found.append(_Found(path, error=f"{display_path(path.name)} links back to a folder that "
                                                    "contains it (a symbolic link loop); skipped"))
                elif key not in seen_dirs:
                    seen_dirs.add(key)
                    if not refused(path):
                        walk(path, ancestors | {key})
            elif supported:
                if stat.S_ISREG(st.st_mode):
                    add_file(path, st)
                else:
                    found.append(_Found(path, error=f"{display_path(path.name)} is not a regular file (a pipe, "
                                                    "device or socket); skipped"))

    for raw in paths:
        path = Path(os.path.abspath(Path(raw).expanduser()))
        try:
            st = path.stat()
        except OSError as e:
            found.append(_Found(path, error=_os_error(path, e)))
            continue
        if stat.S_ISDIR(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if key not in seen_dirs:
                seen_dirs.add(key)
                if not refused(path):
                    walk(path, frozenset({key}))
        else:
            add_file(path, st)  # named explicitly: its type is checked when it is ingested
    return found


# ---------------------------------------------------------------------------------------------------
# progress
# ---------------------------------------------------------------------------------------------------
@dataclass
class _Pending:
    """A document whose rows are written and whose chunks wait for vectors before it becomes visible."""

    index: int  # where its result goes
    doc_id: int
    uid: str
    name: str  # file name (or title) for the ingest memory
    path: str | None
    action: Status
    size: int
    total: int  # chunks
    done: int  # chunks with a vector (all of them when there is no model: the backfill embeds them later)


class _Progress:
    """Builds the IngestProgress sequence: monotonic, ending with stage 'done' and everything counted."""

    def __init__(self, callback: Callable[[IngestProgress], None] | None, files_total: int, bytes_total: int):
        self.callback = callback
        self.state = IngestProgress(files_total=files_total, bytes_total=bytes_total)
        self._finished_bytes = 0

    def _send(self) -> None:
        if self.callback is not None:
            self.callback(self.state.model_copy())

    def scanned(self) -> None:
        self._send()

    def reading(self, found: _Found) -> None:
        self.state.stage = "parsing"
        self.state.current_file = display_path(found.path)
        self.state.chunks_done, self.state.chunks_total = 0, None
        self.state.pages_done, self.state.pages_total = 0, None
        self._send()

    def ocr_page(self, done: int, total: int) -> None:
        """A page of the current file was read by OCR (slow: about a second a page)."""
        self.state.pages_done, self.state.pages_total = done, total
        self._send()

    def embedding(self, current: _Pending, queue: list[_Pending]) -> None:
        self.state.stage = "embedding"
        self.state.current_file = current.path or current.name
        self.state.chunks_done, self.state.chunks_total = current.done, current.total
        partial = sum(p.size * p.done // p.total for p in queue if p.total)
        self.state.bytes_done = max(self.state.bytes_done, self._finished_bytes + partial)
        self._send()

    def finished(self, size: int) -> None:
        self._finished_bytes += size
        self.state.files_done += 1
        self.state.bytes_done = max(self.state.bytes_done, self._finished_bytes)

    def done(self) -> None:
        self.state.stage = "done"
        self.state.current_file = None
        self.state.bytes_done = self.state.bytes_total
        self._send()


class _Cancelled(Exception):
    """The cancel event was set while a file was being ingested."""


def _action(meta: str) -> Status:
    """What a pending document was doing when it was written: adding a file or replacing an older version."""
    return "replaced" if json.loads(meta or "{}").get("action") == "replaced" else "added"


def _failure(meta: str) -> str | None:
    """Why a document could not be ingested, for one given up (status 'failed', the reason in meta.failed)."""
    failed = json.loads(meta or "{}").get("failed")
    return str(failed) if failed else None


def _chunks(parsed: ParsedDocument, name: str) -> list[ChunkDraft]:
    """The document's chunks, or a DocumentError once it is known to need more than limits.MAX_CHUNKS."""
    try:
        return chunk_document(parsed, count_tokens=make_token_counter(), max_chunks=limits.MAX_CHUNKS)
    except TooManyChunks as e:
        raise DocumentError(str(limits.too_many_chunks(name, e.at_least))) from None


def _upload_name(filename: str) -> str:
    """The last component of a client's file name, checked: a name for messages and a type to parse by."""
    name = display_path((filename or "").replace("\\", "/").rsplit("/", 1)[-1]).strip()
    if not name or name in (".", "..") or "\x00" in name or len(name) > 255:
        raise DocumentError("An uploaded file needs a file name (with its extension, e.g. notes.pdf).")
    if Path(name).suffix.lower() not in SUPPORTED_EXTENSIONS:
        ext = Path(name).suffix.lower()
        kind = f"{ext} files aren't" if ext else "Files without an extension aren't"
        raise DocumentError(f"{name}: {kind} supported. Supported types: {', '.join(sorted(SUPPORTED_EXTENSIONS))}")
    return name


def _private_tmp() -> str | None:
    """Memory-backed /dev/shm when it is usable (an upload's bytes then never reach a disk), else the default."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------------
# the engine's methods
# ---------------------------------------------------------------------------------------------------


class Documents:
    """Ingest files and texts as documents of chunks; list and forget them (`engine.documents`)."""

    def __init__(self, ctx: Context, memories: Memories):
        self.ctx = ctx
        self.space = ctx.space
        self.memories = memories
        self.readers = Readers()  # in place, or in helper processes (Engine.start_background)
        self.owner = IngestOwner(ctx.home)  # marks the pending documents this engine is indexing

    def ingest(self, paths: Sequence[str | Path], *, project: str | None = None,
               progress: Callable[[IngestProgress], None] | None = None,
               cancel: threading.Event | None = None, max_mb: float | None = None,
               allow: Allow | None = None, retry_failed: bool = True) -> list[IngestResult]:
        """Ingest files and folders; one result per file found, in order (see the module doc for the rules).

        Files are read one by one, but their chunks are embedded in full batches that may span several
        small files (the model is much faster that way); each document becomes visible as soon as all its
        chunks have vectors. ``max_mb`` overrides ``settings.max_file_mb`` for this call. ``allow`` is a
        path policy (the HTTP API's, see engine.pathpolicy): what it refuses is a failed result. Never
        raises for a bad file or a cancellation; those are results. With ``retry_failed`` False, a file
        whose document failed before and whose content is the same is not tried again (a failed result
        with the stored reason).
        """
        if any(not str(p).strip() for p in paths):  # Path("") is the current folder: a script's empty variable
            raise UserError("An empty path was given to ingest; name a file or a folder.")
        if max_mb is not None and not 0 < max_mb < float("inf"):
            raise UserError("The size limit must be a positive number of MB.")
        project = check_project(project)
        max_bytes = int((self.ctx.settings.max_file_mb if max_mb is None else max_mb) * _MB)
        files = scan(paths, allow, pictures=self.ctx.settings.ocr.enabled)
        with self.owner.busy():
            return self._ingest_files(files, project, max_bytes, retry_failed, progress, cancel)

    def _ingest_files(self, files: list[_Found], project: str | None, max_bytes: int, retry_failed: bool,
                      progress: Callable[[IngestProgress], None] | None,
                      cancel: threading.Event | None) -> list[IngestResult]:
        tracker = _Progress(progress, len(files), sum(f.size for f in files))
        tracker.scanned()
        results: list[IngestResult | None] = [None] * len(files)
        queue: list[_Pending] = []
        try:
            for i, found in enumerate(files):
                if cancel is not None and cancel.is_set():
                    raise _Cancelled
                tracker.reading(found)
                ocr = OcrOptions(enabled=self.ctx.settings.ocr.enabled, progress=tracker.ocr_page, cancel=cancel)
                try:
                    out = self._prepare_file(i, found, project, max_bytes, retry_failed, ocr)
                except OcrCancelled:
                    raise _Cancelled from None
                if isinstance(out, IngestResult):
                    results[i] = out
                    tracker.finished(found.size)
                else:
                    queue.append(out)
                    self._drain(queue, results, tracker, cancel, full_batches_only=True)
            self._drain(queue, results, tracker, cancel, full_batches_only=False)
        except _Cancelled:
            for p in queue:
                self._discard(p.doc_id, p.uid, CANCELLED)
        self._embed_ingest_memories(sum(r is not None and r.status in ("added", "replaced") for r in results))
        final = []
        for found, r in zip(files, results, strict=True):
            if r is None:
                r = IngestResult(path=display_path(found.path), status="failed", error=CANCELLED)
                tracker.finished(found.size)
            final.append(r)
        tracker.done()
        return final

    def ingest_text(self, text: str, title: str, *, project: str | None = None) -> IngestResult:
        """Ingest pasted or uploaded text as a document without a path, keyed by title and content hash."""
        title = " ".join((title or "").split()) or "Untitled"
        project = check_project(project)
        size = len((text or "").encode("utf-8"))
        limit = int(self.ctx.settings.max_file_mb * _MB)
        if not (text or "").strip():  # refused before anything is kept, as an empty file is
            return IngestResult(path=None, status="failed", error=f"{title} is empty")
        if size > limit:
            return IngestResult(path=None, status="failed",
                                error=f"{title} is too big ({_human_size(size)}); the limit is {_human_size(limit)}")
        return self._ingest_unfiled(title, title, _sha256_text(text or ""), size, project,
                                    lambda: parse_text(text, title))

    def ingest_upload(self, data: bytes, filename: str, *, project: str | None = None) -> IngestResult:
        """Ingest a file's bytes sent by a client (the HTTP API's upload form): parsed like a file of that
        name, stored as a document without a path, keyed by its content hash. The bytes are written to a
        private temporary file (in memory-backed /dev/shm where there is one) only while they are parsed."""
        name = _upload_name(filename)
        project = check_project(project)
        size, limit = len(data), int(self.ctx.settings.max_file_mb * _MB)
        if size == 0:  # as a file named on disk: refused before anything is kept (`_file_problem`)
            return IngestResult(path=None, status="failed", error=f"{name} is empty")
        if size > limit:
            return IngestResult(path=None, status="failed",
                                error=f"{name} is too big ({_human_size(size)}); the limit is {_human_size(limit)}")

        def parse() -> ParsedDocument:
            with tempfile.TemporaryDirectory(prefix="personal-llm-upload-", dir=_private_tmp()) as tmp:
                path = Path(tmp) / name
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                return self.readers.parse(path, max_bytes=limit,
                                          ocr=OcrOptions(enabled=self.ctx.settings.ocr.enabled))

        return self._ingest_unfiled(None, name, hashlib.sha256(data).hexdigest(), size, project, parse)

    def _ingest_unfiled(self, key_title: str | None, name: str, chash: str, size: int, project: str | None,
                        parse: Callable[[], ParsedDocument]) -> IngestResult:
        """Ingest a document without a path: unchanged when the same content (and key title) is stored."""
        with self.owner.busy():
            return self._ingest_unfiled_now(key_title, name, chash, size, project, parse)

    def _ingest_unfiled_now(self, key_title: str | None, name: str, chash: str, size: int, project: str | None,
                            parse: Callable[[], ParsedDocument]) -> IngestResult:
        existing = rows.by_content(self.ctx.con, chash, key_title)
        given_up = existing is not None and existing[2] == "failed"
        if existing is not None and not given_up:
            if existing[2] == "ready":
                self._put_in_project(existing[0], existing[1], project)
                return IngestResult(path=None, document_id=existing[1], chunks=existing[3], status="unchanged")
            pending = self._pending(0, existing[0], existing[1], name, None, _action(existing[4]), size)
        else:
            try:
                parsed = parse()
                drafts = _chunks(parsed, name)
            except DocumentError as e:
                if given_up:
                    assert existing is not None
                    self._give_up(existing[0], existing[1], str(e), "unreadable")
                    uid = existing[1]
                else:
                    uid = self._record_unreadable(None, key_title or name, chash, size, None, project, str(e))
                return IngestResult(path=None, document_id=uid, status="failed", error=str(e))
            doc_id, uid = self._write_rows(existing[0] if given_up and existing else None, None, parsed, drafts,
                                           chash, size, None, project, "added")
            pending = self._pending(0, doc_id, uid, name, None, "added", size)
        results: list[IngestResult | None] = [None]
        self._drain([pending], results, _Progress(None, 1, size), None, full_batches_only=False)
        assert results[0] is not None
        self._embed_ingest_memories(int(results[0].status == "added"))
        return results[0]

    def interrupted(self) -> list[tuple]:
        """The pending rows (rows.pending) whose indexing was interrupted: their process ended (killed, a
        crash) before they were ready. Those another open engine is indexing now are not among them."""
        out = []
        for row in rows.pending(self.ctx.con):
            owner = json.loads(row[5] or "{}").get("owner")
            if not self.owner.alive(owner if isinstance(owner, str) else None):
                out.append(row)
        return out

    def resume_pending_documents(self, *, cancel: threading.Event | None = None) -> list[IngestResult]:
        """Finish documents an interrupted ingest left half-indexed (embed what is missing, then mark them
        ready): the app and `serve` call it after opening the store (off the UI thread), `personal-llm
        ingest` before its own files. Documents another program is indexing now are left to it.
        Cancelling leaves the rest pending."""
        queue: list[_Pending] = []
        given_up: list[IngestResult] = []
        gone: set[str] = set()
        for doc_id, uid, path, title, size, meta, chunks in self.interrupted():
            name = Path(path).name if path else title
            fields = json.loads(meta or "{}")
            attempts, previous = int(fields.get("attempts", 1)), fields.get("owner")
            if chunks > limits.MAX_CHUNKS:
                reason = str(limits.too_many_chunks(name))
            elif attempts >= limits.MAX_RESUME_ATTEMPTS:
                reason = (f"{name} could not be indexed: it was interrupted {attempts} times (the program stopped "
                          "while indexing it). Add it again to retry, or forget it.")
            else:
                with self.ctx.store.write() as con:  # counted before the work, so a crash during it counts too
                    if not rows.claim(con, doc_id, attempts + 1, self.owner.hold(), previous):
                        continue  # another program took it over first
                if isinstance(previous, str):
                    gone.add(previous)
                queue.append(self._pending(len(queue), doc_id, uid, name, path, _action(meta), size))
                continue
            self._give_up(doc_id, uid, reason, "too_many_chunks" if chunks > limits.MAX_CHUNKS else "interrupted")
            given_up.append(IngestResult(path=path, document_id=uid, status="failed", error=reason))
        for token in gone:
            self.owner.forget(token)
        results: list[IngestResult | None] = [None] * len(queue)
        try:
            with self.owner.busy():
                self._drain(queue, results, _Progress(None, len(queue), 0), cancel, full_batches_only=False)
        except _Cancelled:
            pass
        done = [r for r in results if r is not None]
        self._embed_ingest_memories(sum(r.status != "failed" for r in done))
        return given_up + done

    def list_documents(self, project: str | None = None, *, failed: bool = False) -> list[Document]:
        """Documents that are ready (searchable), most recently added or updated first. With ``failed``,
        instead the documents that could not be ingested and will not be retried on their own (each
        with its ``error``); re-ingesting the file retries, forgetting it removes the entry."""
        scope = (project or "").strip() or None
        if failed:
            return [_document(r[:-1], _failure(r[-1]))
                    for r in rows.given_up(self.ctx.con, scope, any_project=project is None)]
        return [_document(r) for r in rows.ready(self.ctx.con, scope, any_project=project is None)]

    @staticmethod
    def notes(failed: int, interrupted: int = 0) -> list[str]:
        """Lines for stats: the documents that could not be ingested (`failed` of them) and those an
        interrupted ingest left half-indexed."""
        out = []
        if interrupted:
            out.append(f"{interrupted} document{'s were' if interrupted != 1 else ' was'} left half-indexed by an "
                       "ingest that was interrupted (not searchable yet); the next `personal-llm ingest`, or the "
                       "app or `personal-llm serve` when it starts, finishes them")
        if failed:
            out.append(f"{failed} document{'s' if failed != 1 else ''} could not be ingested (`personal-llm "
                       "documents --failed` says why); add the file again to retry, or forget it")
        return out

    def count_failed(self) -> int:
        return rows.count_given_up(self.ctx.con)

    def passage(self, uid: str) -> Passage:
        """A chunk (chk_…) of a ready document, e.g. the source of a graph fact or an answer."""
        r = rows.chunk_by_uid(self.ctx.con, uid)
        if r is None:
            raise NotFound(f"No passage {uid} (its document may have been forgotten).")
        return Passage(id=r[0], text=r[1], locator=r[2] or "", page=r[3], heading=r[4], document_id=r[5],
                       document_title=r[6], document_path=r[7])

    def get_document(self, uid: str) -> Document:
        row = rows.ready_by_uid(self.ctx.con, uid)
        if row is None:
            raise NotFound(f"No document with id {uid}.")
        return _document(row)

    def passages(self, uid: str, *, offset: int = 0, limit: int = 2000) -> list[Passage]:
        """A ready document's passages in reading order, `limit` of them from `offset`, each with where it
        is (page, heading)."""
        self.get_document(uid)  # NotFound for an unknown id
        return [Passage(id=r[0], position=r[1], text=r[2], locator=r[3] or None, page=r[4], heading=r[5])
                for r in rows.passages(self.ctx.con, uid, max(0, offset), max(1, limit))]

    def forget(self, uid: str) -> ForgetResult:
        """Delete a document, its chunks and everything derived from them, in one transaction."""
        with self.ctx.mutation() as (con, touched):
            doc_id = rows.row_id(con, uid)
            if doc_id is None:
                raise NotFound(f"No document with id {uid}.")
            removed = self.delete_document_rows(con, doc_id, touched)
            self.ctx.audit.record("forget_document", uid, removed, con=con)
        self.ctx.changes.emit(Changes("forget", documents={uid}, graph=True))
        return ForgetResult(id=uid, type="document", removed=removed)

    def delete_document_rows(self, con: Connection, doc_id: int, touched: Touched, *,
                             keep_document: bool = False) -> dict[str, int]:
        """Remove a document's chunks (their vectors, FTS rows and edges by trigger/cascade) and the memories
        derived from it. With keep_document the document row stays (a changed file being replaced)."""
        mem_ids = rows.derived_memories(con, doc_id)
        derived = self.memories.delete_memories(con, mem_ids, touched) if mem_ids else {"memories": 0}
        chunk_rows, edges, ends = rows.delete_contents(con, doc_id, keep_document=keep_document)
        chunk_ids = [r[0] for r in chunk_rows]
        answers = memory_rows.scrub_transcripts(con, [r[1] for r in chunk_rows])
        nodes = memory_rows.drop_orphan_nodes(con, ends)  # among the ends of its edges: not every node
        touched.deleted("chunks", chunk_ids)
        return {"chunks": len(chunk_ids), "edges": edges, "memories": derived["memories"], "nodes": nodes,
                "answers": answers + derived.get("answers", 0)}

    # --- one file --------------------------------------------------------------------------------------
    def _prepare_file(self, index: int, found: _Found, project: str | None, max_bytes: int,
                      retry_failed: bool = True, ocr: OcrOptions | None = None) -> IngestResult | _Pending:
        """Settle a file at once (failed, unchanged, moved) or write its rows and return it to be embedded."""
        path = found.path
        failed = IngestResult(path=display_path(path), status="failed")
        if found.error is not None:
            return failed.model_copy(update={"error": found.error})
        try:
            st = path.stat()
            problem = _file_problem(path, st, max_bytes)
            if problem is not None:
                return failed.model_copy(update={"error": problem})
            chash = _sha256_file(path)
        except OSError as e:
            return failed.model_copy(update={"error": _os_error(path, e)})
        existing = rows.by_path(self.ctx.con, str(path))
        given_up = existing is not None and existing[2] == "failed"  # a new ingest tries again
        if given_up and not retry_failed and existing is not None and existing[3] == chash:
            return failed.model_copy(update={"error": _failure(existing[5]) or "could not be ingested",
                                             "document_id": existing[1]})
        if existing is not None and existing[3] == chash and not given_up:
            if existing[2] == "ready":
                self._put_in_project(existing[0], existing[1], project)
                return IngestResult(path=str(path), document_id=existing[1], chunks=existing[4], status="unchanged")
            if existing[4] > limits.MAX_CHUNKS:  # written before the limit existed
                reason = str(limits.too_many_chunks(path.name))
                self._give_up(existing[0], existing[1], reason, "too_many_chunks")
                return failed.model_copy(update={"error": reason, "document_id": existing[1]})
            return self._pending(index, existing[0], existing[1], path.name, str(path), _action(existing[5]),
                                 st.st_size)
        if existing is None:
            moved = self._find_moved(chash)
            if moved is not None:
                return self._move(moved, path, st)
        try:
            parsed = self.readers.parse(path, max_bytes=max_bytes, ocr=ocr)
            drafts = _chunks(parsed, path.name)
        except DocumentError as e:
            if given_up:
                assert existing is not None
                self._give_up(existing[0], existing[1], str(e), "unreadable")
                return failed.model_copy(update={"error": str(e), "document_id": existing[1]})
            if existing is None:  # listed with the reason (`documents --failed`), tried again on the next ingest
                uid = self._record_unreadable(str(path), path.name, chash, st.st_size, st.st_mtime, project, str(e))
                return failed.model_copy(update={"error": str(e), "document_id": uid})
            return failed.model_copy(update={"error": str(e)})  # the version already stored stays
        action: Status = "replaced" if existing is not None and not given_up and (
            existing[2] == "ready" or _action(existing[5]) == "replaced") else "added"
        doc_id, uid = self._write_rows(existing[0] if existing else None, str(path), parsed, drafts, chash,
                                       st.st_size, st.st_mtime, project, action)
        return self._pending(index, doc_id, uid, path.name, str(path), action, st.st_size)

    def _pending(self, index: int, doc_id: int, uid: str, name: str, path: str | None, action: Status,
                 size: int) -> _Pending:
        total, missing, status = rows.progress(self.ctx.con, doc_id)
        done = total if status == "ready" else total - missing  # ready at once: no model when it was written
        return _Pending(index, doc_id, uid, name, path, action, size, total, done)

    def _find_moved(self, chash: str) -> tuple[int, str, str, int] | None:
        for doc_id, uid, old, chunks in rows.ready_with_content(self.ctx.con, chash):
            if not os.path.lexists(old):
                return doc_id, uid, old, chunks
        return None

    def _move(self, moved: tuple[int, str, str, int], path: Path, st: os.stat_result) -> IngestResult:
        doc_id, uid, _, chunks = moved
        with self.ctx.mutation() as (con, _touched):
            rows.move(con, doc_id, str(path), st.st_mtime, time.time())
            self.ctx.audit.record("move_document", uid, {"chunks": chunks}, con=con)
        self.ctx.changes.emit(Changes("ingest", documents={uid}))
        return IngestResult(path=str(path), document_id=uid, chunks=chunks, status="unchanged")

    def _write_rows(self, doc_id: int | None, path: str | None, parsed: ParsedDocument, drafts: list[ChunkDraft],
                    chash: str, size: int, mtime: float | None, project: str | None,
                    action: Status) -> tuple[int, str]:
        """Write the document (pending, or ready when there is no embedding model) and all its chunks in
        one transaction; replacing, drop the old chunks and what was derived from them. (row id, uid)."""
        hashes = [_sha256_text(d.text) for d in drafts]
        embedding = self.space.ensure()
        status = "pending" if embedding else "ready"
        now = time.time()
        meta = json.dumps({**parsed.meta, "action": action, "attempts": 1, "owner": self.owner.hold()} if embedding
                          else parsed.meta)
        with self.ctx.mutation() as (con, touched):
            kept = rows.kept_vectors(con, doc_id) if embedding and doc_id is not None else {}
            if doc_id is None:
                uid = new_uid("doc")
                doc_id = rows.insert(con, uid=uid, path=path, title=parsed.title, mime=parsed.mime, chash=chash,
                                     size=size, mtime=mtime, project=project, status=status, chunks=len(drafts),
                                     now=now, meta=meta)
            else:
                uid = rows.uid_of(con, doc_id)
                self.delete_document_rows(con, doc_id, touched, keep_document=True)
                rows.rewrite(con, doc_id, title=parsed.title, mime=parsed.mime, chash=chash, size=size, mtime=mtime,
                             status=status, chunks=len(drafts), now=now, meta=meta)
            ids = rows.insert_chunks(con, doc_id, [
                (new_uid("chk"), doc_id, d.position, d.text, h, d.locator, d.page, " › ".join(d.heading_path) or None,
                 d.token_count) for d, h in zip(drafts, hashes, strict=True)])
            reuse = [(i, kept[h]) for i, h in zip(ids, hashes, strict=True) if h in kept]
            if reuse:
                vectors.put(con, "chunks", [i for i, _ in reuse], np.stack([v for _, v in reuse]))
                memory_rows.mark_embedded(con, "chunks", [i for i, _ in reuse])
            touched.chunks.update(ids)
        return doc_id, uid

    def _drain(self, queue: list[_Pending], results: list[IngestResult | None], tracker: _Progress,
               cancel: threading.Event | None, *, full_batches_only: bool) -> None:
        """Embed the queued documents' chunks in batches of EMBED_BATCH_SIZE (across documents, in order)
        and complete each document once all its chunks have vectors. With full_batches_only, stop when
        less than a full batch waits (more files will fill it). Raises _Cancelled; the queue then holds
        the documents not completed."""
        while queue:
            for p in [p for p in queue if p.done >= p.total]:
                queue.remove(p)
                results[p.index] = self._complete(p)
                tracker.finished(p.size)
            if not queue or (full_batches_only and sum(p.total - p.done for p in queue) < EMBED_BATCH_SIZE):
                return
            if cancel is not None and cancel.is_set():
                raise _Cancelled
            by_id = {p.doc_id: p for p in queue}
            batch = rows.unembedded_chunks(self.ctx.con, list(by_id), EMBED_BATCH_SIZE)
            if not batch or not self.space.ensure():
                for p in queue:
                    p.done = p.total
                continue
            try:
                vecs = self.space.embedder.encode([r[1] for r in batch], batch_size=EMBED_BATCH_SIZE)
                self.space.store_vectors("chunks", [(r[0], r[2]) for r in batch], vecs)
            except EmbeddingUnavailable:
                for p in queue:  # lexical for now: the backfill embeds them once a model works
                    p.done = p.total
                continue
            except Exception as e:
                log.exception("embedding chunks failed (%s)", type(e).__name__)
                for doc_id in dict.fromkeys(r[3] for r in batch):
                    p = by_id[doc_id]
                    queue.remove(p)
                    self._discard(p.doc_id, p.uid, type(e).__name__)
                    results[p.index] = IngestResult(
                        path=p.path, status="failed",
                        error=f"{p.name} could not be added ({type(e).__name__}); nothing was changed")
                    tracker.finished(p.size)
                continue
            for r in batch:
                by_id[r[3]].done += 1
            tracker.embedding(by_id[batch[-1][3]], queue)

    def _embed_ingest_memories(self, count: int) -> None:
        """Embed the ingest memories in one batch (one model call per file would cost ~10% of the run)."""
        if count and self.space.embedder.ready:
            self.space.embed_pending(limit=count)

    def _complete(self, p: _Pending) -> IngestResult:
        """Make a fully embedded document visible (status 'ready') and record the ingest as an episodic
        memory, in one transaction. An unexpected error removes the document instead."""
        try:
            with self.ctx.mutation() as (con, touched):
                chunks = rows.make_ready(con, p.doc_id, time.time())
                if chunks is not None:
                    touched.chunks.update(chunks)
                verb = "Updated" if p.action == "replaced" else "Ingested"
                project = rows.project_of(con, p.doc_id)
                self.memories.remember(f"{verb} {p.name} ({p.total} chunk{'s' if p.total != 1 else ''})",
                                       kind="episodic", source=ACTIVITY_SOURCE, document_id=p.doc_id,
                                       at=time.time(), embed="background", project=project)
                self.ctx.audit.record("ingest", p.uid, {"chunks": p.total, "status": p.action}, con=con)
        except Exception as e:
            log.exception("completing a document failed (%s)", type(e).__name__)
            self._discard(p.doc_id, p.uid, type(e).__name__)
            return IngestResult(path=p.path, status="failed",
                                error=f"{p.name} could not be added ({type(e).__name__}); nothing was changed")
        self.ctx.changes.emit(Changes("ingest", documents={p.uid}))
        return IngestResult(path=p.path, document_id=p.uid, chunks=p.total, status=p.action)

    def _put_in_project(self, doc_id: int, uid: str, project: str | None) -> None:
        """An unchanged document ingested again with a project goes into it (its passages and its ingest
        event too); without one it stays where it is."""
        if project is None or rows.project_of(self.ctx.con, doc_id) == project:
            return
        with self.ctx.mutation() as (con, touched):
            chunks, memories = rows.set_project(con, doc_id, project)
            touched.chunks.update(chunks)
            touched.memories.update(memories)
            self.ctx.audit.record("move_document", uid, {"project": True}, con=con)
        self.ctx.changes.emit(Changes("move_document", documents={uid}))

    def _record_unreadable(self, path: str | None, title: str, chash: str, size: int, mtime: float | None,
                           project: str | None, reason: str) -> str:
        """A document that could not be read the first time it was ingested: a row with status 'failed', no
        chunks and the reason in meta.failed, like one given up; a later ingest of it tries again (a watched
        folder only once the file changed). Returns its id."""
        uid = new_uid("doc")
        with self.ctx.mutation() as (con, _touched):
            rows.insert(con, uid=uid, path=path, title=title, mime=mimetypes.guess_type(title)[0] or "",
                        chash=chash, size=size, mtime=mtime, project=project, status="failed", chunks=0,
                        now=time.time(), meta=json.dumps({"failed": reason}))
            self.ctx.audit.record("ingest_failed", uid, {"chunks": 0, "reason": "unreadable"}, con=con)
        self.ctx.changes.emit(Changes("ingest", documents={uid}))
        return uid

    def _give_up(self, doc_id: int, uid: str, reason: str, code: str) -> None:
        """Stop trying to ingest a document: its chunks go, its row stays with status 'failed' and the reason
        in meta.failed (invisible to recall, never resumed, listed by list_documents(failed=True))."""
        with self.ctx.mutation() as (con, touched):
            if rows.is_pending(con, doc_id, or_failed=True):
                removed = self.delete_document_rows(con, doc_id, touched, keep_document=True)
                rows.mark_given_up(con, doc_id, json.dumps({"failed": reason}), time.time())
                self.ctx.audit.record("ingest_failed", uid, {**removed, "reason": code}, con=con)
        self.ctx.changes.emit(Changes("ingest", documents={uid}))

    def _discard(self, doc_id: int, uid: str, reason: str) -> None:
        """Remove a document that did not finish ingesting (it was never visible in this state)."""
        with self.ctx.mutation() as (con, touched):
            if rows.is_pending(con, doc_id):
                removed = self.delete_document_rows(con, doc_id, touched)
                self.ctx.audit.record("ingest_abandoned", uid, {**removed, "reason": reason}, con=con)


def _document(r: tuple, error: str | None = None) -> Document:
    ocr = json.loads(r[9] or "{}").get("ocr") if len(r) > 9 else None
    return Document(id=r[0], path=r[1], title=r[2], mime=r[3], chunks=r[4], size=r[5], project=r[6],
                    created_at=iso(r[7]) or "", updated_at=iso(r[8]) or "", error=error,
                    ocr_pages=[int(n) for n in ocr.get("pages", [])] if isinstance(ocr, dict) else [])
