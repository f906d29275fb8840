"""The `recall` command: search memory by words and meaning."""

from __future__ import annotations

import argparse

from .base import Command, Handler, Session, add_json, console, escape, print_json, short


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
        with session.open_engine() as eng:
            hits = eng.recall(a.query, k=a.k, project=a.project, kind=a.kind, since=a.since, until=a.until,
                              include_archived=a.archived, include_unscoped=a.unscoped)
        if a.json:
            print_json(hits)
            return 0
        if not hits:
            console().print("Nothing in memory matches that.")
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
