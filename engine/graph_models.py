"""The knowledge graph's data at its boundaries (engine/graph.py): what extraction reports and what the graph
shows around an entity, and the triples a language model proposes (its structured output)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ExtractedTriple(BaseModel):
    """One fact proposed by the model (structured output)."""

    subject: str
    relation: str
    object: str
    subject_type: str | None = None
    object_type: str | None = None


class TripleExtraction(BaseModel):
    triples: list[ExtractedTriple] = Field(default_factory=list)


class ExtractionReport(BaseModel):
    processed: int = Field(default=0, description="Memories and chunks read by the model")
    edges: int = Field(default=0, description="Edges added")
    nodes: int = Field(default=0, description="Entities added")
    rejected: dict[str, int] = Field(default_factory=dict, description="Refused candidates by reason")
    failed: int = Field(default=0, description="Items whose answer never fit the schema (skipped)")
    remaining: int = Field(default=0, description="Items still waiting for extraction")
    waiting: bool = Field(default=False, description="No language model answered; the rest waits")
    cancelled: bool = False
    note: str | None = None


class GraphNode(BaseModel):
    id: int
    name: str
    type: str | None = None
    hops: int = Field(description="Distance from the entity asked about")


class GraphEdge(BaseModel):
    src: int
    rel: str
    dst: int
    text: str = Field(description='The fact for people, e.g. "Alice —works at→ Acme"')
    sources: list[str] = Field(description="Ids of the memories (mem_…) and chunks (chk_…) it came from")


class GraphView(BaseModel):
    entity: str
    hops: int
    nodes: list[GraphNode]
    edges: list[GraphEdge]
