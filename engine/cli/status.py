"""Commands about the store as a whole and the installation: `stats`, `audit`, `self-test`."""

from __future__ import annotations

import argparse
import json

from .base import Command, Handler, Session, add_json, console, counted, escape, print_json


def stats(p: argparse.ArgumentParser) -> Handler:
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
            s = eng.stats()
        if a.json:
            print_json(s)
            return 0
        from rich.table import Table

        t = Table(show_header=False, box=None)
        t.add_column(style="bold")
        t.add_column()
        t.add_row("store", escape(s.store))
        t.add_row("memories", f"{s.memories}  ({', '.join(f'{k} {v}' for k, v in s.by_kind.items())})")
        t.add_row("archived", str(s.archived))
        t.add_row("conflicts", str(s.conflicts))
        t.add_row("documents", f"{s.documents}  ({counted(s.chunks, 'chunks')})"
                               + (f", {s.documents_failed} failed" if s.documents_failed else ""))
        t.add_row("graph", f"{counted(s.nodes, 'nodes')}, {counted(s.edges, 'edges')}")
        t.add_row("embedding model", f"{s.embedding_model}" + (f" ({s.embedding_dimension} dims)"
                                                              if s.embedding_dimension else ""))
        t.add_row("pending", f"{s.pending_embeddings} to embed, {s.pending_extraction} to extract, "
                             f"{s.pending_rollup} to roll up")
        if s.llm:
            t.add_row("language model", s.llm)
        for n in s.notes:
            t.add_row("note", escape(n))
        console().print(t)
        return 0

    return run


def audit(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("-n", "--limit", type=int, default=50)
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
            entries = eng.audit_log(limit=a.limit)
        if a.json:
            print_json(entries)
            return 0
        from rich.table import Table

        t = Table(expand=True)
        for col in ("when", "actor", "action", "target", "detail"):
            t.add_column(col)
        for e in entries:
            t.add_row(e.at, e.actor, e.action, escape(e.target or ""), escape(json.dumps(e.detail)))
        console().print(t)
        return 0

    return run


def self_test(p: argparse.ArgumentParser) -> Handler:
    from ..selftest import add_arguments

    add_arguments(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        from ..selftest import run as run_checks

        return run_checks(semantic=not a.lexical_only, use_keychain=not a.no_keychain, json_out=a.json)

    return run


COMMANDS = [
    Command("stats", "counts, the embedding model, and what is pending", stats),
    Command("audit", "show the audit log (who changed what, when — never the text)", audit),
    Command("self-test", "check this installation: encrypted store, sqlite-vec, recall, bundled model", self_test),
]
