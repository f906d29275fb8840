"""Export and import of everything a user owns, as JSON Lines (optionally encrypted).

An export is one JSON object per line, each with a `type`: first a `header` (format, version, counts), then
`document`, `chunk`, `conversation`, `message`, `memory`, `derivation`, `node`, `edge` and `audit` records.
Records refer to each other by uid (graph nodes by normalised name), never by row id, so they can be merged
into another store. Vectors are not exported: they are derived, and re-embedded from the rows on import.
Times are ISO 8601 in UTC.

With a passphrase the JSONL is encrypted (engine/cipher.py: scrypt and AES-256-GCM segments).

Import merges: a record whose uid is already there, or a memory with the same content, kind and project
(and, for an event, the same time), is skipped, so importing twice adds nothing. A plain JSONL of
`{"text", "kind", "at", "project"}` objects (memories from other tools) is accepted too. Every file is read
and checked completely before one transaction writes it: a bad file changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .backfill import Backfill
from .cipher import (
    FORMAT,
    FORMAT_VERSION,
    MAX_HEADER_LINE,
    EncryptingWriter,
    WrongPassphrase,
    decrypt,
    is_encrypted,
    parse_header,
)
from .context import Changes, Context
from .db import Connection
from .errors import UserError
from .memories import EPISODIC_DISCOUNT, IMPORTANCE_BY_SOURCE, check_text, content_hash, new_uid, parse_time

log = logging.getLogger(__name__)

PASSPHRASE_ENV = "PERSONAL_LLM_EXPORT_PASSPHRASE"
Progress = Callable[[int, int], None]


# ---------------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------------
class ExportResult(BaseModel):
    path: str
    encrypted: bool
    bytes: int
    counts: dict[str, int] = Field(description="Records written, by type")


class PassphraseRequired(UserError):
    """The file is encrypted and no passphrase was given."""


class ImportResult(BaseModel):
    path: str
    format: Literal["export", "plain"]
    encrypted: bool = False
    added: dict[str, int] = Field(description="Records added, by type")
    skipped: dict[str, int] = Field(description="Records already present (same uid or same content), by type")
    embedded: int = Field(default=0, description="Rows embedded after the import")


# ---------------------------------------------------------------------------------------------------
# the records of the format (validated on import; unknown fields are ignored for forward compatibility)
# ---------------------------------------------------------------------------------------------------
class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")


class HeaderRecord(_Record):
    type: Literal["header"] = "header"
    format: Literal["personal-llm-export"] = FORMAT
    version: int = FORMAT_VERSION
    exported_at: str
    app_version: str = ""
    schema_version: int = 0
    counts: dict[str, int] = Field(default_factory=dict)


class DocumentRecord(_Record):
    type: Literal["document"] = "document"
    uid: str = Field(pattern=r"^doc_\w+$")
    path: str | None = None
    title: str
    mime: str
    content_hash: str
    size: int = 0
    mtime: float | None = None
    project: str | None = None
    chunk_count: int = 0
    created_at: str
    updated_at: str
    meta: dict[str, Any] = Field(default_factory=dict)


class ChunkRecord(_Record):
    type: Literal["chunk"] = "chunk"
    uid: str
    document: str
    position: int
    text: str
    locator: str = ""
    page: int | None = None
    heading: str | None = None
    token_count: int = 0
    extracted: bool = False


class ConversationRecord(_Record):
    type: Literal["conversation"] = "conversation"
    uid: str
    title: str | None = None
    project: str | None = None
    created_at: str
    updated_at: str
    meta: dict[str, Any] = Field(default_factory=dict)


class MessageRecord(_Record):
    type: Literal["message"] = "message"
    conversation: str
    role: Literal["system", "user", "assistant"]
    content: str
    created_at: str
    meta: dict[str, Any] = Field(default_factory=dict)


class MemoryRecord(_Record):
    type: Literal["memory"] = "memory"
    uid: str = Field(pattern=r"^mem_\w+$")
    kind: Literal["fact", "episodic", "procedural"]
    text: str = Field(min_length=1)
    importance: float = Field(ge=0.0, le=1.0)
    created_at: str
    updated_at: str
    at: str | None = None
    last_accessed_at: str | None = None
    access_count: int = 0
    archived: bool = False
    archived_at: str | None = None
    project: str | None = None
    source: str = "user"
    document: str | None = None
    conversation: str | None = None
    conflict_with: str | None = None
    processed: bool = False
    extracted: bool = False
    decayed_at: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


class DerivationRecord(_Record):
    type: Literal["derivation"] = "derivation"
    derived: str
    source: str


class FactCheckRecord(_Record):
    """A judged pair of facts (consistent, conflict, not a conflict, resolved by the user)."""

    type: Literal["fact_check"] = "fact_check"
    a: str
    b: str
    pair_hash: str
    verdict: Literal["consistent", "conflict", "not_conflict", "resolved"]
    checked_at: str


class NodeRecord(_Record):
    type: Literal["node"] = "node"
    name: str
    norm_name: str
    node_type: str | None = None
    aliases: list[str] = Field(default_factory=list)
    created_at: str
    meta: dict[str, Any] = Field(default_factory=dict)


class EdgeRecord(_Record):
    type: Literal["edge"] = "edge"
    src: str = Field(description="norm_name of the source node")
    rel: str
    dst: str = Field(description="norm_name of the target node")
    weight: float = 1.0
    memory: str | None = Field(default=None, description="uid of the memory it was derived from")
    chunk: str | None = Field(default=None, description="uid of the chunk it was derived from")
    created_at: str
    meta: dict[str, Any] = Field(default_factory=dict)


class AuditRecord(_Record):
    type: Literal["audit"] = "audit"
    at: str
    actor: str
    action: str
    target: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class PlainMemory(_Record):
    """One line of a plain JSONL from another tool."""

    text: str = Field(min_length=1)
    kind: Literal["fact", "episodic", "procedural"] = "fact"
    at: str | float | None = None
    project: str | None = None
    importance: float | None = Field(default=None, ge=0.0, le=1.0)


RECORDS: dict[str, type[_Record]] = {
    "document": DocumentRecord, "chunk": ChunkRecord, "conversation": ConversationRecord,
    "message": MessageRecord, "memory": MemoryRecord, "derivation": DerivationRecord,
    "fact_check": FactCheckRecord, "node": NodeRecord,
    "edge": EdgeRecord, "audit": AuditRecord,
}


# ---------------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------------
def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds")


def _ts(value: str | float | None) -> float | None:
    return parse_time(value)


def _req_ts(value: str) -> float:
    t = _ts(value)
    if t is None:
        raise UserError("A required time is missing in the import file.")
    return t


def _json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True)


def _proj(project: str | None) -> str | None:
    return (project or "").strip() or None


TIME_EPS = 5e-6  # times pass through ISO text with microsecond precision


def _read_text(path: Path, passphrase: str | None) -> tuple[str, bool]:
    """The file's JSONL text, decrypted when it is encrypted."""
    try:
        with open(path, "rb") as f:
            first = f.readline(MAX_HEADER_LINE)
            head = parse_header(first.rstrip(b"\r\n"))
            if head is None:
                data, encrypted = first + f.read(), False
            else:
                if not passphrase:
                    raise PassphraseRequired(
                        f"{path.name} is encrypted; give its passphrase (or set {PASSPHRASE_ENV}).")
                data, encrypted = decrypt(f, first.rstrip(b"\r\n"), head, passphrase), True
    except FileNotFoundError as e:
        raise UserError(f"There is no file at {path}.") from e
    except IsADirectoryError as e:
        raise UserError(f"{path} is a folder; give the export file.") from e
    except PermissionError as e:
        raise UserError(f"{path} cannot be read (permission denied).") from e
    try:
        return data.decode("utf-8-sig"), encrypted
    except UnicodeDecodeError as e:
        raise UserError(f"{path.name} is not a JSON Lines text file (it is not UTF-8).") from e


