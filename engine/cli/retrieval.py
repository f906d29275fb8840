"""The `recall` command: search memory by words and meaning.

Where the app's API or `personal-llm serve` runs for this profile, the recall is asked of it
(engine/cli/remote.py): same results, same output, without loading the model in this process."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from . import remote
from .base import Command, Handler, Session, add_json, console, escape, no_such_project, print_json, short


class _InProcess(Exception):
    """An argument the server would read otherwise than the engine does: the recall runs in process."""


def _as_utc(value: str | None) -> str | None:
    """--since/--until as the engine reads them (engine.memories.parse_time: ISO, naive = local time), sent
    as an explicit UTC time so that the server reads the same instant; anything else runs in process, where
    it gets the engine's own error."""
    if value is None or value == "":
        return None
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        return datetime.fromtimestamp(moment.timestamp(), UTC).isoformat()
    except (ValueError, OverflowError, OSError):
        raise _InProcess from None


def _from_server(session: Session, a: argparse.Namespace) -> list[Any] | None:
    """The hits as the running server answers them (JSON objects), or None: run in process."""
    try:
        params = {"q": a.query, "k": a.k, "project": a.project, "kind": a.kind, "since": _as_utc(a.since),
                  "until": _as_utc(a.until), "archived": a.archived and "true", "unscoped": a.unscoped and "true"}
    except _InProcess:
        return None
    hits = remote.ask(session.home, "/memory/recall", params)
    return hits if isinstance(hits, list) else None


def recall(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("query")
    p.add_argument("-k", "--k", type=int, default=10, help="how many results (default 10)")
    p.add_argument("--project")
    p.add_argument("--kind", choices=["fact", "episodic", "procedural", "chunk"])
    p.add_argument("--since", help="only things from this time on (ISO)")
    p.add_argument("--until", help="only things up to this time (ISO)")
    p.add_argument("--archived", action="store_true", help="include archived memories")
    p.add_argument("--unscoped", action="store_true", help="with --project: also memories without a project")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        hits: list[Any] | None = _from_server(session, a)
        projects: list[str] = []
        if hits is not None:
            if a.json:
                print_json(hits)  # the server's JSON of each hit is the engine's: the same output
                return 0
            hits = [SimpleNamespace(**h) for h in hits]
        else:
            with session.open_engine() as eng:
                hits = eng.recall(a.query, k=a.k, project=a.project, kind=a.kind, since=a.since, until=a.until,
                                  include_archived=a.archived, include_unscoped=a.unscoped)
                projects = eng.projects() if not hits and a.project else []
            if a.json:
                print_json(hits)
                return 0
        if not hits:
            console().print(escape("Nothing in memory matches that." + no_such_project(a.project, projects)),
                            highlight=False)
            return 0
        from rich.table import Table

        t = Table(show_lines=False, expand=True)
        t.add_column("score", justify="right", no_wrap=True)
        t.add_column("id", no_wrap=True)
        t.add_column("kind", no_wrap=True)
        t.add_column("text", ratio=1, min_width=24)
        for h in hits:
            where = f"project: {h.project}" if h.project else ""
            if h.kind == "chunk":
                where = " · ".join(x for x in (h.document_title, h.locator) if x)
            # where it is from on a line of its own under the text: as a column of its own, an 80-column
            # terminal left it 7 characters ("paragra / phs 1–2")
            text = escape(f"…{short(h.passage, 360)}" if h.passage else short(h.text, 200)) + (
                f"\n[dim]{escape(where)}[/dim]" if where else "") + (
                f"\n[yellow]⚠ {escape(h.conflict)}[/yellow]" if h.conflict else "")
            t.add_row(f"{h.score:.2f}", h.id, h.kind, text)
        console().print(t)
        return 0

    return run


COMMANDS = [
    Command("recall", "search memory (words and meaning)", recall),
]
