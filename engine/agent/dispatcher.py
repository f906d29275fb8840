"""The one door every tool call goes through.

In order: audit "before" → find the tool → is it one of the agent's tools → validate the arguments
against its input model → is the call inside the agent's memory scope → ask the person when the tool
is `sensitive` (always) or `write` (unless the agent is allowed it) → run it on a worker thread with a
timeout → audit "after". Whatever goes wrong becomes an `Observation` the model reads ("tool X failed:
…"), never an exception, except the person's Stop (`Cancelled`).

The audit entries hold the run, the call, the tool, the permission, the argument *names*, the ids the
arguments and the result name (mem_…, doc_…, chk_…), counts, the outcome and the time taken; never the
arguments' values, memory text or file contents.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from ..audit import AuditLog
from ..config import AgentSettings, Permission
from ..errors import Cancelled, UserError
from ..llm import ToolCall
from .tools import Tool, ToolEnv

log = logging.getLogger(__name__)

_ID = re.compile(r"^(?:mem|doc|chk)_[0-9A-Za-z]+$")
_POLL = 0.1  # seconds between looks at the Stop flag while a tool runs


class ConfirmRequest(BaseModel):
    """What the person is asked before a `sensitive` (or not allowed `write`) tool runs."""

    run_id: str
    call_id: str
    agent: str
    tool: str
    description: str
    permission: Permission
    arguments: dict[str, Any]


Confirm = Callable[[ConfirmRequest], bool]
Status = Literal["ok", "failed", "refused", "declined", "timeout"]


class Observation(BaseModel):
    """The outcome of one call: `text` is what the model reads (inside `<untrusted_content>`)."""

    call_id: str
    tool: str
    status: Status
    text: str
    ids: list[str] = Field(default_factory=list)
    count: int | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _ids(value: Any, out: list[str]) -> list[str]:
    if isinstance(value, str):
        if _ID.match(value) and value not in out:
            out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _ids(v, out)
    elif isinstance(value, list | tuple):
        for v in value:
            _ids(v, out)
    return out


def _count(output: dict[str, Any]) -> int | None:
    """How many results a tool gave (the length of its output's list), None for a single result."""
    lists = [v for v in output.values() if isinstance(v, list)]
    return len(lists[0]) if lists else None


class Dispatcher:
    """Runs one agent's tool calls (see the module's docstring). `pool` runs the tools; `confirm` asks."""

    def __init__(self, tools: dict[str, Tool], agent: AgentSettings, env: ToolEnv, audit: AuditLog, *,
                 run_id: str, via: str, pool: ThreadPoolExecutor, confirm: Confirm | None = None,
                 cancel: threading.Event | None = None):
        self.tools = tools
        self.agent = agent
        self.env = env
        self.audit = audit
        self.run_id = run_id
        self.via = via
        self.pool = pool
        self.confirm = confirm
        self.cancel = cancel
        self.actor = f"agent:{agent.name}"

    def needs_confirmation(self, tool: Tool) -> bool:
        return tool.permission == "sensitive" or (tool.permission == "write" and tool.name not in self.agent.allowed)

    def call(self, call: ToolCall) -> Observation:
        started = time.monotonic()
        tool = self.tools.get(call.name)
        self._audit("before", call, tool, {"arguments": sorted(call.arguments), "ids": _ids(call.arguments, [])})
        try:
            observation = self._call(call, tool)
        except Cancelled:
            self._audit("after", call, tool, {"status": "cancelled", "seconds": self._since(started)})
            raise
        observation.seconds = self._since(started)
        self._audit("after", call, tool, {"status": observation.status, "ids": observation.ids[:50],
                                          "count": observation.count, "seconds": observation.seconds})
        log.info("agent %s: %s %s in %.2fs", self.run_id, call.name if tool else "(unknown tool)",
                 observation.status, observation.seconds)
        return observation

    # ------------------------------------------------------------------------------------------------
    def _call(self, call: ToolCall, tool: Tool | None) -> Observation:
        def refused(why: str, status: Status = "refused") -> Observation:
            return Observation(call_id=call.id, tool=call.name, status=status, text=f"tool {call.name} {why}")

        if tool is None:
            offered = ", ".join(sorted(self.tools)) or "none"
            return refused(f"failed: there is no such tool for this agent (its tools: {offered})")
        if call.invalid:
            return refused(f"failed: {call.invalid}", "failed")
        try:
            arguments = tool.input.model_validate(call.arguments)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
                                 for err in e.errors()[:5])
            return refused(f"failed: invalid arguments ({problems})", "failed")
        try:
            if tool.check is not None and (why := tool.check(arguments, self.env)):
                return refused(f"refused: {why}")
        except UserError as e:
            return refused(f"failed: {e}", "failed")
        if self.needs_confirmation(tool) and not self._confirmed(call, tool, arguments):
            return refused("was not run: the person did not confirm it", "declined")
        future = self.pool.submit(tool.run, arguments, self.env)
        try:
            output = self._wait(future, self.agent.tool_timeout)
        except FutureTimeout:
            future.cancel()
            return refused(f"failed: it did not finish within {self.agent.tool_timeout:g} seconds", "timeout")
        except Cancelled:
            raise
        except UserError as e:
            return refused(f"failed: {e}", "failed")
        except Exception as e:  # noqa: BLE001 - a tool's bug is an observation, not a crash
            log.error("agent tool %s crashed: %s\n%s", tool.name, type(e).__name__,
                      "".join(traceback.format_tb(e.__traceback__)))  # frames only: a message may quote data
            return refused(f"failed: an internal error ({type(e).__name__})", "failed")
        dumped = output.model_dump(mode="json")
        return Observation(call_id=call.id, tool=tool.name, status="ok", text=output.model_dump_json(),
                           ids=_ids(dumped, []), count=_count(dumped))

    def _confirmed(self, call: ToolCall, tool: Tool, arguments: BaseModel) -> bool:
        if self.confirm is None:
            return False
        request = ConfirmRequest(run_id=self.run_id, call_id=call.id, agent=self.agent.name, tool=tool.name,
                                 description=tool.description, permission=tool.permission,
                                 arguments=arguments.model_dump(mode="json", exclude_unset=True))
        answer = bool(self.confirm(request))
        self._check_cancel()
        return answer

    def _wait(self, future: Future[BaseModel], timeout: float) -> BaseModel:
        deadline = time.monotonic() + timeout
        while True:
            self._check_cancel()
            left = deadline - time.monotonic()
            if left <= 0:
                raise FutureTimeout
            try:
                return future.result(timeout=min(_POLL, left))
            except FutureTimeout:
                continue

    def _check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("The agent was stopped.")

    def _audit(self, phase: str, call: ToolCall, tool: Tool | None, detail: dict[str, Any]) -> None:
        entry = {"run": self.run_id, "call": call.id, "phase": phase, "via": self.via,
                 "permission": tool.permission if tool else None, **detail}
        self.audit.record("agent_tool", tool.name if tool else "(unknown tool)", entry, actor=self.actor)

    @staticmethod
    def _since(started: float) -> float:
        return round(time.monotonic() - started, 3)