# ---------------------------------------------------------------------------------------------------
# parsing an import file
# ---------------------------------------------------------------------------------------------------
class _Parsed:
    def __init__(self, fmt: Literal["export", "plain"]):
        self.format = fmt
        self.records: dict[str, list[Any]] = {t: [] for t in RECORDS}
        self.plain: list[PlainMemory] = []


def _objects(text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"Line {n} is not valid JSON ({e.msg}); nothing was imported.") from e
        except RecursionError as e:
            raise UserError(f"Line {n} is nested too deeply; nothing was imported.") from e
        if not isinstance(obj, dict):
            raise UserError(f"Line {n} is not a JSON object; nothing was imported.")
        yield n, obj


def _problem(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err.get("loc", ())) or "record"
    return f"{where}: {err.get('msg', 'invalid')}"


def parse_import(text: str) -> _Parsed:
    """Validate a whole import file (an export, or plain memories) before anything is written."""
    objects = _objects(text)
    first = next(objects, None)
    if first is None:
        raise UserError("The file is empty; nothing to import.")
    if first[1].get("type") == "header":
        return _parse_export(first[1], objects)
    parsed = _Parsed("plain")
    for n, obj in (first, *objects):
        if "type" in obj and obj["type"] != "memory":
            raise UserError(f"Line {n}: a plain import holds memories only (found type {obj['type']!r}).")
        try:
            item = PlainMemory.model_validate(obj)
        except ValidationError as e:
            raise UserError(f"Line {n}: {_problem(e)}; nothing was imported.") from e
        try:
            _ts(item.at)
        except UserError as e:
            raise UserError(f"Line {n}: {e} Nothing was imported.") from e
        parsed.plain.append(item)
    return parsed


