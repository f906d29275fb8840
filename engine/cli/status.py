"""Commands about the store as a whole and the installation: `stats`, `audit`, `self-test`."""

from __future__ import annotations

import argparse
import json
from typing import Any

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
                               + (f", {s.documents_failed} failed" if s.documents_failed else "")
                               + (f", {s.documents_interrupted} half-indexed" if s.documents_interrupted else ""))
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
        for col in ("when (UTC)", "actor", "action"):
            t.add_column(col, no_wrap=True)
        t.add_column("target", max_width=22, overflow="fold")
        t.add_column("detail", ratio=1, min_width=16)
        for e in entries:  # to the minute: the whole timestamp was cut to "2026-12-06T0…" on 80 columns
            t.add_row(e.at[:16].replace("T", " "), e.actor, e.action, escape(e.target or ""), escape(_detail(e.detail)))
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


def _detail(detail: Any) -> str:
    """An audit entry's detail in a line a person reads ("kind episodic · sources 2"; `--json` has it all):
    a list by its length, a nested value as JSON."""
    if not isinstance(detail, dict):
        return json.dumps(detail)
    parts = []
    for k, v in detail.items():
        shown = (str(len(v)) if isinstance(v, list) else str(v).lower() if isinstance(v, bool)
                 else json.dumps(v) if isinstance(v, dict) else str(v))
        parts.append(f"{k} {shown}")
    return " · ".join(parts)


COMMANDS = [
    Command("stats", "counts, the embedding model, and what is pending", stats),
    Command("audit", "show the audit log (who changed what, when — never the text)", audit),
    Command("self-test", "check this installation: encrypted store, sqlite-vec, recall, bundled model", self_test),
]
