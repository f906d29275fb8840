"""The engine's data at its boundaries (SDK, CLI JSON, HTTP, MCP, desktop bridge)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .hits import KINDS as KINDS
from .hits import Kind as Kind
from .hits import iso as iso

Actor = Literal["cli", "desktop", "api", "mcp", "engine", "consolidation", "sdk"]


class Memory(BaseModel):
    id: str
    kind: Kind
    text: str
    project: str | None = None
    importance: float
    created_at: str
    updated_at: str
    at: str | None = Field(default=None, description="When it happened (event time), if given")
    last_accessed_at: str | None = None
    access_count: int = 0
    archived: bool = False
    source: str = "user"
    conflict_with: str | None = None
    embedded: bool = Field(default=False, description="Its vector is stored (semantic recall finds it)")
    meta: dict[str, Any] = Field(default_factory=dict)


class RememberResult(BaseModel):
    id: str
    merged: bool = Field(description="True when it was a near-duplicate, merged into an existing memory")
    memory: Memory


class Hit(BaseModel):
    """One recall result: a memory or a document chunk."""

    # the JSON form of the engine's hit (engine/hits.py, plain data with the same fields): the HTTP API and
    # MCP describe and check what they send with it, and read the engine's hits by their attributes
    model_config = ConfigDict(from_attributes=True)

    id: str
    kind: str  # fact | episodic | procedural | chunk
    text: str
    score: float
    similarity: float = Field(description="Fused relevance in [0, 1] (lexical and semantic)")
    cosine: float | None = Field(default=None, description="Cosine similarity to the query, if embedded")
    importance: float
    recency: float
    project: str | None = None
    at: str | None = None
    created_at: str | None = None
    archived: bool = False
    conflict_with: str | None = None
    conflict: str | None = Field(default=None, description="A sentence for people when this fact is contested")
    document_id: str | None = None
    document_title: str | None = None
    document_path: str | None = None
    locator: str | None = None
    passage: str | None = Field(default=None, description="For a long memory: the part that matched best")
    via: list[str] = Field(default_factory=list, description="Which indexes found it: fts, vector, graph")


class ForgetResult(BaseModel):
    id: str
    type: Literal["memory", "document", "conversation"]
    removed: dict[str, int] = Field(default_factory=dict)


class Stats(BaseModel):
    store: str
    schema_version: int
    memories: int = Field(description="The user's memories (not archived), without the app's own events")
    by_kind: dict[str, int]
    activity: int = Field(default=0, description="The app's own events (\"Ingested X\"), not counted as memories")
    archived: int
    conflicts: int = Field(description="Pairs of facts flagged as contradicting each other, to resolve")
    documents: int
    documents_failed: int = Field(default=0, description="Documents that could not be ingested and are not retried "
                                                         "on their own (`personal-llm documents --failed`)")
    documents_interrupted: int = Field(default=0, description="Documents an interrupted ingest left half-indexed "
                                                              "(not searchable yet): the next ingest finishes them")
    chunks: int
    nodes: int
    edges: int
    pending_embeddings: int
    pending_extraction: int
    pending_rollup: int
    embedding_model: str
    embedding_dimension: int | None
    embedding_ready: bool
    llm: str | None = None
    notes: list[str] = Field(default_factory=list)


class MemoryPage(BaseModel):
    """One page of the memories listing, newest first, and how many the listing holds in all. `next` goes on
    after this page (hand it back as `after`); None on the last page. `total` is None when it was not asked for."""

    memories: list[Memory]
    total: int | None
    next: str | None = None


class AuditEntry(BaseModel):
    id: int
    at: str
    actor: str
    action: str
    target: str | None
    detail: dict[str, Any]


class AuditRun(BaseModel):
    """Consecutive audit rows of one kind (one actor, one action, one kind of item, no long pause between
    them): a batch of 3,000 writes is one run. `entries` holds the newest of them, `count` all of them."""

    count: int
    newest_at: str
    oldest_at: str
    entries: list[AuditEntry]
    totals: dict[str, int] = Field(default_factory=dict, description="the detail counts summed over the run; a flag's: how many rows have it")


class HealthReport(BaseModel):
    """What works and what is missing (the embedding model, the language model), for people."""

    embedding: str = Field(description="ready | loading | failed | off")
    embedding_detail: str
    llm_ok: bool
    llm_detail: str
    llm_models: tuple[str, ...] = Field(default=(), description="What the model server offers")


class StoreDiagnostics(BaseModel):
    """How the open store is built, for the self-test."""

    schema_version: int
    expected_schema_version: int
    cipher_version: str | None
    vec_version: str
    vec_length_ok: bool = Field(description="sqlite-vec computes the length of a 3-dimensional vector as 3")