def _parse_export(head_obj: dict[str, Any], objects: Iterable[tuple[int, dict[str, Any]]]) -> _Parsed:
    if head_obj.get("format") != FORMAT:
        raise UserError("This is not a Personal LLM export (unknown format in its header).")
    if int(head_obj.get("version") or 0) > FORMAT_VERSION:
        raise UserError("This export was made by a newer version of Personal LLM; update the app to import it.")
    try:
        header = HeaderRecord.model_validate(head_obj)
    except ValidationError as e:
        raise UserError(f"The export's header is invalid ({_problem(e)}).") from e
    parsed = _Parsed("export")
    for n, obj in objects:
        kind = obj.get("type")
        model = RECORDS.get(kind) if isinstance(kind, str) else None
        if model is None:
            log.info("import: skipping a record of unknown type on line %d", n)
            continue
        try:
            parsed.records[kind].append(model.model_validate(obj))  # type: ignore[index]
        except ValidationError as e:
            raise UserError(f"Line {n}: the {kind} record is invalid ({_problem(e)}); nothing was imported.") from e
    for kind, expected in header.counts.items():
        if kind in parsed.records and len(parsed.records[kind]) != expected:
            raise UserError(f"The export is incomplete: its header promises {expected} {kind} records but "
                            f"{len(parsed.records[kind])} are there. Nothing was imported.")
    return parsed


