"""Commands for memories: `remember`, `get`, `update`, `list`, `forget`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import UserError
from .base import (
    Command,
    Handler,
    Session,
    add_json,
    an_id,
    console,
    counted,
    escape,
    no_such_project,
    print_json,
    short,
)


def remember(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("text", help="what to remember (use - to read it from stdin)")
    p.add_argument("--kind", choices=["fact", "episodic", "procedural"], default="fact")
    p.add_argument("--project", help="keep it within this project")
    p.add_argument("--importance", type=float, help="0..1 (default: from the kind and source)")
    p.add_argument("--at", help="when it happened (ISO date/time)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        text = sys.stdin.buffer.read().decode("utf-8", "replace") if a.text == "-" else a.text
        with session.open_engine() as eng:
            r = eng.remember(text, kind=a.kind, project=a.project, importance=a.importance, at=a.at, embed="sync")
        waiting = r.id in getattr(eng, "waiting", ())  # a server profile's, kept in its outbox
        if a.json:
            print_json({"id": r.id, "merged": r.merged, **r.memory.model_dump(mode="json", exclude={"id"}),
                        **({"waiting": True} if waiting else {})})
        else:
            verb = "Already known — merged into" if r.merged else "Kept to send" if waiting else "Remembered"
            console().print(f"{verb} [bold]{r.id}[/bold] ({r.memory.kind}"
                            + (f", project {r.memory.project}" if r.memory.project else "") + ")")
        return 0

    return run


def get(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("id", type=an_id, help="a memory (mem_…), a passage recall found (chk_…) or a document (doc_…)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        if a.id.startswith(("chk_", "doc_")):  # recall prints passage ids too
            return _show_document_part(a, session)
        with session.open_engine() as eng:
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


def _show_document_part(a: argparse.Namespace, session: Session) -> int:
    """`get chk_…`: a passage with its document; `get doc_…`: a document."""
    c = console()
    with session.open_engine() as eng:
        if a.id.startswith("chk_"):
            passage = eng.get_passage(a.id)
            if a.json:
                print_json(passage)
                return 0
            c.print(f"[bold]{passage.id}[/bold]  passage of {escape(passage.document_title or '')} "
                    f"({passage.document_id})" + (f" · {escape(passage.locator)}" if passage.locator else ""))
            c.print(escape(passage.text))
            if passage.document_path:
                c.print(f"[dim]{escape(passage.document_path)}[/dim]")
            return 0
        doc = eng.get_document(a.id)
    if a.json:
        print_json(doc)
        return 0
    c.print(f"[bold]{doc.id}[/bold]  {escape(doc.title)}" + (f"  project {escape(doc.project)}" if doc.project else ""))
    c.print(f"[dim]{escape(doc.path or '(no file: sent as text or uploaded)')} · {doc.chunks} passage{'s' if doc.chunks != 1 else ''} · "
            f"added {doc.created_at}[/dim]")
    if doc.error:
        c.print(f"[yellow]could not be ingested:[/yellow] {escape(doc.error)}")
    return 0


def update(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("id", type=an_id)
    p.add_argument("new_text", nargs="?", metavar="TEXT", help="the new text (or --text)")
    p.add_argument("--text")
    p.add_argument("--kind", choices=["fact", "episodic", "procedural"])
    p.add_argument("--project")
    p.add_argument("--importance", type=float)
    p.add_argument("--at")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        if a.new_text is not None:
            if a.text is not None:
                raise UserError("Give the new text once: as TEXT or with --text, not both.")
            a.text = a.new_text
        kw: dict[str, Any] = {"text": a.text, "kind": a.kind, "importance": a.importance}
        if a.project is not None:
            kw["project"] = a.project
        if a.at is not None:
            kw["at"] = a.at
        if a.text is None and a.kind is None and a.importance is None and a.project is None and a.at is None:
            raise UserError("Nothing to change: give --text, --kind, --project, --importance or --at.")
        with session.open_engine() as eng:
            m = eng.update(a.id, **kw, embed="sync")  # an edit is re-embedded before the command ends
        if m is None:  # a server profile's edit, kept in its outbox
            print_json({"id": a.id, "waiting": True}) if a.json else console().print(
                f"Kept to send: the edit of [bold]{a.id}[/bold]")
            return 0
        print_json(m) if a.json else console().print(f"Updated [bold]{m.id}[/bold]")
        return 0

    return run


def list_memories(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("--kind", choices=["fact", "episodic", "procedural"])
    p.add_argument("--project")
    p.add_argument("--archived", action="store_true", help="list archived memories instead")
    p.add_argument("--activity", action="store_true",
                   help="list the app's own events instead (\"Ingested report.pdf (42 chunks)\")")
    p.add_argument("-n", "--limit", type=int, default=50)
    p.add_argument("--after", metavar="PLACE", help="go on after a page (the place the page before ends with)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
            page = eng.memory_page(kind=a.kind, project=a.project, archived=a.archived,
                                   activity=a.activity, limit=a.limit, after=a.after)
            projects = eng.projects() if not page.memories and a.project else []
        mems = page.memories
        if a.json:
            print_json(mems)
            return 0
        if not mems:
            filtered = a.kind or a.project or a.archived or a.activity
            console().print(escape("No more memories." if a.after else
                                   "No memories match." + no_such_project(a.project, projects) if filtered else
                                   "No memories yet."), highlight=False)
            return 0
        from rich.table import Table

        t = Table(expand=True)
        for col in ("id", "kind", "when"):
            t.add_column(col, no_wrap=True)
        t.add_column("text", ratio=1, min_width=24)
        for m in mems:  # the project under the text: as a column it left the text 14 characters of 80
            t.add_row(m.id, m.kind, (m.at or m.created_at or "")[:10], escape(short(m.text, 160)) + (
                f"\n[dim]project: {escape(m.project)}[/dim]" if m.project else ""))
        console().print(t)
        if page.next is not None:
            console().print(f"[dim]{len(mems):,} of {page.total:,}; the next ones: --after {page.next}[/dim]")
        return 0

    return run


def used(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("ids", nargs="+", type=an_id, metavar="ID", help="memory ids (mem_…)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
            for uid in a.ids:
                eng.get(uid)  # an unknown id is an error, not silently skipped
            n = eng.mark_used(a.ids, how="client")
        print_json({"counted": n}) if a.json else console().print(f"Counted {n} as used")
        return 0

    return run


def forget(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("id", type=an_id, help="a memory id (mem_…), a document id (doc_…) or a conversation id (cnv_…)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        if a.id.startswith("chk_"):
            raise UserError(f"{a.id} is a passage of a document; a document is forgotten as a whole: "
                            f"`personal-llm get {a.id}` names it (doc_…), then `personal-llm forget doc_…`.")
        with session.open_engine() as eng:
            r = eng.forget(a.id)
        if r is None:  # a server profile's forget, kept in its outbox
            print_json({"id": a.id, "waiting": True}) if a.json else console().print(
                f"Kept to send: the forget of [bold]{a.id}[/bold]")
            return 0
        if a.json:
            print_json(r)
        else:
            extra = ", ".join(counted(v, k) for k, v in r.removed.items() if v and k not in ("memories",))
            console().print(f"Forgot {r.type} [bold]{r.id}[/bold]" + (f" ({extra})" if extra else ""))
        return 0

    return run


COMMANDS = [
    Command("remember", "store a fact, event or recipe", remember),
    Command("get", "show one memory", get),
    Command("update", "edit a memory", update),
    Command("list", "list memories, newest first", list_memories),
    Command("used", "count memories as used (they rank a little higher among equally relevant ones)", used),
    Command("forget", "delete a memory or a document and everything derived from it", forget),
]
