"""CLI commands for the knowledge graph and consolidation: `graph`, `extract`, `consolidate`, `conflicts`,
`resolve`, `restore`."""

from __future__ import annotations

import argparse

from rich.markup import escape

from .cli import Handler, add_json, command, console, open_engine, print_json, short


@command("graph", "show what the knowledge graph knows around an entity")
def _graph(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("entity", help="a name, e.g. Alice")
    p.add_argument("--hops", type=int, choices=[1, 2], default=1, help="how far to walk (default 1)")
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        with open_engine(a) as eng:
            view = eng.neighbours(a.entity, hops=a.hops)
        if a.json:
            print_json(view)
            return 0
        c = console()
        c.print(f"[bold]{escape(view.entity)}[/bold]: {len(view.nodes) - 1} related, {len(view.edges)} facts "
                f"within {view.hops} hop{'s' if view.hops > 1 else ''}")
        for e in view.edges:
            c.print(f"  {escape(e.text)}  [dim]{', '.join(e.sources)}[/dim]")
        return 0

    return run


@command("extract", "extract knowledge-graph facts from memories and documents now (needs a language model)")
def _extract(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("--limit", type=int, help="at most this many memories/passages")
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        with open_engine(a) as eng:
            r = eng.extract_pending(limit=a.limit)
        if a.json:
            print_json(r)
            return 0
        refused = sum(r.rejected.values())
        console().print(f"Read {r.processed}, added {r.edges} facts and {r.nodes} entities, refused {refused}"
                        + (f" ({', '.join(f'{k} {v}' for k, v in sorted(r.rejected.items()))})" if refused else "")
                        + f"; {r.remaining} waiting.")
        if r.note:
            console().print(escape(r.note))
        return 0

    return run


@command("consolidate", "decay, archive, roll up events into facts, extract the graph, find contradictions")
def _consolidate(p: argparse.ArgumentParser) -> Handler:
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        with open_engine(a) as eng:
            r = eng.consolidate()
        if a.json:
            print_json(r)
            return 0
        c = console()
        c.print(f"Decayed {r.decayed}, archived {len(r.archived)} (restore with: personal-llm restore ID).")
        c.print(f"Rolled up {r.rollup.sources} events into {r.rollup.facts} facts; added {r.extraction.edges} "
                f"graph facts; compared {r.pairs_checked} pairs, {len(r.conflicts)} new conflicts"
                + (" (see: personal-llm conflicts)." if r.conflicts else "."))
        for n in r.notes:
            c.print(f"[yellow]{escape(n)}[/yellow]")
        return 0

    return run


@command("conflicts", "list facts that contradict each other")
def _conflicts(p: argparse.ArgumentParser) -> Handler:
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        with open_engine(a) as eng:
            pairs = eng.conflicts()
        if a.json:
            print_json(pairs)
            return 0
        c = console()
        if not pairs:
            c.print("No contradictions to resolve.")
            return 0
        for pair in pairs:
            for m in (pair.a, pair.b):
                c.print(f"[bold]{m.id}[/bold]  {(m.at or m.created_at)[:10]}  {escape(short(m.text, 120))}")
            c.print(f"[dim]  resolve: personal-llm resolve {pair.a.id} --keep {pair.a.id}|{pair.b.id}|both[/dim]")
        return 0

    return run


@command("resolve", "resolve a contradiction: keep one fact (the other is archived) or both")
def _resolve(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("id", help="either memory of the pair")
    p.add_argument("--keep", required=True, help="the id to keep, or 'both' (not a contradiction)")
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        with open_engine(a) as eng:
            r = eng.resolve(a.id, a.keep)
        if a.json:
            print_json(r)
        else:
            console().print(f"Kept {', '.join(r.kept)}" + (f"; archived {', '.join(r.archived)}" if r.archived else ""))
        return 0

    return run


@command("restore", "bring an archived memory back into recall")
def _restore(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("id")
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        with open_engine(a) as eng:
            m = eng.restore(a.id)
        print_json(m) if a.json else console().print(f"Restored [bold]{m.id}[/bold]")
        return 0

    return run