# ---------------------------------------------------------------------------------------------------
# the engine methods
# ---------------------------------------------------------------------------------------------------
class Transfer:
    """Export everything to a file, import (merge) a file into this store (`engine.transfer`)."""

    def __init__(self, ctx: Context, backfill: Backfill):
        self.ctx = ctx
        self.space = ctx.space
        self.backfill = backfill

    # ---- export --------------------------------------------------------------------------------------
    def export(self, path: Path | str, *, encrypt_passphrase: str | None = None,
               progress: Progress | None = None) -> ExportResult:
        """Write everything this store holds to `path` as JSON Lines, atomically (temp file, then rename).

        With `encrypt_passphrase` the file is encrypted (scrypt + AES-256-GCM). The file is private (0600).
        """
        path = Path(path).expanduser().absolute()
        if path.is_dir():
            raise UserError(f"{path} is a folder; give a file name for the export.")
        if not path.parent.is_dir():
            raise UserError(f"The folder {path.parent} does not exist.")
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as raw:
                enc = EncryptingWriter(raw, encrypt_passphrase) if encrypt_passphrase is not None else None
                counts = self._write_export(enc.write if enc is not None else raw.write, progress)
                if enc is not None:
                    enc.finish()
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with contextlib.suppress(OSError):  # make the rename durable
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        size = path.stat().st_size
        with self.ctx.store.write() as con:
            self.ctx.audit.record("export", None, {"counts": counts, "encrypted": encrypt_passphrase is not None}, con=con)
        log.info("exported %s records (%d bytes, encrypted=%s)", sum(counts.values()), size,
                 encrypt_passphrase is not None)
        return ExportResult(path=str(path), encrypted=encrypt_passphrase is not None, bytes=size, counts=counts)

    def _write_export(self, write: Callable[[bytes], Any], progress: Progress | None) -> dict[str, int]:
        from .migrations import SCHEMA_VERSION
        from .version import __version__

        with self.ctx.store.read() as con:  # one consistent snapshot
            counts = {kind: con.execute(f"SELECT count(*) FROM ({sql})").fetchone()[0]
                      for kind, sql in _EXPORT_SQL.items()}
            total = sum(counts.values())
            header = HeaderRecord(exported_at=_iso(time.time()) or "", app_version=__version__,
                                  schema_version=SCHEMA_VERSION, counts=counts)
            write((header.model_dump_json() + "\n").encode("utf-8"))
            done = 0
            for kind, sql in _EXPORT_SQL.items():
                for row in con.execute(sql):
                    record = _ROW_TO_RECORD[kind](row)
                    write((json.dumps(record.model_dump(mode="json"), ensure_ascii=False) + "\n").encode("utf-8"))
                    done += 1
                    if progress and (done % 500 == 0 or done == total):
                        progress(done, total)
        return counts

    # ---- import --------------------------------------------------------------------------------------
    def import_(self, path: Path | str, *, passphrase: str | None = None, embed: bool = True,
                progress: Progress | None = None) -> ImportResult:
        """Merge an export (or a plain JSONL of memories) into this store; returns what was added/skipped.

        The whole file is checked first, then written in one transaction. Vectors are then computed from
        the rows (now, when `embed` and the model is available; otherwise in the background).
        """
        path = Path(path).expanduser().absolute()
        text, encrypted = _read_text(path, passphrase)
        parsed = parse_import(text)
        merger = _Merger()
        with self.ctx.mutation() as (con, touched):
            if parsed.format == "export":
                merger.merge_export(con, parsed.records)
            else:
                merger.merge_plain(con, parsed.plain)
            touched.memories.update(merger.new_memory_ids)
            touched.chunks.update(merger.new_chunk_ids)
            self.ctx.audit.record("import", None, {"format": parsed.format, "encrypted": encrypted, "added": merger.added,
                                        "skipped": merger.skipped}, con=con)
        self.ctx.changes.emit(Changes("import", memories=set(merger.new_memory_uids), documents=set(merger.new_document_uids),
                           graph=merger.added.get("edge", 0) > 0))
        embedded = 0
        if embed and (merger.new_memory_ids or merger.new_chunk_ids) and self.space.available():
            try:
                embedded = self.space.embed_pending(progress=progress)
            except UserError:
                log.info("import: embedding deferred to the background")
        if not embedded:
            self.backfill.wake()
        log.info("imported (%s): added %s, skipped %s", parsed.format, merger.added, merger.skipped)
        return ImportResult(path=str(path), format=parsed.format, encrypted=encrypted, added=merger.added,
                            skipped=merger.skipped, embedded=embedded)


# ---------------------------------------------------------------------------------------------------
# export queries: one per record type, in dependency order
# ---------------------------------------------------------------------------------------------------
_EXPORT_SQL: dict[str, str] = {
    "document": "SELECT uid, path, title, mime, content_hash, size, mtime, project, chunk_count, created_at, "
                "updated_at, meta FROM documents WHERE status = 'ready' ORDER BY id",
    "chunk": "SELECT c.uid, d.uid, c.position, c.text, c.locator, c.page, c.heading, c.token_count, c.extracted "
             "FROM chunks c JOIN documents d ON d.id = c.document_id AND d.status = 'ready' ORDER BY c.id",
    "conversation": "SELECT uid, title, project, created_at, updated_at, meta FROM conversations ORDER BY id",
    "message": "SELECT c.uid, m.role, m.content, m.created_at, m.meta FROM messages m "
               "JOIN conversations c ON c.id = m.conversation_id ORDER BY m.id",
    "memory": "SELECT m.uid, m.kind, m.text, m.importance, m.created_at, m.updated_at, m.event_at, "
              "m.last_accessed_at, m.access_count, m.archived, m.archived_at, m.project, m.source, d.uid, c.uid, "
              "m.conflict_with, m.processed, m.extracted, m.meta, m.decayed_at FROM memories m "
              "LEFT JOIN documents d ON d.id = m.document_id AND d.status = 'ready' "
              "LEFT JOIN conversations c ON c.id = m.conversation_id ORDER BY m.id",
    "derivation": "SELECT d.uid, s.uid FROM derivations x JOIN memories d ON d.id = x.derived_id "
                  "JOIN memories s ON s.id = x.source_id ORDER BY x.derived_id, x.source_id",
    "fact_check": "SELECT a.uid, b.uid, f.pair_hash, f.verdict, f.checked_at FROM fact_checks f "
                  "JOIN memories a ON a.id = f.a JOIN memories b ON b.id = f.b ORDER BY f.a, f.b",
    "node": "SELECT name, norm_name, type, aliases, created_at, meta FROM nodes ORDER BY id",
    "edge": "SELECT s.norm_name, e.rel, t.norm_name, e.weight, m.uid, c.uid, e.created_at, e.meta FROM edges e "
            "JOIN nodes s ON s.id = e.src JOIN nodes t ON t.id = e.dst "
            "LEFT JOIN memories m ON m.id = e.memory_id LEFT JOIN chunks c ON c.id = e.chunk_id ORDER BY e.id",
    "audit": "SELECT at, actor, action, target, detail FROM audit ORDER BY id",
}


