"""Export and import of everything a user owns, as JSON Lines (optionally encrypted).

An export is one JSON object per line, each with a `type`: first a `header` (format, version, counts), then
`document`, `chunk`, `conversation`, `message`, `memory`, `derivation`, `node`, `edge` and `audit` records.
Records refer to each other by uid (graph nodes by normalised name), never by row id, so they can be merged
into another store. Vectors are not exported: they are derived, and re-embedded from the rows on import.
Times are ISO 8601 in UTC.

With a passphrase the JSONL is encrypted (engine/cipher.py: scrypt and AES-256-GCM segments).

An export is written where no one sees it until it is whole (engine/partials.py).

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
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

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
from .errors import UserError
from .partials import PART_MARK, clean_partials, name_unnamed, note_in_progress, open_part
from .records import RECORDS, HeaderRecord, PlainMemory, to_iso, to_ts
from .store import transfer as rows

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
            to_ts(item.at)
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
        clean_partials(path.parent)
        tmp = path.with_name(f".{path.name}.{PART_MARK}-{os.getpid()}-{secrets.token_hex(4)}.part")
        note = note_in_progress(self.ctx.home, tmp)
        try:
            fd, named = open_part(tmp)
            with os.fdopen(fd, "wb") as raw:
                enc = EncryptingWriter(raw, encrypt_passphrase) if encrypt_passphrase is not None else None
                counts = self._write_export(enc.write if enc is not None else raw.write, progress)
                if enc is not None:
                    enc.finish()
                raw.flush()
                os.fsync(raw.fileno())
                if not named:  # give the unnamed file its partial name, then its own, now that it is whole
                    name_unnamed(raw.fileno(), tmp)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        finally:
            if note is not None:
                with contextlib.suppress(OSError):
                    note.unlink()
        with contextlib.suppress(OSError):  # make the rename durable
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        size = path.stat().st_size
        self.ctx.audit.record("export", None, {"counts": counts, "encrypted": encrypt_passphrase is not None})
        log.info("exported %s records (%d bytes, encrypted=%s)", sum(counts.values()), size,
                 encrypt_passphrase is not None)
        return ExportResult(path=str(path), encrypted=encrypt_passphrase is not None, bytes=size, counts=counts)

    def _write_export(self, write: Callable[[bytes], Any], progress: Progress | None) -> dict[str, int]:
        from .version import __version__

        with self.ctx.store.read() as con:  # one consistent snapshot
            counts = rows.count_records(con)
            total = sum(counts.values())
            header = HeaderRecord(exported_at=to_iso(time.time()) or "", app_version=__version__,
                                  schema_version=rows.schema_version(con), counts=counts)
            write((header.model_dump_json() + "\n").encode("utf-8"))
            done = 0
            for record in rows.records(con):
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
        with self.ctx.mutation() as (con, touched):
            merger = rows.merger(con)
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




__all__ = ["ExportResult", "ImportResult", "PassphraseRequired", "Transfer", "WrongPassphrase",
           "is_encrypted", "parse_import"]
