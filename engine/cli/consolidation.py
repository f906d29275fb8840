"""Commands for consolidation and its conflicts: `consolidate`, `conflicts`, `resolve`, `restore`."""

from __future__ import annotations

import argparse
import sys

from .base import (
    Command,
    Handler,
    Session,
    add_json,
    an_id,
    console,
    counted,
    escape,
    print_json,
    short,
    visible,
)


def consolidate(p: argparse.ArgumentParser) -> Handler:
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
            r = eng.consolidate()
            # the steps that need a language model were skipped while they had work: decay and archiving
            # are done, the rest is not, so the command says so on stderr and exits non-zero
            stopped = bool(r.waiting) and (r.extraction.remaining > 0 or eng.stats().pending_rollup > 0)
        if a.json:
            print_json(r)
        else:
            c = console()
            c.print(f"Decayed {r.decayed}, archived {len(r.archived)} (restore with: personal-llm restore ID).")
            c.print(f"Rolled up {counted(r.rollup.sources, 'events')} into {counted(r.rollup.facts, 'facts')}; added "
                    f"{counted(r.extraction.edges, 'graph facts')}; compared {counted(r.pairs_checked, 'pairs')}, "
                    f"{counted(len(r.conflicts), 'new conflicts')}"
                    + (" (see: personal-llm conflicts)." if r.conflicts else "."))
            if not stopped:
                for n in r.notes:
                    c.print(f"[yellow]{escape(n)}[/yellow]")
        if stopped:
            for n in r.notes:
                print(f"error: {visible(n)}", file=sys.stderr)
            return 1
        return 0

    return run


def conflicts(p: argparse.ArgumentParser) -> Handler:
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
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


def resolve(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("id", type=an_id, help="either memory of the pair")
    p.add_argument("--keep", required=True, help="the id to keep, or 'both' (not a contradiction)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
            r = eng.resolve(a.id, a.keep)
        if a.json:
            print_json(r)
        else:
            console().print(f"Kept {', '.join(r.kept)}" + (f"; archived {', '.join(r.archived)}" if r.archived else ""))
        return 0

    return run


def restore(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("id", type=an_id)
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
            m = eng.restore(a.id)
        print_json(m) if a.json else console().print(f"Restored [bold]{m.id}[/bold]")
        return 0

    return run


COMMANDS = [
    Command("consolidate", "decay, archive, roll up events into facts, extract the graph, find contradictions", consolidate),
    Command("conflicts", "list facts that contradict each other", conflicts),
    Command("resolve", "resolve a contradiction: keep one fact (the other is archived) or both", resolve),
    Command("restore", "bring an archived memory back into recall", restore),
]