def _meta(raw: str | None) -> dict[str, Any]:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {"value": value}


_ROW_TO_RECORD: dict[str, Callable[[tuple], _Record]] = {
    "document": lambda r: DocumentRecord(
        uid=r[0], path=r[1], title=r[2], mime=r[3], content_hash=r[4], size=r[5], mtime=r[6], project=r[7],
        chunk_count=r[8], created_at=_iso(r[9]) or "", updated_at=_iso(r[10]) or "", meta=_meta(r[11])),
    "chunk": lambda r: ChunkRecord(
        uid=r[0], document=r[1], position=r[2], text=r[3], locator=r[4] or "", page=r[5], heading=r[6],
        token_count=r[7], extracted=bool(r[8])),
    "conversation": lambda r: ConversationRecord(
        uid=r[0], title=r[1], project=r[2], created_at=_iso(r[3]) or "", updated_at=_iso(r[4]) or "",
        meta=_meta(r[5])),
    "message": lambda r: MessageRecord(
        conversation=r[0], role=r[1], content=r[2], created_at=_iso(r[3]) or "", meta=_meta(r[4])),
    "memory": lambda r: MemoryRecord(
        uid=r[0], kind=r[1], text=r[2], importance=r[3], created_at=_iso(r[4]) or "", updated_at=_iso(r[5]) or "",
        at=_iso(r[6]), last_accessed_at=_iso(r[7]), access_count=r[8], archived=bool(r[9]),
        archived_at=_iso(r[10]), project=r[11], source=r[12], document=r[13], conversation=r[14],
        conflict_with=r[15], processed=bool(r[16]), extracted=bool(r[17]), meta=_meta(r[18]), decayed_at=_iso(r[19])),
    "derivation": lambda r: DerivationRecord(derived=r[0], source=r[1]),
    "fact_check": lambda r: FactCheckRecord(a=r[0], b=r[1], pair_hash=r[2], verdict=r[3], checked_at=_iso(r[4]) or ""),
    "node": lambda r: NodeRecord(
        name=r[0], norm_name=r[1], node_type=r[2], aliases=_aliases(r[3]), created_at=_iso(r[4]) or "",
        meta=_meta(r[5])),
    "edge": lambda r: EdgeRecord(
        src=r[0], rel=r[1], dst=r[2], weight=r[3], memory=r[4], chunk=r[5], created_at=_iso(r[6]) or "",
        meta=_meta(r[7])),
    "audit": lambda r: AuditRecord(at=_iso(r[0]) or "", actor=r[1], action=r[2], target=r[3], detail=_meta(r[4])),
}


def _aliases(raw: str | None) -> list[str]:
    try:
        value = json.loads(raw or "[]")
    except ValueError:
        return []
    return [str(a) for a in value] if isinstance(value, list) else []


