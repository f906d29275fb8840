"""`personal-llm`: the command line. Every command takes --json; errors go to stderr with a non-zero exit."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from rich.markup import escape

from .errors import EngineError, UserError

log = logging.getLogger(__name__)

EXIT_USER_ERROR = 1
EXIT_BUG = 70

Handler = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Handler, str]] = {}


def command(name: str, help: str):
    """Register a subcommand: the decorated function adds its arguments and returns its handler."""

    def deco(fn: Callable[[argparse.ArgumentParser], Handler]):
        def add(p: argparse.ArgumentParser) -> None:
            COMMANDS[name] = (add, fn(p), help)

        COMMANDS[name] = (add, None, help)  # type: ignore[assignment]
        return fn

    return deco


# ---------------------------------------------------------------------------------------------------
# output helpers
# ---------------------------------------------------------------------------------------------------
def dump(obj: Any) -> str:
    def conv(o: Any) -> Any:
        if isinstance(o, BaseModel):
            return o.model_dump(mode="json")
        if isinstance(o, list | tuple):
            return [conv(x) for x in o]
        if isinstance(o, dict):
            return {k: conv(v) for k, v in o.items()}
        return o

    return json.dumps(conv(obj), ensure_ascii=False, indent=2)


def print_json(obj: Any) -> None:
    sys.stdout.write(dump(obj) + "\n")
    sys.stdout.flush()


def console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def short(text: str, n: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def open_engine(args: argparse.Namespace | None = None):
    from .engine import Engine

    eng = Engine.open(actor="cli")
    for notice in eng.notices:
        print(f"note: {notice}", file=sys.stderr)
    if eng.recovery_key:  # this command created the store: shown (once, unasked) when the command succeeded
        SHOW_AFTER.append(eng.recovery_key)
    return eng


SHOW_AFTER: list[str] = []  # a new store's recovery key, printed after the command's own output


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")


# ---------------------------------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------------------------------
@command("remember", "store a fact, event or recipe")
def _remember(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("text", help="what to remember (use - to read it from stdin)")
    p.add_argument("--kind", choices=["fact", "episodic", "procedural"], default="fact")
    p.add_argument("--project", help="keep it within this project")
    p.add_argument("--importance", type=float, help="0..1 (default: from the kind and source)")
    p.add_argument("--at", help="when it happened (ISO date/time)")
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        text = sys.stdin.read() if a.text == "-" else a.text
        with open_engine(a) as eng:
            r = eng.remember(text, kind=a.kind, project=a.project, importance=a.importance, at=a.at, embed="sync")
        if a.json:
            print_json({"id": r.id, "merged": r.merged, **r.memory.model_dump(mode="json", exclude={"id"})})
        else:
            verb = "Already known — merged into" if r.merged else "Remembered"
            console().print(f"{verb} [bold]{r.id}[/bold] ({r.memory.kind}"
                            + (f", project {r.memory.project}" if r.memory.project else "") + ")")
        return 0

    return run


@command("recall", "search memory (words and meaning)")
def _recall(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("query")
    p.add_argument("-k", type=int, default=10, help="how many results (default 10)")
    p.add_argument("--project")
    p.add_argument("--kind", choices=["fact", "episodic", "procedural", "chunk"])
    p.add_argument("--since", help="only things from this time on (ISO)")
    p.add_argument("--until", help="only things up to this time (ISO)")
    p.add_argument("--archived", action="store_true", help="include archived memories")
    p.add_argument("--unscoped", action="store_true", help="with --project: also memories without a project")
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        with open_engine(a) as eng:
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
        t.add_column("text", ratio=1)
        t.add_column("where", no_wrap=False)
        for h in hits:
            where = h.project or ""
            if h.kind == "chunk":
                where = " · ".join(x for x in (h.document_title, h.locator) if x)
            text = escape(f"…{short(h.passage, 360)}" if h.passage else short(h.text, 200)) + (
                f"\n[yellow]⚠ {escape(h.conflict)}[/yellow]" if h.conflict else "")
            t.add_row(f"{h.score:.2f}", h.id, h.kind, text, escape(where))
        console().print(t)
        return 0

    return run


@command("get", "show one memory")
def _get(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("id")
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        with open_engine(a) as eng:
            m = eng.get(a.id)
        if a.json:
            print_json(m)
        else:
            c = console()
            c.print(f"[bold]{m.id}[/bold]  {m.kind}" + (f"  project {escape(m.project)}" if m.project else ""))
            c.print(escape(m.text))
            c.print(f"[dim]importance {m.importance:.2f} · created {m.created_at}"
                    + (f" · at {m.at}" if m.at else "") + (" · archived" if m.archived else "") + "[/dim]")
        return 0

    return run


@command("update", "edit a memory")
def _update(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("id")
    p.add_argument("--text")
    p.add_argument("--kind", choices=["fact", "episodic", "procedural"])
    p.add_argument("--project")
    p.add_argument("--importance", type=float)
    p.add_argument("--at")
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        kw: dict[str, Any] = {"text": a.text, "kind": a.kind, "importance": a.importance}
        if a.project is not None:
            kw["project"] = a.project
        if a.at is not None:
            kw["at"] = a.at
        with open_engine(a) as eng:
            m = eng.update(a.id, **kw)
        print_json(m) if a.json else console().print(f"Updated [bold]{m.id}[/bold]")
        return 0

    return run


@command("list", "list memories, newest first")
def _list(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("--kind", choices=["fact", "episodic", "procedural"])
    p.add_argument("--project")
    p.add_argument("--archived", action="store_true", help="list archived memories instead")
    p.add_argument("-n", "--limit", type=int, default=50)
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        with open_engine(a) as eng:
            mems = eng.list_memories(kind=a.kind, project=a.project, archived=a.archived, limit=a.limit)
        if a.json:
            print_json(mems)
            return 0
        if not mems:
            console().print("No memories yet.")
            return 0
        from rich.table import Table

        t = Table(expand=True)
        for col in ("id", "kind", "project", "when", "text"):
            t.add_column(col, ratio=1 if col == "text" else None, no_wrap=col != "text")
        for m in mems:
            t.add_row(m.id, m.kind, escape(m.project or ""), (m.at or m.created_at or "")[:10], escape(short(m.text, 160)))
        console().print(t)
        return 0

    return run


@command("forget", "delete a memory or a document and everything derived from it")
def _forget(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("id", help="a memory id (mem_…) or a document id (doc_…)")
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        with open_engine(a) as eng:
            r = eng.forget(a.id)
        if a.json:
            print_json(r)
        else:
            extra = ", ".join(f"{v} {k}" for k, v in r.removed.items() if v and k not in ("memories",))
            console().print(f"Forgot {r.type} [bold]{r.id}[/bold]" + (f" ({extra})" if extra else ""))
        return 0

    return run


@command("stats", "counts, the embedding model, and what is pending")
def _stats(p: argparse.ArgumentParser) -> Handler:
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        with open_engine(a) as eng:
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
        t.add_row("documents", f"{s.documents}  ({s.chunks} chunks)")
        t.add_row("graph", f"{s.nodes} nodes, {s.edges} edges")
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


@command("audit", "show the audit log (who changed what, when — never the text)")
def _audit(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("-n", "--limit", type=int, default=50)
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        with open_engine(a) as eng:
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


# ---------------------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="personal-llm",
        description="Your local, encrypted memory: remember, ingest documents, recall and ask.",
    )
    parser.add_argument("--version", action="version", version=f"personal-llm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _load_command_modules()
    for name, (add, _, help_) in COMMANDS.items():
        add(sub.add_parser(name, help=help_, description=help_))
    return parser


def _load_command_modules() -> None:
    """Modules that register more commands (ingest, ask, graph, serve, …) are imported here."""
    import importlib

    for mod in EXTRA_COMMAND_MODULES:
        importlib.import_module(mod)


EXTRA_COMMAND_MODULES: list[str] = [
    "engine.cli_ingest", "engine.cli_ask", "engine.cli_graph", "engine.cli_interfaces", "engine.selftest",
    "engine.cli_keys",
]


def main(argv: list[str] | None = None) -> int:
    from .logs import setup_logging

    setup_logging("cli")
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = COMMANDS[args.command][1]
    try:
        code = handler(args)
        if SHOW_AFTER and code == 0:
            from .cli_keys import show_recovery_key

            show_recovery_key(SHOW_AFTER.pop(), fresh=True)
        return code
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except EngineError as e:
        log.error("command %s failed: %s", args.command, type(e).__name__)
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("cancelled", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:
        log.exception("command %s crashed", args.command)
        from .config import log_dir

        print(f"error: an internal error occurred ({type(e).__name__}); details are in {log_dir()}",
              file=sys.stderr)
        return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
