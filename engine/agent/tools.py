"""The agents' tools: each a typed function with a pydantic input and output model, a name, a description
and a permission level (`read_only`, `write`, `sensitive`). They run only through the dispatcher
(engine/agent/dispatcher.py), which validates, checks permissions and scope, asks, audits and times out.

A tool sees the engine through `ToolEnv` (the parts it needs, the agent's memory scope, the run's numbered
sources); its `check` says why a call is outside the agent's scope before anything runs.
"""

from __future__ import annotations

import calendar
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .. import erasure
from ..ask import Source
from ..config import MemoryScope, Permission, Settings
from ..errors import UserError
from ..graph import Graph
from ..hits import Hit
from ..ingest import Documents
from ..llm import ToolSpec
from ..memories import Memories
from ..pathpolicy import PathPolicy
from ..recall import Retriever

RESULT_CHARS = 1_500  # one memory or passage as the model reads it
FILE_CHARS = 20_000  # at most this much of a file enters the prompt


# -- the machinery ---------------------------------------------------------------------------------


class Citations:
    """The sources of one run, numbered as the model reads them ([n]); the same id keeps its number."""

    def __init__(self) -> None:
        self._by_id: dict[str, Source] = {}

    def add(self, source: Source) -> int:
        known = self._by_id.get(source.id)
        if known is not None:
            return known.n
        numbered = source.model_copy(update={"n": len(self._by_id) + 1})
        self._by_id[source.id] = numbered
        return numbered.n

    def sources(self) -> list[Source]:
        return list(self._by_id.values())


@dataclass
class ToolEnv:
    """What a tool call may use: the engine's parts, the settings, the agent's scope, the run's sources."""

    memories: Memories
    documents: Documents
    retrieval: Retriever
    graph: Graph
    settings: Settings
    home: Path
    scope: MemoryScope
    citations: Citations = field(default_factory=Citations)
    own_disk: bool = True  # False for a user of a server: the server's files are not theirs to read
    now: Callable[[], datetime] = lambda: datetime.now().astimezone()


@dataclass(frozen=True)
class Tool:
    """A typed tool. `run(input, env)` returns the output model; `check(input, env)` says why the call is
    outside the agent's scope (None: inside). `schema` overrides the input model's JSON schema (MCP)."""

    name: str
    description: str
    input: type[BaseModel]
    output: type[BaseModel]
    permission: Permission
    run: Callable[[Any, ToolEnv], BaseModel]
    check: Callable[[Any, ToolEnv], str | None] | None = None
    schema: dict[str, Any] | None = None

    def spec(self) -> ToolSpec:
        schema = self.schema if self.schema is not None else self.input.model_json_schema()
        return ToolSpec(name=self.name, description=self.description, parameters=schema)