# ---------------------------------------------------------------------------------------------------
# merging into a store (inside one transaction)
# ---------------------------------------------------------------------------------------------------
class _Merger:
    """Adds what is new, maps what is already there; old uids resolve to this store's rows."""

    def __init__(self) -> None:
        self.added: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        self.doc_ids: dict[str, int] = {}
        self.chunk_ids: dict[str, int] = {}
        self.conv_ids: dict[str, int] = {}
        self.mem_ids: dict[str, int] = {}
        self.mem_uids: dict[str, str] = {}  # uid in the file -> uid in this store
        self.node_ids: dict[str, int] = {}
        self.new_memory_ids: list[int] = []
        self.new_memory_uids: list[str] = []
        self.new_chunk_ids: list[int] = []
        self.new_document_uids: list[str] = []

    def _count(self, kind: str, added: bool) -> None:
        bucket = self.added if added else self.skipped
        bucket[kind] = bucket.get(kind, 0) + 1

    # ---- the whole export ----------------------------------------------------------------------------
    def merge_export(self, con: Connection, records: dict[str, list[Any]]) -> None:
        new_docs = {r.uid for r in records["document"] if self._document(con, r)}
        for r in records["chunk"]:
            self._chunk(con, r, new_docs)
        new_convs = {r.uid for r in records["conversation"] if self._conversation(con, r)}
        for r in records["message"]:
            self._message(con, r, new_convs)
        for r in records["memory"]:
            self._memory(con, r)
        self._fix_conflicts(con, records["memory"])
        for r in records["derivation"]:
            self._derivation(con, r)
        for r in records["fact_check"]:
            self._fact_check(con, r)
        for r in records["node"]:
            self._node(con, r)
        for r in records["edge"]:
            self._edge(con, r)
        for r in records["audit"]:
            self._audit(con, r)

    def merge_plain(self, con: Connection, items: list[PlainMemory]) -> None:
        now = _iso(time.time()) or ""
        for item in items:
            importance = item.importance
            if importance is None:
                importance = IMPORTANCE_BY_SOURCE["import"] - (EPISODIC_DISCOUNT if item.kind == "episodic" else 0.0)
            at = _ts(item.at)
            rec = MemoryRecord(uid=new_uid("mem"), kind=item.kind, text=check_text(item.text),
                               importance=importance, created_at=now, updated_at=now, at=_iso(at),
                               project=item.project, source="import")
            self._memory(con, rec)

    # ---- documents and chunks ------------------------------------------------------------------------
    def _document(self, con: Connection, r: DocumentRecord) -> bool:
        """True when the document was added (its chunks follow it)."""
        project = _proj(r.project)
        row = con.execute("SELECT id FROM documents WHERE uid = ?", (r.uid,)).fetchone() or con.execute(
            "SELECT id FROM documents WHERE content_hash = ? AND project IS ? AND status = 'ready' ORDER BY id LIMIT 1",
            (r.content_hash, project)).fetchone()
        if row is not None:
            self.doc_ids[r.uid] = row[0]
            self._count("document", False)
            return False
        cur = con.execute(
            "INSERT INTO documents(uid, path, title, mime, content_hash, size, mtime, project, status, chunk_count, "
            "created_at, updated_at, meta) VALUES (?,?,?,?,?,?,?,?, 'ready', ?,?,?,?)",
            (r.uid, r.path, r.title, r.mime, r.content_hash, r.size, r.mtime, project, r.chunk_count,
             _req_ts(r.created_at), _req_ts(r.updated_at), _json(r.meta)))
        self.doc_ids[r.uid] = int(cur.lastrowid or 0)
        self.new_document_uids.append(r.uid)
        self._count("document", True)
        return True

    def _chunk(self, con: Connection, r: ChunkRecord, new_docs: set[str]) -> None:
        doc_id = self.doc_ids.get(r.document)
        if doc_id is None:
            raise UserError(f"The export is inconsistent: chunk {r.uid} belongs to a document it does not hold.")
        if r.document not in new_docs:  # the document was already here: map to its chunk at that position
            row = con.execute("SELECT id FROM chunks WHERE uid = ? OR (document_id = ? AND position = ?) "
                              "ORDER BY uid = ? DESC LIMIT 1", (r.uid, doc_id, r.position, r.uid)).fetchone()
            if row is not None:
                self.chunk_ids[r.uid] = row[0]
            self._count("chunk", False)
            return
        uid = r.uid
        if con.execute("SELECT 1 FROM chunks WHERE uid = ?", (uid,)).fetchone():
            uid = new_uid("chk")
        cur = con.execute(
            "INSERT INTO chunks(uid, document_id, position, text, content_hash, locator, page, heading, token_count, "
            "extracted) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (uid, doc_id, r.position, r.text, content_hash(r.text), r.locator, r.page, r.heading, r.token_count,
             int(r.extracted)))
        rid = int(cur.lastrowid or 0)
        self.chunk_ids[r.uid] = rid
        self.new_chunk_ids.append(rid)
        self._count("chunk", True)

    # ---- conversations -------------------------------------------------------------------------------
    def _conversation(self, con: Connection, r: ConversationRecord) -> bool:
        row = con.execute("SELECT id FROM conversations WHERE uid = ?", (r.uid,)).fetchone()
        if row is not None:
            self.conv_ids[r.uid] = row[0]
            self._count("conversation", False)
            return False
        cur = con.execute(
            "INSERT INTO conversations(uid, title, project, created_at, updated_at, meta) VALUES (?,?,?,?,?,?)",
            (r.uid, r.title, _proj(r.project), _req_ts(r.created_at), _req_ts(r.updated_at), _json(r.meta)))
        self.conv_ids[r.uid] = int(cur.lastrowid or 0)
        self._count("conversation", True)
        return True

    def _message(self, con: Connection, r: MessageRecord, new_convs: set[str]) -> None:
        conv_id = self.conv_ids.get(r.conversation)
        if conv_id is None:
            raise UserError("The export is inconsistent: a message belongs to a conversation it does not hold.")
        if r.conversation not in new_convs:
            self._count("message", False)
            return
        con.execute("INSERT INTO messages(conversation_id, role, content, created_at, meta) VALUES (?,?,?,?,?)",
                    (conv_id, r.role, r.content, _req_ts(r.created_at), _json(r.meta)))
        self._count("message", True)

    # ---- memories ------------------------------------------------------------------------------------
    def _existing_memory(self, con: Connection, r: MemoryRecord, chash: str, project: str | None,
                         event_at: float | None) -> tuple[int, str] | None:
        row = con.execute("SELECT id, uid FROM memories WHERE uid = ?", (r.uid,)).fetchone()
        if row is not None:
            return row[0], row[1]
        sql = "SELECT id, uid FROM memories WHERE content_hash = ? AND kind = ? AND project IS ?"
        args: list[Any] = [chash, r.kind, project]
        if r.kind == "episodic":  # separate events with the same words are separate memories
            if event_at is None:
                sql += " AND event_at IS NULL"
            else:
                sql += " AND event_at BETWEEN ? AND ?"
                args += [event_at - TIME_EPS, event_at + TIME_EPS]
        row = con.execute(sql + " ORDER BY id LIMIT 1", args).fetchone()
        return None if row is None else (row[0], row[1])

    def _memory(self, con: Connection, r: MemoryRecord) -> None:
        text = check_text(r.text)
        chash, project, event_at = content_hash(text), _proj(r.project), _ts(r.at)
        found = self._existing_memory(con, r, chash, project, event_at)
        if found is not None:
            self.mem_ids[r.uid], self.mem_uids[r.uid] = found
            self._count("memory", False)
            return
        doc_id = self.doc_ids.get(r.document) if r.document else None
        conv_id = self.conv_ids.get(r.conversation) if r.conversation else None
        cur = con.execute(
            "INSERT INTO memories(uid, kind, text, content_hash, importance, created_at, updated_at, event_at, "
            "last_accessed_at, access_count, archived, archived_at, project, source, document_id, conversation_id, "
            "conflict_with, processed, extracted, decayed_at, meta) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (r.uid, r.kind, text, chash, r.importance, _req_ts(r.created_at), _req_ts(r.updated_at), event_at,
             _ts(r.last_accessed_at), r.access_count, int(r.archived), _ts(r.archived_at), project, r.source,
             doc_id, conv_id, None, int(r.processed), int(r.extracted), _ts(r.decayed_at), _json(r.meta)))
        rid = int(cur.lastrowid or 0)
        self.mem_ids[r.uid], self.mem_uids[r.uid] = rid, r.uid
        self.new_memory_ids.append(rid)
        self.new_memory_uids.append(r.uid)
        self._count("memory", True)

    def _fix_conflicts(self, con: Connection, records: list[MemoryRecord]) -> None:
        """Flags between memories, once both ends are known (the other may be earlier or later in the file)."""
        new = set(self.new_memory_uids)
        for r in records:
            if not r.conflict_with or r.uid not in new:
                continue
            other = self.mem_uids.get(r.conflict_with)
            if other is None and con.execute("SELECT 1 FROM memories WHERE uid = ?", (r.conflict_with,)).fetchone():
                other = r.conflict_with
            if other is not None:
                con.execute("UPDATE memories SET conflict_with = ? WHERE uid = ?", (other, r.uid))

    def _derivation(self, con: Connection, r: DerivationRecord) -> None:
        derived, source = self.mem_ids.get(r.derived), self.mem_ids.get(r.source)
        if derived is None or source is None:
            self._count("derivation", False)
            return
        cur = con.execute("INSERT OR IGNORE INTO derivations(derived_id, source_id) VALUES (?,?)", (derived, source))
        self._count("derivation", cur.rowcount > 0)

    def _fact_check(self, con: Connection, r: FactCheckRecord) -> None:
        a, b = self.mem_ids.get(r.a), self.mem_ids.get(r.b)
        if a is None or b is None or a == b:
            self._count("fact_check", False)
            return
        a, b = min(a, b), max(a, b)
        cur = con.execute("INSERT OR IGNORE INTO fact_checks(a, b, pair_hash, verdict, checked_at) VALUES (?,?,?,?,?)",
                          (a, b, r.pair_hash, r.verdict, _req_ts(r.checked_at)))
        self._count("fact_check", cur.rowcount > 0)

    # ---- graph ---------------------------------------------------------------------------------------
    def _node(self, con: Connection, r: NodeRecord) -> None:
        cur = con.execute(
            "INSERT OR IGNORE INTO nodes(name, norm_name, type, aliases, created_at, meta) VALUES (?,?,?,?,?,?)",
            (r.name, r.norm_name, r.node_type, json.dumps(r.aliases, ensure_ascii=False), _req_ts(r.created_at),
             _json(r.meta)))
        self._count("node", cur.rowcount > 0)
        self.node_ids[r.norm_name] = con.execute("SELECT id FROM nodes WHERE norm_name = ?",
                                                 (r.norm_name,)).fetchone()[0]

    def _edge(self, con: Connection, r: EdgeRecord) -> None:
        src, dst = self.node_ids.get(r.src), self.node_ids.get(r.dst)
        mem = self.mem_ids.get(r.memory) if r.memory else None
        chunk = self.chunk_ids.get(r.chunk) if r.chunk else None
        if src is None or dst is None or (mem is None and chunk is None):  # no provenance, no edge
            self._count("edge", False)
            return
        exists = con.execute("SELECT 1 FROM edges WHERE src = ? AND rel = ? AND dst = ? AND memory_id IS ? "
                             "AND chunk_id IS ?", (src, r.rel, dst, mem, chunk)).fetchone()
        if exists:
            self._count("edge", False)
            return
        con.execute("INSERT INTO edges(src, rel, dst, weight, memory_id, chunk_id, created_at, meta) "
                    "VALUES (?,?,?,?,?,?,?,?)",
                    (src, r.rel, dst, r.weight, mem, chunk, _req_ts(r.created_at), _json(r.meta)))
        self._count("edge", True)

    # ---- audit ---------------------------------------------------------------------------------------
    def _audit(self, con: Connection, r: AuditRecord) -> None:
        at = _req_ts(r.at)
        detail = json.dumps(r.detail, sort_keys=True)
        exists = con.execute("SELECT 1 FROM audit WHERE at BETWEEN ? AND ? AND actor = ? AND action = ? "
                             "AND target IS ? AND detail = ?",
                             (at - TIME_EPS, at + TIME_EPS, r.actor, r.action, r.target, detail)).fetchone()
        if exists:
            self._count("audit", False)
            return
        con.execute("INSERT INTO audit(at, actor, action, target, detail) VALUES (?,?,?,?,?)",
                    (at, r.actor, r.action, r.target, detail))
        self._count("audit", True)


__all__ = ["ExportResult", "ImportResult", "PassphraseRequired", "Transfer", "WrongPassphrase",
           "is_encrypted", "parse_import"]
