"""What a recall gives, as plain data: one `Hit` per memory or document chunk found, with the memory kinds
and the time format it is written with. No pydantic here: a short command (a CLI `recall`) imports this and
not the boundary models (engine/models.py), whose library costs a cold process ~0.15 s. The HTTP API and
MCP describe and send a hit with engine/models.py's `Hit`, which has the same fields."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, Literal, overload

Kind = Literal["fact", "episodic", "procedural"]
KINDS: tuple[str, ...] = ("fact", "episodic", "procedural")


@overload
def iso(ts: float, timespec: str = ...) -> str: ...
@overload
def iso(ts: None, timespec: str = ...) -> None: ...
def iso(ts: float | None, timespec: str = "seconds") -> str | None:
    """A stored time as ISO 8601 in UTC; None for none, or for a time no date can show (one stored before
    times were checked)."""
    if ts is None:
        return None
    try:
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec=timespec)
    except (ValueError, OverflowError, OSError):
        return None


@dataclass(kw_only=True)
class Hit:
    """One recall result: a memory or a document chunk (engine/models.py's `Hit` describes each field)."""

    id: str
    kind: str  # fact | episodic | procedural | chunk
    text: str
    score: float
    similarity: float  # fused relevance in [0, 1] (lexical and semantic)
    cosine: float | None = None  # cosine similarity to the query, if embedded
    importance: float
    recency: float
    project: str | None = None
    at: str | None = None
    created_at: str | None = None
    archived: bool = False
    conflict_with: str | None = None
    conflict: str | None = None  # a sentence for people when this fact is contested
    document_id: str | None = None
    document_title: str | None = None
    document_path: str | None = None
    locator: str | None = None
    passage: str | None = None  # for a long memory: the part that matched best
    via: list[str] = field(default_factory=list)  # which indexes found it: fts, vector, graph

    def __post_init__(self) -> None:
        # plain floats (a score computed with numpy is numpy's), as the JSON and every door show them
        self.score, self.similarity = float(self.score), float(self.similarity)
        self.importance, self.recency = float(self.importance), float(self.recency)
        if self.cosine is not None:
            self.cosine = float(self.cosine)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Hit:
        """A hit from its JSON object (the HTTP API's answer); fields this version does not know are left out."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    def model_dump(self, *, mode: str = "python") -> dict[str, Any]:
        """The hit as a dict, field by field (as the HTTP API and `recall --json` send it)."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), list) else v for f in fields(self)}
