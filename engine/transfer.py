"""Export and import of everything a user owns, as JSON Lines (optionally encrypted).

An export is one JSON object per line, each with a `type`: first a `header` (format, version, counts), then
`document`, `chunk`, `conversation`, `message`, `memory`, `derivation`, `node`, `edge` and `audit` records.
Records refer to each other by uid (graph nodes by normalised name), never by row id, so they can be merged
into another store. Vectors are not exported: they are derived, and re-embedded from the rows on import.
Times are ISO 8601 in UTC.

With a passphrase the JSONL is encrypted (engine/cipher.py: scrypt and AES-256-GCM segments).

An export is written where no one sees it until it is whole (engine/partials.py). The HTTP API streams the
same JSON Lines (`GET /export`, `export_to`) and merges a file's bytes (`POST /import`, `import_upload`); a
server profile writes (and encrypts) the file on its device (engine/remote.py).

Import merges: a record whose uid is already there, or a memory with the same content, kind and project
(and, for an event, the same time), is skipped, so importing twice adds nothing. A plain JSONL of
`{"text", "kind", "at", "project"}` objects (memories from other tools) is accepted too. Every file is read
and checked completely before one transaction writes it: a bad file changes nothing.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np
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
from .embeddings import Windows
from .errors import UserError
from .partials import PART_MARK, clean_partials, name_unnamed, note_in_progress, open_part
from .records import KNOWN_KEYS, RECORDS, HeaderRecord, PlainMemory, to_iso, to_ts, turn_key
from .store import memories as memory_rows
from .store import space as space_rows
from .store import transfer as rows
from .store import vectors as vector_rows

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


class MergeReport(BaseModel):
    added: dict[str, int] = Field(description="Records added, by type")
    skipped: dict[str, int] = Field(description="Records already there (same uid, or same content), by type")
    vectors: int = Field(default=0, description="Vectors stored as they came (not embedded again)")


class RecordsRefused(UserError):
    """A batch of records that cannot be merged: a record invalid, or a vector of another size."""


class SpaceDiffers(UserError):
    """Vectors made by another embedding model than the store's."""


class PassphraseRequired(UserError):
    """The file is encrypted and no passphrase was given."""


class ImportResult(BaseModel):
    path: str
    format: Literal["export", "plain"]
    encrypted: bool = False
    added: dict[str, int] = Field(description="Records added, by type")
    skipped: dict[str, int] = Field(description="Records already present (same uid or same content), by type")
    embedded: int = Field(default=0, description="Rows embedded after the import")


def read_export_file(path: Path, passphrase: str | None) -> tuple[str, bool]:
    """The file's JSONL text, decrypted when it is encrypted."""
    try:
        with open(path, "rb") as f:
            return read_export(f, path.name, passphrase)
    except FileNotFoundError as e:
        raise UserError(f"There is no file at {path}.") from e
    except IsADirectoryError as e:
        raise UserError(f"{path} is a folder; give the export file.") from e
    except PermissionError as e:
        raise UserError(f"{path} cannot be read (permission denied).") from e


def read_export(f: BinaryIO, name: str, passphrase: str | None) -> tuple[str, bool]:
    """The JSONL text of an export (or plain JSONL) read from `f`, decrypted when it is encrypted; and whether
    it was. `name` names it in errors."""
    first = f.readline(MAX_HEADER_LINE)
    head = parse_header(first.rstrip(b"\r\n"))
    if head is None:
        data, encrypted = first + f.read(), False
    else:
        if not passphrase:
            raise PassphraseRequired(f"{name} is encrypted; give its passphrase (or set {PASSPHRASE_ENV}).")
        data, encrypted = decrypt(f, first.rstrip(b"\r\n"), head, passphrase), True
    try:
        return data.decode("utf-8-sig"), encrypted
    except UnicodeDecodeError as e:
        raise UserError(f"{name} is not a JSON Lines text file (it is not UTF-8).") from e


