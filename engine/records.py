"""The records of the export format (validated on import; unknown fields are ignored for forward
compatibility), and the conversions of times, projects and metadata they go through."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .cipher import FORMAT, FORMAT_VERSION
from .errors import UserError
from .memory_rules import parse_time
from .models import iso


class Record(BaseModel):
    model_config = ConfigDict(extra="ignore")


class HeaderRecord(Record):
    type: Literal["header"] = "header"
    format: Literal["personal-llm-export"] = FORMAT
    version: int = FORMAT_VERSION
    exported_at: str
    app_version: str = ""
    schema_version: int = 0
    counts: dict[str, int] = Field(default_factory=dict)


class DocumentRecord(Record):
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


class ChunkRecord(Record):
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


class ConversationRecord(Record):
    type: Literal["conversation"] = "conversation"
    uid: str
    title: str | None = None
    project: str | None = None
    created_at: str
    updated_at: str
    meta: dict[str, Any] = Field(default_factory=dict)


class MessageRecord(Record):
    type: Literal["message"] = "message"
    conversation: str
    role: Literal["system", "user", "assistant"]
    content: str
    created_at: str
    meta: dict[str, Any] = Field(default_factory=dict)


class MemoryRecord(Record):
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


class DerivationRecord(Record):
    type: Literal["derivation"] = "derivation"
    derived: str
    source: str


class FactCheckRecord(Record):
    """A judged pair of facts (consistent, conflict, not a conflict, resolved by the user)."""

    type: Literal["fact_check"] = "fact_check"
    a: str
    b: str
    pair_hash: str
    verdict: Literal["consistent", "conflict", "not_conflict", "resolved"]
    checked_at: str


class NodeRecord(Record):
    type: Literal["node"] = "node"
    name: str
    norm_name: str
    node_type: str | None = None
    aliases: list[str] = Field(default_factory=list)
    created_at: str
    meta: dict[str, Any] = Field(default_factory=dict)


class EdgeRecord(Record):
    type: Literal["edge"] = "edge"
    src: str = Field(description="norm_name of the source node")
    rel: str
    dst: str = Field(description="norm_name of the target node")
    weight: float = 1.0
    memory: str | None = Field(default=None, description="uid of the memory it was derived from")
    chunk: str | None = Field(default=None, description="uid of the chunk it was derived from")
    created_at: str
    meta: dict[str, Any] = Field(default_factory=dict)


class AuditRecord(Record):
    type: Literal["audit"] = "audit"
    at: str
    actor: str
    action: str
    target: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class PlainMemory(Record):
    """One line of a plain JSONL from another tool."""

    text: str = Field(min_length=1)
    kind: Literal["fact", "episodic", "procedural"] = "fact"
    at: str | float | None = None
    project: str | None = None
    importance: float | None = Field(default=None, ge=0.0, le=1.0)


RECORDS: dict[str, type[Record]] = {
    "document": DocumentRecord, "chunk": ChunkRecord, "conversation": ConversationRecord,
    "message": MessageRecord, "memory": MemoryRecord, "derivation": DerivationRecord,
    "fact_check": FactCheckRecord, "node": NodeRecord,
    "edge": EdgeRecord, "audit": AuditRecord,
}


# what a push asks the server it holds already, by type: the column a record's key is in
KNOWN_KEYS = {"memory": "uid", "document": "uid", "chunk": "uid", "conversation": "uid", "node": "norm_name"}


def turn_key(role: str, content: str, at: float) -> str:
    """A conversation's turn as a push compares it with the turns the server holds: the same words, said by the
    same side, in the same millisecond (a time read back a hair apart only makes a turn go again, and the
    server's merge skips it)."""
    return hashlib.sha256(f"{role}\x00{int(at * 1000)}\x00{content}".encode()).hexdigest()[:32]


def to_iso(ts: float | None) -> str | None:
    return iso(ts, "microseconds")


def to_ts(value: str | float | None) -> float | None:
    return parse_time(value)


def required_ts(value: str) -> float:
    t = to_ts(value)
    if t is None:
        raise UserError("A required time is missing in the import file.")
    return t


def to_json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True)


def clean_project(project: str | None) -> str | None:
    return (project or "").strip() or None


TIME_EPS = 5e-6  # times pass through ISO text with microsecond precision


def _meta(raw: str | None) -> dict[str, Any]:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {"value": value}


# a store's row (the columns each backend's export query reads, in this order) as its record
ROW_TO_RECORD: dict[str, Callable[[tuple], Record]] = {
    "document": lambda r: DocumentRecord(
        uid=r[0], path=r[1], title=r[2], mime=r[3], content_hash=r[4], size=r[5], mtime=r[6], project=r[7],
        chunk_count=r[8], created_at=to_iso(r[9]) or "", updated_at=to_iso(r[10]) or "", meta=_meta(r[11])),
    "chunk": lambda r: ChunkRecord(
        uid=r[0], document=r[1], position=r[2], text=r[3], locator=r[4] or "", page=r[5], heading=r[6],
        token_count=r[7], extracted=bool(r[8])),
    "conversation": lambda r: ConversationRecord(
        uid=r[0], title=r[1], project=r[2], created_at=to_iso(r[3]) or "", updated_at=to_iso(r[4]) or "",
        meta=_meta(r[5])),
    "message": lambda r: MessageRecord(
        conversation=r[0], role=r[1], content=r[2], created_at=to_iso(r[3]) or "", meta=_meta(r[4])),
    "memory": lambda r: MemoryRecord(
        uid=r[0], kind=r[1], text=r[2], importance=r[3], created_at=to_iso(r[4]) or "", updated_at=to_iso(r[5]) or "",
        at=to_iso(r[6]), last_accessed_at=to_iso(r[7]), access_count=r[8], archived=bool(r[9]),
        archived_at=to_iso(r[10]), project=r[11], source=r[12], document=r[13], conversation=r[14],
        conflict_with=r[15], processed=bool(r[16]), extracted=bool(r[17]), meta=_meta(r[18]), decayed_at=to_iso(r[19])),
    "derivation": lambda r: DerivationRecord(derived=r[0], source=r[1]),
    "fact_check": lambda r: FactCheckRecord(a=r[0], b=r[1], pair_hash=r[2], verdict=r[3], checked_at=to_iso(r[4]) or ""),
    "node": lambda r: NodeRecord(
        name=r[0], norm_name=r[1], node_type=r[2], aliases=_aliases(r[3]), created_at=to_iso(r[4]) or "",
        meta=_meta(r[5])),
    "edge": lambda r: EdgeRecord(
        src=r[0], rel=r[1], dst=r[2], weight=r[3], memory=r[4], chunk=r[5], created_at=to_iso(r[6]) or "",
        meta=_meta(r[7])),
    "audit": lambda r: AuditRecord(at=to_iso(r[0]) or "", actor=r[1], action=r[2], target=r[3], detail=_meta(r[4])),
}


def _aliases(raw: str | None) -> list[str]:
    try:
        value = json.loads(raw or "[]")
    except ValueError:
        return []
    return [str(a) for a in value] if isinstance(value, list) else []
