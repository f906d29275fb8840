"""Agents (`engine.agents`): configurations over one loop.

An agent is a name, a system prompt, its tools, its memory scope, the `write` tools it may run without
asking and its limits (`engine.config.AgentSettings`). Two are built in — Research and Organiser — and
the person adds their own in the settings (`agents.agents`); one of theirs with a built-in's name
replaces it.

The loop: the task → the model, offered the agent's tools through its native tool calling → each call
through the dispatcher → its result back to the model inside `<untrusted_content>` → again, until the
model answers without calling a tool, or the step or time limit is reached (then it is asked once more,
without tools, to answer from what it found). Every step is handed to `on_step` as it happens. The
answer cites the numbered sources the tools returned, like Ask's, and the memories it cites are
marked used the way Ask marks them.

Privacy: the task, prompts, arguments and results are never logged or audited; the audit log holds
the run's ids and counts (engine/agent/dispatcher.py).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..ask import Source, cited
from ..config import AgentSettings, MemoryScope, Permission
from ..context import Context
from ..errors import Cancelled, NotFound, UserError
from ..graph import Graph
from ..ingest import Documents
from ..language import LanguageModel
from ..llm import LLMUnavailable, Message, ToolCall
from ..memories import Memories
from ..prompts import prompt, untrusted
from ..recall import Retriever
from ..settings_file import SavedSection
from . import mcp_tools
from .dispatcher import Confirm, ConfirmRequest, Dispatcher, Observation
from .tools import BUILTIN_TOOLS, Citations, Tool, ToolEnv

log = logging.getLogger(__name__)

DEFAULT_AGENT = "Research"
NO_ANSWER = "The agent stopped without an answer."
READ_TOOLS = ["search_memory", "list_documents", "read_document", "graph_neighbours", "today", "date_difference",
              "date_add"]

BUILTIN_AGENTS: tuple[AgentSettings, ...] = (
    AgentSettings(
        name="Research",
        description="Looks things up in your memories and documents and answers with sources. Reads only.",
        system_prompt="Find what the task needs in the person's memories and documents. Search with a few "
                      "different words when the first search misses; read a document's passages when a "
                      "result points into it. Then answer, citing the numbered sources.",
        tools=[*READ_TOOLS, "read_file"],
        scope=MemoryScope(),
        max_steps=6,
    ),
    AgentSettings(
        name="Organiser",
        description="Tidies your memories: files them under projects, fixes their kind, archives or deletes "
                    "duplicates and stores new ones. Asks before every change.",
        system_prompt="Tidy the person's memories as the task asks: search first, then file memories under "
                      "the right project or kind, archive what is out of date, store what is missing. Delete "
                      "only what the task asks you to delete. Say what you changed, citing the sources.",
        tools=[*READ_TOOLS, "remember", "update_memory", "forget_memory"],
        scope=MemoryScope(write_kinds=["fact", "episodic", "procedural"]),
        max_steps=10,
    ),
)


# -- data ------------------------------------------------------------------------------------------


StepKind = Literal["text", "call", "confirm", "observation", "answer"]


class AgentStep(BaseModel):
    """One step of a run, as it happens. `text`: a piece of what the model writes (its plan, or the
    answer); `call`: a tool it asks for; `confirm`: the person is being asked; `observation`: what the call
    gave (`status`, `summary`, and `result`, what the model read); `answer`: the final answer, whole."""

    kind: StepKind
    step: int = Field(description="Which turn of the model (1, 2, …)")
    text: str | None = None
    call_id: str | None = None
    tool: str | None = None
    permission: Permission | None = None
    arguments: dict[str, Any] | None = None
    status: str | None = None
    summary: str | None = None
    result: str | None = None


class AgentRun(BaseModel):
    run_id: str
    agent: str
    answer: str
    sources: list[Source] = Field(description="What the tools returned, numbered as cited")
    steps: list[AgentStep] = Field(description="The transcript (without the streamed pieces of text)")
    stopped: Literal["answered", "step_limit", "time_limit"]
    tool_calls: int
    model: str


class ToolInfo(BaseModel):
    name: str
    description: str
    permission: Permission
    asks: bool = Field(description="The person is asked before it runs")


class AgentInfo(BaseModel):
    name: str
    description: str
    builtin: bool
    system_prompt: str
    tools: list[ToolInfo]
    unknown_tools: list[str] = Field(default_factory=list, description="Named in the settings, but not found")
    scope: MemoryScope
    allowed: list[str]
    max_steps: int
    time_limit: float


def _summary(o: Observation) -> str:
    if o.status == "ok":
        return "done" if o.count is None else f"{o.count} result{'s' if o.count != 1 else ''}"
    return o.text.removeprefix(f"tool {o.tool} ")


# -- the part --------------------------------------------------------------------------------------


class Agents:
    """Agent configurations and their runs (`engine.agents`)."""

    def __init__(self, ctx: Context, memories: Memories, documents: Documents, retrieval: Retriever, graph: Graph,
                 language: LanguageModel):
        self.ctx = ctx
        self.memories = memories
        self.documents = documents
        self.retrieval = retrieval
        self.graph = graph
        self.language = language
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._saved = SavedSection(ctx.home, "agents", seen=False)  # the file may have changed since the open

    # -- configurations ----------------------------------------------------------------------------
    def _follow_saved_settings(self) -> None:
        """An agent added by another program (`personal-llm agent add`, an edit of settings.json) while this
        engine runs (the app, a server) is used from now on, as after a restart."""
        saved = self._saved.changed(self.ctx.settings.agents)
        if saved is not None:
            self.ctx.settings = self.ctx.settings.model_copy(update={"agents": saved})
            log.info("agent settings changed on disk: %d of the person's own", len(saved.agents))

    def configs(self) -> list[AgentSettings]:
        """The built-in agents, then the person's (one with a built-in's name replaces it)."""
        self._follow_saved_settings()
        own = {a.name.casefold(): a for a in self.ctx.settings.agents.agents}
        out = [own.pop(a.name.casefold(), a) for a in BUILTIN_AGENTS]
        return out + list(own.values())

    def config(self, name: str | None = None) -> AgentSettings:
        wanted = (name or DEFAULT_AGENT).strip().casefold()
        for a in self.configs():
            if a.name.casefold() == wanted:
                return a
        names = ", ".join(a.name for a in self.configs())
        raise NotFound(f"There is no agent called '{name}'. The agents are: {names}.")

    def catalogue(self) -> list[AgentInfo]:
        return [self.info(a.name, list_servers=False) for a in self.configs()]

    def info(self, name: str | None = None, *, list_servers: bool = True) -> AgentInfo:
        """An agent's configuration with its tools resolved (MCP servers are asked unless not `list_servers`)."""
        cfg = self.config(name)
        with mcp_tools.Links() as links:
            tools, unknown = self._resolve(cfg, links, list_servers=list_servers)
        builtin = any(a.name == cfg.name for a in BUILTIN_AGENTS) and cfg not in self.ctx.settings.agents.agents
        return AgentInfo(
            name=cfg.name, description=cfg.description, builtin=builtin, system_prompt=cfg.system_prompt,
            tools=[ToolInfo(name=t.name, description=t.description, permission=t.permission,
                            asks=t.permission == "sensitive" or (t.permission == "write" and t.name not in cfg.allowed))
                   for t in tools.values()],
            unknown_tools=unknown, scope=cfg.scope, allowed=cfg.allowed, max_steps=cfg.max_steps,
            time_limit=cfg.time_limit,
        )

    def _resolve(self, cfg: AgentSettings, links: mcp_tools.Links, *,
                 list_servers: bool = True) -> tuple[dict[str, Tool], list[str]]:
        builtin = {t.name: t for t in BUILTIN_TOOLS}
        servers = {s.name: s for s in self.ctx.settings.agents.mcp_servers}
        tools: dict[str, Tool] = {}
        unknown: list[str] = []
        for entry in cfg.tools:
            if not entry.startswith("mcp:"):
                if entry in builtin:
                    tools[entry] = builtin[entry]
                else:
                    unknown.append(entry)
                continue
            server_name, _, only = entry.removeprefix("mcp:").partition("/")
            server = servers.get(server_name)
            if server is None:
                unknown.append(entry)
                continue
            if not list_servers:
                continue
            offered = mcp_tools.server_tools(server, links)
            picked = [t for t in offered if not only or t.name == f"{server.name}{mcp_tools.SEPARATOR}{only}"]
            if only and not picked:
                unknown.append(entry)
            tools.update({t.name: t for t in picked})
        return tools, unknown

    # -- a run -------------------------------------------------------------------------------------

    def prepare(self, agent: str | None = None, project: str | None = None) -> str:
        """Raise what `run` would raise before its first step (no such agent, a project outside its scope, no
        model); the agent's name when it can run."""
        cfg = self.config(agent)
        _narrowed(cfg.scope, project)
        router, why = self.language.ready()
        if router is None:
            raise LLMUnavailable(f"An agent needs a language model. {why}")
        return cfg.name

    def run(self, task: str, *, agent: str | None = None, project: str | None = None,
            on_step: Callable[[AgentStep], None] | None = None, confirm: Confirm | None = None,
            cancel: threading.Event | None = None, run_id: str | None = None) -> AgentRun:
        """Do `task` with the agent (default Research); see the module's docstring. `confirm` is asked before
        a `sensitive` call (and a `write` one the agent is not allowed): without it, those calls are
        declined. `cancel` stops the run at the next piece of text, tool call or confirmation
        (`Cancelled`); what was written before stays written. `run_id` names the run (default: a new id)."""
        with mcp_tools.Links() as links:  # the run's MCP sessions end with it
            return self._run(task, links, agent=agent, project=project, on_step=on_step, confirm=confirm,
                             cancel=cancel, run_id=run_id)

    def _run(self, task: str, links: mcp_tools.Links, *, agent: str | None, project: str | None,
             on_step: Callable[[AgentStep], None] | None, confirm: Confirm | None, cancel: threading.Event | None,
             run_id: str | None) -> AgentRun:
        task = (task or "").strip()
        if not task:
            raise UserError("An agent needs a task.")
        cfg = self.config(agent)
        scope = _narrowed(cfg.scope, project)
        router, why = self.language.ready()
        if router is None:
            raise LLMUnavailable(f"An agent needs a language model. {why}")
        tools, unknown = self._resolve(cfg, links)
        if unknown:
            raise UserError(f"The agent '{cfg.name}' names tools that do not exist: {', '.join(unknown)}. "
                            "Fix its settings (`personal-llm agent show` lists them).")
        run_id = run_id or new_run_id()
        env = ToolEnv(memories=self.memories, documents=self.documents, retrieval=self.retrieval, graph=self.graph,
                      settings=self.ctx.settings, home=self.ctx.home, scope=scope, citations=Citations(),
                      own_disk=self.ctx.profile is not None)
        started = time.monotonic()
        actor = f"agent:{cfg.name}"
        self.ctx.audit.record("agent_run", run_id, {"phase": "start", "via": self.ctx.actor, "tools": len(tools),
                                                    "project": project is not None}, actor=actor)
        steps: list[AgentStep] = []

        def emit(step: AgentStep) -> None:
            if step.kind != "text":
                steps.append(step)
            if on_step is not None:
                on_step(step)

        def stop_check() -> None:
            if cancel is not None and cancel.is_set():
                raise Cancelled("The agent was stopped.")

        step = 0

        def asking(request: ConfirmRequest) -> bool:  # the person is asked: a step of its own
            emit(AgentStep(kind="confirm", step=step, call_id=request.call_id, tool=request.tool,
                           permission=request.permission, arguments=request.arguments))
            return bool(confirm(request)) if confirm is not None else False

        dispatcher = Dispatcher(tools, cfg, env, self.ctx.audit, run_id=run_id, via=self.ctx.actor,
                                pool=self._workers(), confirm=asking if confirm is not None else None, cancel=cancel)
        messages = [Message(role="system", content=self._system_prompt(cfg, env)),
                    Message(role="user", content=task)]
        specs = [t.spec() for t in tools.values()]
        answer: str | None = None
        stopped: Literal["answered", "step_limit", "time_limit"] = "step_limit"
        calls = 0
        try:
            while step < cfg.max_steps:
                stop_check()
                if time.monotonic() - started > cfg.time_limit:
                    stopped = "time_limit"
                    break
                step += 1
                turn = router.chat_tools(messages, specs, on_text=self._texts(step, emit, stop_check))
                if not turn.tool_calls:
                    answer, stopped = turn.text, "answered"
                    break
                messages.append(Message(role="assistant", content=turn.text, tool_calls=tuple(turn.tool_calls)))
                for call in turn.tool_calls:
                    calls += 1
                    messages.append(self._dispatch(dispatcher, call, step, tools, emit))
            if answer is None:  # out of steps or time: one more turn, without tools, to answer from what it has
                step += 1
                limit = f"all {cfg.max_steps} steps" if stopped == "step_limit" else "the time allowed"
                messages.append(Message(role="user", content=f"You have used {limit}; no more tools can be "
                                        "called. Answer the task now from the tool results above, citing their "
                                        "numbers, and say what is still missing."))
                answer = router.chat_tools(messages, [], on_text=self._texts(step, emit, stop_check)).text
        except Cancelled:
            self.ctx.audit.record("agent_run", run_id, {"phase": "end", "stopped": "cancelled", "steps": step,
                                                        "calls": calls}, actor=actor)
            raise
        answer = answer.strip() or NO_ANSWER
        sources = env.citations.sources()
        emit(AgentStep(kind="answer", step=step, text=answer))
        cited_ids = [s.id for s in sources if s.n in cited(answer)]
        self.memories.mark_used(cited_ids, how="cited")  # as Ask: a source the answer cites is used
        self.ctx.audit.record("agent_run", run_id, {"phase": "end", "stopped": stopped, "steps": step, "calls": calls,
                                                    "sources": len(sources), "cited": len(cited_ids)}, actor=actor)
        log.info("agent %s (%s): %d steps, %d calls, %s, %.2fs", run_id, cfg.name, step, calls, stopped,
                 time.monotonic() - started)
        return AgentRun(run_id=run_id, agent=cfg.name, answer=answer, sources=sources, steps=steps, stopped=stopped,
                        tool_calls=calls, model=router.config.model)

    def _dispatch(self, dispatcher: Dispatcher, call: ToolCall, step: int, tools: dict[str, Tool],
                  emit: Callable[[AgentStep], None]) -> Message:
        tool = tools.get(call.name)
        permission = tool.permission if tool else None
        emit(AgentStep(kind="call", step=step, call_id=call.id, tool=call.name, permission=permission,
                       arguments=dict(call.arguments)))
        observation = dispatcher.call(call)
        emit(AgentStep(kind="observation", step=step, call_id=call.id, tool=call.name, permission=permission,
                       status=observation.status, summary=_summary(observation), result=observation.text))
        return Message(role="tool", content=untrusted(observation.text), tool_call_id=call.id, name=call.name)

    @staticmethod
    def _texts(step: int, emit: Callable[[AgentStep], None], stop_check: Callable[[], None]) -> Callable[[str], None]:
        def on_text(piece: str) -> None:
            stop_check()
            emit(AgentStep(kind="text", step=step, text=piece))

        return on_text

    def _system_prompt(self, cfg: AgentSettings, env: ToolEnv) -> str:
        parts = [prompt("agent")]
        if cfg.system_prompt.strip():
            parts.append(f"Your role ({cfg.name}): {cfg.system_prompt.strip()}")
        parts.append(f"Today is {env.now().strftime('%A %Y-%m-%d')}.")
        return "\n\n".join(parts)

    def _workers(self) -> ThreadPoolExecutor:
        """The threads tools run on: a few long-lived ones, so each keeps its store connection."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="agent-tool")
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def new_run_id() -> str:
    return f"run_{secrets.token_hex(6)}"


def _narrowed(scope: MemoryScope, project: str | None) -> MemoryScope:
    """The agent's scope for a run over one project."""
    project = (project or "").strip() or None
    if project is None:
        return scope
    if scope.projects is not None and project not in scope.projects:
        raise UserError(f"The project '{project}' is outside this agent's memory scope.")
    writable = scope.write_projects
    if writable is not None and project not in writable:
        writable = []
    return scope.model_copy(update={"projects": [project], "write_projects": [project] if writable != [] else []})


__all__ = ["AgentInfo", "AgentRun", "AgentStep", "Agents", "ConfirmRequest", "ToolInfo"]