def write_export_file(path: Path | str, home: Path, produce: Callable[[Callable[[bytes], Any]], dict[str, int]],
                      encrypt_passphrase: str | None = None) -> tuple[Path, int, dict[str, int]]:
    """Write the export `produce(write)` writes (and returns the counts of) to `path`, atomically: a private
    partial file (0600), encrypted as it is written when there is a passphrase, renamed once whole.
    Returns (the path, its size, the counts)."""
    path = Path(path).expanduser().absolute()
    if path.is_dir():
        raise UserError(f"{path} is a folder; give a file name for the export.")
    if not path.parent.is_dir():
        raise UserError(f"The folder {path.parent} does not exist.")
    if path.exists() and not path.is_file():  # a device, a pipe: the export would replace it, not fill it
        raise UserError(f"{path} is not a regular file; give a file name for the export.")
    clean_partials(path.parent)
    tmp = path.with_name(f".{path.name}.{PART_MARK}-{os.getpid()}-{secrets.token_hex(4)}.part")
    note = note_in_progress(home, tmp)
    try:
        fd, named = open_part(tmp)
        with os.fdopen(fd, "wb") as raw:
            enc = EncryptingWriter(raw, encrypt_passphrase) if encrypt_passphrase is not None else None
            counts = produce(enc.write if enc is not None else raw.write)
            if enc is not None:
                enc.finish()
            raw.flush()
            os.fsync(raw.fileno())
            if not named:  # give the unnamed file its partial name, then its own, now that it is whole
                name_unnamed(raw.fileno(), tmp)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):  # the export's folder, not the store: read-only, full, a special file system
            raise UserError(f"The export cannot be written to {path.parent}: {e.strerror or type(e).__name__}. "
                            "Nothing was written.") from None
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
    return path, path.stat().st_size, counts


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
        path, size, counts = write_export_file(path, self.ctx.home, lambda write: self._write_export(write, progress),
                                               encrypt_passphrase)
        self.ctx.audit.record("export", None, {"counts": counts, "encrypted": encrypt_passphrase is not None})
        log.info("exported %s records (%d bytes, encrypted=%s)", sum(counts.values()), size,
                 encrypt_passphrase is not None)
        return ExportResult(path=str(path), encrypted=encrypt_passphrase is not None, bytes=size, counts=counts)

    def export_to(self, write: Callable[[bytes], Any], progress: Progress | None = None) -> dict[str, int]:
        """Write the export's JSON Lines (never encrypted: the caller's to protect) with `write`, from one
        snapshot; returns the records written by type. The HTTP API's export (`GET /export`) streams it."""
        counts = self._write_export(write, progress)
        self.ctx.audit.record("export", None, {"counts": counts, "encrypted": False})
        log.info("exported %s records (streamed)", sum(counts.values()))
        return counts

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
        text, encrypted = read_export_file(path, passphrase)
        return self._import_text(text, encrypted, str(path), embed, progress)

    def import_upload(self, data: bytes, filename: str, *, passphrase: str | None = None, embed: bool = True,
                      progress: Progress | None = None) -> ImportResult:
        """`import_` of a file whose bytes were sent (the HTTP API's `POST /import`): never written to a disk."""
        text, encrypted = read_export(io.BytesIO(data), filename or "The file", passphrase)
        return self._import_text(text, encrypted, filename, embed, progress)

    def _import_text(self, text: str, encrypted: bool, name: str, embed: bool,
                     progress: Progress | None) -> ImportResult:
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
        return ImportResult(path=name, format=parsed.format, encrypted=encrypted, added=merger.added,
                            skipped=merger.skipped, embedded=embedded)


    # ---- moving records between stores (a push, a pull: engine/remote.py) --------------------------------
    def vector_space(self) -> list[Any] | None:
        """The embedding space this store's vectors are of (provider, model, dimension, version); None when it
        has none yet."""
        stamp = space_rows.stamp(self.ctx.store.con)
        return None if stamp is None else list(stamp)

    def outgoing_counts(self) -> dict[str, int]:
        """How many records of each type `outgoing` yields."""
        return rows.count_outgoing(self.ctx.store.con)

    def outgoing(self, *, max_records: int = 500, max_bytes: int = 4 * 2**20, vectors: bool = True,
                 keep: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
                 ) -> Iterator[list[dict[str, Any]]]:
        """Everything a push sends, as batches of wire records (engine/records.py's, as JSON, with a memory's
        or passage's current vector in `vector` and a memory's windows in `windows`: float32, little-endian,
        base64), from one snapshot of the store. A document travels with its passages and a conversation with
        its turns in one batch (unless they alone exceed `max_records`). `keep` chooses the records of each
        batch that go (a push asks the server which it has already), before their vectors are read; a batch
        left empty is not yielded."""
        def ready(con: Any, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
            if keep is not None:
                batch = keep(batch)
            return self._with_vectors(con, batch) if vectors and batch else batch

        with self.ctx.store.read() as con:
            batch: list[dict[str, Any]] = []
            size = 0
            for group in rows.outgoing(con):
                items = [r.model_dump(mode="json") for r in group]
                weight = sum(len(str(d.get("text") or d.get("content") or "")) + 300 for d in items)
                weight += sum(VECTOR_WEIGHT for d in items if d["type"] in ("memory", "chunk"))
                if batch and (len(batch) + len(items) > max_records or size + weight > max_bytes):
                    if going := ready(con, batch):
                        yield going
                    batch, size = [], 0
                while len(items) > max_records:  # a document of more passages than a batch holds
                    if going := ready(con, items[:max_records]):
                        yield going
                    items = items[max_records:]
                batch += items
                size += weight
            if batch and (going := ready(con, batch)):
                yield going

    def known(self, keys: dict[str, list[str]]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """Which of these records this store holds already, by type (KNOWN_KEYS: uids, an entity's normalised
        name), and for each conversation it holds the keys of its turns (records.turn_key): what a push need
        not send. Read in one snapshot."""
        found: dict[str, list[str]] = {}
        with self.ctx.store.read() as con:
            for kind, wanted in keys.items():
                if kind not in KNOWN_KEYS:
                    raise UserError(f"{kind[:40]!r} is not a type of record a push asks about (one of "
                                    f"{', '.join(KNOWN_KEYS)}).")
                if wanted:
                    found[kind] = sorted(rows.known(con, kind, list(dict.fromkeys(wanted))))
            turns = {uid: sorted({turn_key(role, content, at) for role, content, at in said})
                     for uid, said in rows.turns_of(con, found.get("conversation", [])).items()}
        return found, turns

    def _with_vectors(self, con: Any, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for table, kind in (("memories", "memory"), ("chunks", "chunk")):
            found = rows.vectors_of(con, table, [d["uid"] for d in batch if d["type"] == kind])
            for d in batch:
                if d["type"] == kind and d["uid"] in found:
                    vec, windows = found[d["uid"]]
                    d["vector"] = _b64(vec)
                    if windows:
                        d["windows"] = [[start, end, _b64(v)] for start, end, v in windows]
        return batch

    def page(self, after: str | None, limit: int, *, vectors: bool = True) -> tuple[list[dict[str, Any]], str | None]:
        """A page of this store's records for a pull (wire records, as `outgoing`'s) and the cursor of the
        next (None: the last)."""
        with self.ctx.store.read() as con:
            found, nxt = rows.records_page(con, after, limit)
            items = [r.model_dump(mode="json") for r in found]
            return (self._with_vectors(con, items) if vectors else items), nxt

    def counts(self) -> dict[str, int]:
        """How many records of each type the pages hold."""
        return rows.count_outgoing(self.ctx.store.con)

    def merge(self, items: list[dict[str, Any]], *, space: Sequence[Any] | None = None,
              action: str = "push") -> MergeReport:
        """Merge a batch of wire records (as `outgoing` and `page` make them) into this store in one
        transaction: a record whose uid is there already is mapped, never written twice, so a batch sent
        again adds nothing. Vectors that came with new memories and passages are stored as they are when
        `space` is this store's embedding space (otherwise refused: SpaceDiffers); rows without one wait
        for the background embedder. Audited as `action`, with counts."""
        parsed: dict[str, list[Any]] = {t: [] for t in RECORDS}
        vecs: dict[tuple[str, str], tuple[np.ndarray, Windows | None]] = {}
        for n, obj in enumerate(items):
            kind = obj.get("type") if isinstance(obj, dict) else None
            model = RECORDS.get(kind) if isinstance(kind, str) else None
            if model is None or kind == "audit":
                raise RecordsRefused(f"records[{n}]: {str(kind)[:40]!r} is not a type of record that moves "
                                     f"(one of {', '.join(t for t in RECORDS if t != 'audit')}).")
            try:
                record = model.model_validate(obj)
            except ValidationError as e:
                raise RecordsRefused(f"records[{n}] ({kind}): {_problem(e)}.") from e
            parsed[str(kind)].append(record)
            if kind in ("memory", "chunk") and obj.get("vector") is not None:
                vecs[(kind, record.uid)] = _vector_of(n, obj)  # type: ignore[attr-defined]
        if vecs:
            self._check_space(space, next(iter(vecs.values()))[0].shape[0])
        with self.ctx.mutation() as (con, touched):
            merger = rows.merger(con)
            try:
                merger.merge_export(con, parsed)
            except UserError as e:
                raise RecordsRefused(str(e)) from e
            stored = 0
            for table, kind, new in (("memories", "memory", merger.new_memories), ("chunks", "chunk", merger.new_chunks)):
                have = [(rid, vecs[(kind, uid)]) for uid, rid in new.items() if (kind, uid) in vecs]
                if have:
                    ids = [rid for rid, _ in have]
                    vector_rows.put(con, table, ids, np.stack([v for _, (v, _) in have]),
                                    [w for _, (_, w) in have] if table == "memories" else None)
                    memory_rows.mark_embedded(con, table, ids)
                    stored += len(ids)
            touched.memories.update(merger.new_memory_ids)
            touched.chunks.update(merger.new_chunk_ids)
            self.ctx.audit.record(action, None, {"added": merger.added, "skipped": merger.skipped, "vectors": stored},
                                  con=con)
        self.ctx.changes.emit(Changes(action, memories=set(merger.new_memory_uids),
                                      documents=set(merger.new_document_uids), graph=merger.added.get("edge", 0) > 0))
        if len(merger.new_memory_ids) + len(merger.new_chunk_ids) > stored:
            self.backfill.wake()  # the rest is embedded here
        return MergeReport(added=merger.added, skipped=merger.skipped, vectors=stored)

    def _check_space(self, space: Sequence[Any] | None, dimension: int) -> None:
        mine = self.vector_space() if self.space.ensure() else None
        theirs = list(space) if space is not None else None
        if mine is None or theirs is None or [str(x) for x in mine] != [str(x) for x in theirs]:
            raise SpaceDiffers(
                f"These vectors were made by {_model(theirs)}, and this store's are made by {_model(mine)}: "
                "they cannot be compared. Send the records without their vectors (they are embedded again "
                "here), or use the same embedding model on both sides.")
        if int(mine[2]) != dimension:
            raise RecordsRefused(f"A vector has {dimension} dimensions; this store's have {mine[2]}.")


VECTOR_WEIGHT = 2200  # a 384-dimension vector in base64, with its key


def _b64(vec: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vec, dtype="<f4").tobytes()).decode("ascii")


def _unb64(n: int, text: Any) -> np.ndarray:
    try:
        raw = base64.b64decode(str(text), validate=True)
    except (ValueError, TypeError) as e:
        raise RecordsRefused(f"records[{n}]: a vector is not base64.") from e
    if not raw or len(raw) % 4:
        raise RecordsRefused(f"records[{n}]: a vector is not a whole number of float32 values.")
    vec = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.all(np.isfinite(vec)):
        raise RecordsRefused(f"records[{n}]: a vector holds a value that is not a number.")
    return vec


def _vector_of(n: int, obj: dict[str, Any]) -> tuple[np.ndarray, Windows | None]:
    vec = _unb64(n, obj["vector"])
    raw = obj.get("windows") or []
    if not isinstance(raw, list):
        raise RecordsRefused(f"records[{n}]: windows is a list of [start, end, vector].")
    spans, wins = [], []
    for w in raw:
        if not (isinstance(w, list) and len(w) == 3 and isinstance(w[0], int) and isinstance(w[1], int)):
            raise RecordsRefused(f"records[{n}]: windows is a list of [start, end, vector].")
        spans.append((w[0], w[1]))
        wins.append(_unb64(n, w[2]))
    if any(len(w) != len(vec) for w in wins):
        raise RecordsRefused(f"records[{n}]: its vectors differ in size.")
    return vec, (Windows(vectors=np.stack(wins), spans=spans) if wins else None)


def _model(space: Sequence[Any] | None) -> str:
    return "no embedding model" if not space else f"{space[1]} ({space[2]} dimensions, {space[3]})"


__all__ = ["ExportResult", "ImportResult", "MergeReport", "PassphraseRequired", "RecordsRefused", "SpaceDiffers",
           "Transfer", "WrongPassphrase", "is_encrypted", "parse_import", "read_export", "read_export_file",
           "write_export_file"]
