"""The records of the export format (validated on import; unknown fields are ignored for forward
compatibility), and the conversions of times, projects and metadata they go through."""

from __future__ import annotations

import json
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