def _clip(text: str, limit: int = RESULT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt argument is an error the model is told about


# -- scope -----------------------------------------------------------------------------------------


def _project_refused(project: str | None, scope: MemoryScope) -> str | None:
    if scope.projects is not None and project not in scope.projects:
        shown = f"project '{project}'" if project else "memories without a project"
        return f"{shown} is outside this agent's memory scope"
    return None


def write_refused(kind: str, project: str | None, scope: MemoryScope) -> str | None:
    """Why an agent may not write a memory of this kind in this project, or None."""
    if kind not in scope.write_kinds:
        return f"writing {kind} memories is outside this agent's memory scope"
    allowed = scope.write_projects if scope.write_projects is not None else scope.projects
    if allowed is not None and project not in allowed:
        shown = f"project '{project}'" if project else "memories without a project"
        return f"writing to {shown} is outside this agent's memory scope"
    return None


def _memory_write_refused(uid: str, env: ToolEnv) -> str | None:
    if not uid.startswith("mem_"):
        return f"{uid} is not a memory id (mem_…)"
    memory = env.memories.get(uid)
    return write_refused(memory.kind, memory.project, env.scope)


# -- memory search ---------------------------------------------------------------------------------


class SearchInput(_Input):
    query: str = Field(min_length=1, max_length=2000, description="What to look for, in words")
    k: int = Field(default=6, ge=1, le=20, description="How many results")
    kind: Literal["fact", "episodic", "procedural", "chunk"] | None = Field(
        default=None, description="Only memories of this kind (chunk: document passages)")
    project: str | None = Field(default=None, description="Only this project")
    since: str | None = Field(default=None, description="Only things from this time on (ISO 8601 date)")
    until: str | None = Field(default=None, description="Only things up to this time (ISO 8601 date)")


class Found(BaseModel):
    n: int = Field(description="Cite it as [n]")
    id: str
    kind: str
    text: str
    project: str | None = None
    at: str | None = None
    document_title: str | None = None
    locator: str | None = None


class SearchOutput(BaseModel):
    results: list[Found]


def _search_check(a: SearchInput, env: ToolEnv) -> str | None:
    if a.project is not None and (why := _project_refused(a.project, env.scope)):
        return why
    if a.kind == "chunk" and not env.scope.documents:
        return "documents are outside this agent's memory scope"
    if a.kind not in (None, "chunk") and a.kind not in env.scope.kinds:
        return f"{a.kind} memories are outside this agent's memory scope"
    return None


def _visible(hit: Hit, scope: MemoryScope) -> bool:
    if hit.kind == "chunk":
        return scope.documents
    return hit.kind in scope.kinds


def _found(hit: Hit, env: ToolEnv) -> Found:
    n = env.citations.add(Source.from_hit(0, hit))
    text = f"…{hit.passage}…" if hit.passage else hit.text
    return Found(n=n, id=hit.id, kind=hit.kind, text=_clip(text), project=hit.project,
                 at=(hit.at or hit.created_at or "")[:10] or None, document_title=hit.document_title,
                 locator=hit.locator)


def _search(a: SearchInput, env: ToolEnv) -> SearchOutput:
    projects: list[str | None] = [a.project] if a.project is not None else (
        [None] if env.scope.projects is None else [*env.scope.projects])
    hits: dict[str, Hit] = {}
    for project in projects:
        for hit in env.retrieval.recall(a.query, k=a.k, project=project, kind=a.kind, since=a.since,
                                        until=a.until, include_chunks=env.scope.documents):
            if _visible(hit, env.scope) and (env.scope.projects is None or hit.project in env.scope.projects):
                hits.setdefault(hit.id, hit)
    best = sorted(hits.values(), key=lambda h: -h.score)[: a.k]
    return SearchOutput(results=[_found(h, env) for h in best])


# -- documents -------------------------------------------------------------------------------------


class ListDocumentsInput(_Input):
    project: str | None = Field(default=None, description="Only this project's documents")


class DocumentInfo(BaseModel):
    id: str
    title: str
    chunks: int = Field(description="How many passages it has")
    project: str | None = None


class ListDocumentsOutput(BaseModel):
    documents: list[DocumentInfo]


def _documents_check(a: Any, env: ToolEnv) -> str | None:
    if not env.scope.documents:
        return "documents are outside this agent's memory scope"
    project = getattr(a, "project", None)
    return _project_refused(project, env.scope) if project is not None else None


def _list_documents(a: ListDocumentsInput, env: ToolEnv) -> ListDocumentsOutput:
    docs = env.documents.list_documents(a.project)
    return ListDocumentsOutput(documents=[
        DocumentInfo(id=d.id, title=d.title, chunks=d.chunks, project=d.project) for d in docs
        if env.scope.projects is None or d.project in env.scope.projects][:100])


class ReadDocumentInput(_Input):
    id: str = Field(pattern=r"^doc_\w+$", description="The document's id (doc_…)")
    offset: int = Field(default=0, ge=0, description="The first passage to read (0: the beginning)")
    limit: int = Field(default=8, ge=1, le=30, description="How many passages")


class PassageOut(BaseModel):
    n: int = Field(description="Cite it as [n]")
    id: str
    position: int
    locator: str | None = None
    text: str


class ReadDocumentOutput(BaseModel):
    id: str
    title: str
    chunks: int
    passages: list[PassageOut]


def _read_document_check(a: ReadDocumentInput, env: ToolEnv) -> str | None:
    if not env.scope.documents:
        return "documents are outside this agent's memory scope"
    return _project_refused(env.documents.get_document(a.id).project, env.scope)


def _read_document(a: ReadDocumentInput, env: ToolEnv) -> ReadDocumentOutput:
    doc = env.documents.get_document(a.id)
    out = []
    for p in env.documents.passages(a.id, offset=a.offset, limit=a.limit):
        source = Source(n=0, id=p.id, kind="chunk", text=p.text, score=0.0, similarity=0.0, at=doc.created_at,
                        document_id=doc.id, document_title=doc.title, document_path=doc.path, locator=p.locator)
        out.append(PassageOut(n=env.citations.add(source), id=p.id, position=p.position or 0, locator=p.locator,
                              text=_clip(p.text)))
    return ReadDocumentOutput(id=doc.id, title=doc.title, chunks=doc.chunks, passages=out)


# -- the graph -------------------------------------------------------------------------------------


class NeighboursInput(_Input):
    entity: str = Field(min_length=1, max_length=200, description="A person, place or thing, by name")
    hops: int = Field(default=1, ge=1, le=2, description="1: direct facts; 2: facts about those too")


class Fact(BaseModel):
    text: str = Field(description='e.g. "Alice —lives in→ Lisbon"')
    sources: list[str] = Field(description="The memories and passages it came from")


class NeighboursOutput(BaseModel):
    entity: str
    facts: list[Fact]


def _in_scope(uid: str, env: ToolEnv) -> bool:
    if uid.startswith("mem_"):
        try:
            memory = env.memories.get(uid)
        except UserError:
            return False
        return memory.kind in env.scope.kinds and (env.scope.projects is None or memory.project in env.scope.projects)
    return env.scope.documents and env.scope.projects is None  # a passage: only for an agent over every project


def _neighbours(a: NeighboursInput, env: ToolEnv) -> NeighboursOutput:
    view = env.graph.neighbours(a.entity, a.hops)
    facts = []
    for edge in view.edges:
        sources = [s for s in edge.sources if _in_scope(s, env)]
        if sources:
            facts.append(Fact(text=edge.text, sources=sources))
    return NeighboursOutput(entity=view.entity, facts=facts[:60])


# -- writing memories ------------------------------------------------------------------------------


class RememberInput(_Input):
    text: str = Field(min_length=1, max_length=10_000, description="What to remember, as one statement")
    kind: Literal["fact", "episodic", "procedural"] = "fact"
    project: str | None = Field(default=None, max_length=200)
    at: str | None = Field(default=None, description="When it happened (ISO 8601), for an event")


class RememberOutput(BaseModel):
    id: str
    merged: bool = Field(description="True when it was merged into a memory that said the same")


def _remember_check(a: RememberInput, env: ToolEnv) -> str | None:
    return write_refused(a.kind, a.project, env.scope)


def _remember(a: RememberInput, env: ToolEnv) -> RememberOutput:
    r = env.memories.remember(a.text, kind=a.kind, project=a.project, at=a.at, source="agent", embed="auto")
    return RememberOutput(id=r.id, merged=r.merged)


class UpdateInput(_Input):
    id: str = Field(pattern=r"^mem_\w+$", description="The memory's id (mem_…)")
    kind: Literal["fact", "episodic", "procedural"] | None = None
    project: str | None = Field(default=None, description="File it under this project")
    archived: bool | None = Field(default=None, description="Archive (true) or restore (false)")


class UpdateOutput(BaseModel):
    id: str
    kind: str
    project: str | None
    archived: bool


def _update_check(a: UpdateInput, env: ToolEnv) -> str | None:
    if why := _memory_write_refused(a.id, env):
        return why
    memory = env.memories.get(a.id)
    project = a.project if "project" in a.model_fields_set else memory.project
    return write_refused(a.kind or memory.kind, project, env.scope)


def _update(a: UpdateInput, env: ToolEnv) -> UpdateOutput:
    changes: dict[str, Any] = {k: getattr(a, k) for k in ("kind", "archived") if getattr(a, k) is not None}
    if "project" in a.model_fields_set:
        changes["project"] = a.project
    m = env.memories.update(a.id, **changes)
    return UpdateOutput(id=m.id, kind=m.kind, project=m.project, archived=m.archived)


class ForgetInput(_Input):
    id: str = Field(pattern=r"^mem_\w+$", description="The memory's id (mem_…)")


class ForgetOutput(BaseModel):
    id: str
    forgotten: bool


def _forget_check(a: ForgetInput, env: ToolEnv) -> str | None:
    return _memory_write_refused(a.id, env)


def _forget(a: ForgetInput, env: ToolEnv) -> ForgetOutput:
    env.memories.forget(a.id)
    if env.memories.ctx.profile is not None:  # as the facade's forget: the desktop file's older pages go too
        erasure.after_forget(env.memories.ctx.store)
    return ForgetOutput(id=a.id, forgotten=True)


# -- local files -----------------------------------------------------------------------------------


class ReadFileInput(_Input):
    path: str = Field(min_length=1, max_length=4096, description="An absolute path on this computer")
    max_chars: int = Field(default=8_000, ge=100, le=FILE_CHARS)


class ReadFileOutput(BaseModel):
    path: str
    text: str
    truncated: bool


def _policy(env: ToolEnv) -> PathPolicy:
    return PathPolicy(env.settings.ingest.allowed_folders, profile=env.home)


def _read_file_check(a: ReadFileInput, env: ToolEnv) -> str | None:
    path = Path(os.path.expanduser(a.path))
    if not path.is_absolute():
        return "the path must be absolute"
    if not env.own_disk:
        return "this memory is on a server, whose agents read no files of its disk (upload documents instead)"
    policy = _policy(env)
    if policy(path) is None:
        return None
    if policy.linked_at(path) is not None:
        return f"{path.name} is a hard link to a file in a place that holds secrets, which agents never read"
    if policy.secret(path) is not None:
        return f"{path.name} is in a place that holds secrets, which agents never read"
    return (f"{path} is outside the folders you allowed (`personal-llm folders` lists them; "
            "`personal-llm folders allow PATH` adds one)")


def _read_file(a: ReadFileInput, env: ToolEnv) -> ReadFileOutput:
    path = Path(os.path.expanduser(a.path))
    if not path.is_file():
        raise UserError(f"{path} is not a file")
    with path.open("rb") as f:
        if _policy(env).linked(path, os.fstat(f.fileno())) is not None:  # what was opened, not what was checked
            raise UserError(f"{path.name} is a hard link to a file in a place that holds secrets, which agents "
                            "never read")
        data = f.read(a.max_chars * 4 + 1)
    if b"\x00" in data[:4096]:
        raise UserError(f"{path.name} is not a text file; ingest it as a document to read it")
    text = data.decode("utf-8", errors="replace")
    return ReadFileOutput(path=str(path), text=text[: a.max_chars],
                          truncated=len(text) > a.max_chars or len(data) > a.max_chars * 4)


# -- dates -----------------------------------------------------------------------------------------


class NoInput(_Input):
    pass


class TodayOutput(BaseModel):
    date: str
    weekday: str
    time: str
    timezone: str


def _today(_a: NoInput, env: ToolEnv) -> TodayOutput:
    now = env.now()
    return TodayOutput(date=now.date().isoformat(), weekday=now.strftime("%A"), time=now.strftime("%H:%M"),
                       timezone=now.strftime("%Z") or now.strftime("%z"))


def _day(value: str | None, env: ToolEnv) -> date:
    if value is None or value.strip().lower() in ("", "today", "now"):
        return env.now().date()
    try:
        return datetime.fromisoformat(value.strip().replace("Z", "+00:00")).date()
    except ValueError:
        raise UserError(f"'{value}' is not a date in ISO 8601 form (YYYY-MM-DD)") from None


class DifferenceInput(_Input):
    start: str = Field(description="The earlier date (YYYY-MM-DD, or an ISO time)")
    end: str | None = Field(default=None, description="The later date; default today")


class DifferenceOutput(BaseModel):
    days: int = Field(description="end − start in days (negative when end is before start)")
    weeks: float
    years: int
    months: int = Field(description="Whole months after the whole years")
    remaining_days: int = Field(description="Days after the whole years and months")
    description: str


def _months_between(a: date, b: date) -> tuple[int, int, int]:
    """Whole years, months and days from a to b (a <= b)."""
    months = (b.year - a.year) * 12 + b.month - a.month
    if b.day < a.day:
        months -= 1
    anchor = _add_months(a, months)
    return months // 12, months % 12, (b - anchor).days


def _difference(a: DifferenceInput, env: ToolEnv) -> DifferenceOutput:
    start, end = _day(a.start, env), _day(a.end, env)
    days = (end - start).days
    years, months, rest = _months_between(min(start, end), max(start, end))
    parts = [f"{n} {unit}{'s' if n != 1 else ''}" for n, unit in ((years, "year"), (months, "month"), (rest, "day"))
             if n]
    span = ", ".join(parts) or "0 days"
    when = "the same day" if days == 0 else f"{span} {'after' if days > 0 else 'before'}"
    return DifferenceOutput(days=days, weeks=round(days / 7, 1), years=years, months=months, remaining_days=rest,
                            description=f"{end.isoformat()} is {when} {start.isoformat()}" if days else when)


def _add_months(d: date, months: int) -> date:
    total = d.year * 12 + d.month - 1 + months
    year, month = divmod(total, 12)
    return date(year, month + 1, min(d.day, calendar.monthrange(year, month + 1)[1]))


class AddInput(_Input):
    date: str | None = Field(default=None, description="The date to start from (YYYY-MM-DD); default today")
    days: int = Field(default=0, ge=-100_000, le=100_000)
    weeks: int = Field(default=0, ge=-10_000, le=10_000)
    months: int = Field(default=0, ge=-5_000, le=5_000)
    years: int = Field(default=0, ge=-500, le=500)


class AddOutput(BaseModel):
    date: str
    weekday: str


def _add(a: AddInput, env: ToolEnv) -> AddOutput:
    try:
        d = _add_months(_day(a.date, env), a.months + 12 * a.years) + timedelta(days=a.days + 7 * a.weeks)
    except (OverflowError, ValueError):
        raise UserError("that date is out of the calendar's range") from None
    return AddOutput(date=d.isoformat(), weekday=d.strftime("%A"))


# -- the built-in tools ----------------------------------------------------------------------------


BUILTIN_TOOLS: tuple[Tool, ...] = (
    Tool("search_memory", "Search the person's memory (facts, events, how-tos and document passages) by words "
         "and meaning, best first. Results are numbered for citing.", SearchInput, SearchOutput, "read_only",
         _search, _search_check),
    Tool("list_documents", "List the person's documents (id, title, how many passages).", ListDocumentsInput,
         ListDocumentsOutput, "read_only", _list_documents, _documents_check),
    Tool("read_document", "Read a document's passages in order, some at a time. Passages are numbered for "
         "citing.", ReadDocumentInput, ReadDocumentOutput, "read_only", _read_document, _read_document_check),
    Tool("graph_neighbours", "Facts of the knowledge graph around a person, place or thing, with the memories "
         "they came from.", NeighboursInput, NeighboursOutput, "read_only", _neighbours),
    Tool("remember", "Store a new memory (a fact, an event with its date, or a how-to).", RememberInput,
         RememberOutput, "write", _remember, _remember_check),
    Tool("update_memory", "File a memory: change its kind or project, or archive or restore it.", UpdateInput,
         UpdateOutput, "write", _update, _update_check),
    Tool("forget_memory", "Delete a memory and everything derived from it, for good.", ForgetInput, ForgetOutput,
         "sensitive", _forget, _forget_check),
    Tool("read_file", "Read a text file on this computer, from the folders the person allowed.", ReadFileInput,
         ReadFileOutput, "read_only", _read_file, _read_file_check),
    Tool("today", "Today's date, weekday and time.", NoInput, TodayOutput, "read_only", _today),
    Tool("date_difference", "How long between two dates (default end: today), in days and in years, months "
         "and days: answers 'how long ago was…'.", DifferenceInput, DifferenceOutput, "read_only", _difference),
    Tool("date_add", "A date plus (or minus) days, weeks, months or years.", AddInput, AddOutput, "read_only",
         _add),
)
