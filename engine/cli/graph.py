"""Commands for the knowledge graph: `graph`, `extract`."""

from __future__ import annotations

import argparse
import sys

from .base import Command, Handler, Session, add_json, console, counted, escape, print_json, visible


def graph(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("entity", help="a name, e.g. Alice")
    p.add_argument("--hops", type=int, choices=[1, 2], default=1, help="how far to walk (default 1)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
            view = eng.neighbours(a.entity, hops=a.hops)
        if a.json:
            print_json(view)
            return 0
        c = console()
        c.print(f"[bold]{escape(view.entity)}[/bold]: {len(view.nodes) - 1} related, {counted(len(view.edges), 'facts')} "
                f"within {view.hops} hop{'s' if view.hops > 1 else ''}")
        for e in view.edges:
            c.print(f"  {escape(e.text)}  [dim]{', '.join(e.sources)}[/dim]")
        return 0

    return run


def extract(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("--limit", type=int, help="at most this many memories/passages")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
            r = eng.extract_pending(limit=a.limit)
        # nothing could be read because no language model answered, while something waits: the command
        # did not do what it was asked, so it says why on stderr and exits non-zero (scripts see it)
        stopped = r.waiting and r.remaining > 0
        if a.json:
            print_json(r)
        else:
            refused = sum(r.rejected.values())
            console().print(f"Read {r.processed}, added {counted(r.edges, 'facts')} and {counted(r.nodes, 'entities')}, refused {refused}"
                            + (f" ({', '.join(f'{k} {v}' for k, v in sorted(r.rejected.items()))})" if refused else "")
                            + f"; {r.remaining} waiting.")
            if r.note and not stopped:
                console().print(escape(r.note))
        if stopped:
            print(f"error: {visible(r.note or 'No language model answered.')}", file=sys.stderr)
            return 1
        return 0

    return run


COMMANDS = [
    Command("graph", "show what the knowledge graph knows around an entity", graph),
    Command("extract", "extract knowledge-graph facts from memories and documents now (needs a language model)", extract),
]
