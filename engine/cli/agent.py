"""`personal-llm agent`: run an agent on a task, list the agents, show one.

`agent run [NAME] "task"` prints each step as it happens (the model's text as it is written, each tool
call and what it gave) and asks `[y/N]` on the terminal before a `sensitive` tool — or a `write` tool
the agent is not allowed — runs; `--yes` answers yes for `write` tools only, never for `sensitive` ones.
The answer is read only from a terminal: stdin when it is one (the question goes to stderr), else the
controlling terminal (/dev/tty, where the question is asked too). Piped or redirected input never answers
(`yes y | personal-llm agent run …` must not approve a deletion a document talked the model into): with
no terminal the tool is not run. An empty line or the end of input is no. `--json` prints the whole
transcript (steps, answer, sources) at the end instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from ..errors import UserError
from .base import Command, Handler, Session, add_json, print_json, short

if TYPE_CHECKING:
    from ..agent import AgentRun, AgentStep, ConfirmRequest

MARKS = {"ok": "✓", "failed": "✗", "refused": "✗", "declined": "✗", "timeout": "✗"}


def _write(text: str, *, err: bool = False) -> None:
    stream = sys.stderr if err else sys.stdout
    stream.write(text)
    stream.flush()


def _arguments(arguments: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={short(json.dumps(v, ensure_ascii=False), 60)}" for k, v in (arguments or {}).items())


class _Printer:
    """Prints the steps of a run as they come (stdout), keeping track of whether a line is open."""

    def __init__(self) -> None:
        self.open_line = False

    def _newline(self) -> None:
        if self.open_line:
            _write("\n")
            self.open_line = False

    def step(self, s: AgentStep) -> None:
        if s.kind == "text":
            _write(s.text or "")
            self.open_line = not (s.text or "").endswith("\n")
        elif s.kind == "call":
            self._newline()
            _write(f"→ {s.tool}({_arguments(s.arguments)})  [{s.permission or 'unknown'}]\n")
        elif s.kind == "observation":
            _write(f"  {MARKS.get(s.status or '', '·')} {s.summary}\n")
        elif s.kind == "answer":
            self._newline()


def terminal_answer(question: str) -> str | None:
    """A line typed by the person at the terminal after `question`; None when there is no terminal to ask
    (input is a pipe or a file and the process has no controlling terminal). Never reads piped input."""
    stdin = sys.stdin
    if stdin is not None and not stdin.closed and stdin.isatty():
        _write(question, err=True)
        return stdin.readline()
    if os.name != "posix":
        return None
    try:
        tty = open("/dev/tty", "r+", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed below)
    except OSError:  # no controlling terminal (a service, a pipeline started without one)
        return None
    with tty:
        tty.write(question)
        tty.flush()
        return tty.readline()


def _confirm(printer: _Printer, yes: bool) -> Any:
    def ask(r: ConfirmRequest) -> bool:
        if yes and r.permission == "write":
            _write(f"  (--yes: {r.tool} runs)\n", err=True)
            return True
        printer._newline()
        what = "changes your memory" if r.permission == "write" else "is sensitive"
        line = terminal_answer(f"? {r.agent} wants to run {r.tool}({_arguments(r.arguments)}), which {what}. "
                               "Run it? [y/N] ")
        if line is None:
            flag = " (or pass --yes)" if r.permission == "write" else ""
            _write(f"? {r.agent} wants to run {r.tool}, which {what}: not run, there is no terminal to ask (piped "
                   f"input never answers); run the command in a terminal{flag}\n", err=True)
            return False
        if not line:
            _write("\n", err=True)
        return line.strip().lower() in ("y", "yes")

    return ask


def _print_run(run: AgentRun) -> None:
    lines = []
    if run.sources:
        cited_only = [s for s in run.sources if f"[{s.n}]" in run.answer] or run.sources
        lines += ["", "Sources:"]
        for s in cited_only:
            where = " · ".join(x for x in (s.document_title, s.locator) if x)
            lines.append(f"  [{s.n}] {s.id}  {s.kind}  " + (f"{where}: " if where else "") + short(s.text, 100))
    stopped = {"answered": "", "step_limit": ", stopped at the step limit", "time_limit": ", stopped at the time limit"}
    lines.append(f"\n({run.agent}: {run.tool_calls} tool call{'s' if run.tool_calls != 1 else ''}"
                 f"{stopped[run.stopped]}; run {run.run_id})")
    _write("\n".join(lines) + "\n")


def agent(p: argparse.ArgumentParser) -> Handler:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    run_p = sub.add_parser("run", help='run an agent on a task: agent run [NAME] "task" (default agent: Research)')
    run_p.add_argument("words", nargs="+", metavar="[NAME] TASK")
    run_p.add_argument("--project", help="work within this project only")
    run_p.add_argument("--yes", action="store_true",
                       help="run the agent's write tools without asking (sensitive tools still ask)")
    list_p = sub.add_parser("list", help="the agents: built-in and your own")
    show_p = sub.add_parser("show", help="an agent's tools, permissions, scope and limits")
    show_p.add_argument("name", nargs="?", default=None, metavar="NAME")
    for q in (run_p, list_p, show_p):
        add_json(q)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
            if a.action == "list":
                agents = eng.list_agents()
                if a.json:
                    print_json(agents)
                else:
                    for info in agents:
                        mark = "built-in" if info.builtin else "yours"
                        _write(f"{info.name}  ({mark}, {len(info.tools)} tools)\n    {info.description}\n")
                return 0
            if a.action == "show":
                info = eng.agent_info(a.name)
                if a.json:
                    print_json(info)
                    return 0
                scope = info.scope
                _write(f"{info.name} ({'built-in' if info.builtin else 'yours'}): {info.description}\n"
                       f"  steps at most {info.max_steps}, time at most {info.time_limit:g} s\n"
                       f"  reads: {', '.join(scope.kinds) or 'no memories'}"
                       f"{' and documents' if scope.documents else ''}"
                       f"; projects: {', '.join(scope.projects) if scope.projects is not None else 'all'}\n"
                       f"  writes: {', '.join(scope.write_kinds) or 'nothing'}\n  tools:\n")
                for t in info.tools:
                    _write(f"    {t.name}  [{t.permission}{', asks first' if t.asks else ''}]  {t.description}\n")
                for missing in info.unknown_tools:
                    _write(f"    {missing}  [not found: fix the agent's settings]\n")
                return 0
            words = a.words
            if len(words) > 2:
                raise UserError('Give the task as one argument, in quotes: personal-llm agent run [NAME] "task".')
            name: str | None = words[0] if len(words) == 2 else None
            task = words[-1]
            printer = _Printer()
            result = eng.agent_run(task, agent=name, project=a.project, on_step=None if a.json else printer.step,
                                   confirm=_confirm(printer, a.yes))
        if a.json:
            print_json(result)
        else:
            _print_run(result)
        return 0

    return run


COMMANDS = [
    Command("agent", 'agents that use tools: agent run [NAME] "task", agent list, agent show NAME', agent),
]
