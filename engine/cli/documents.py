"""CLI command `ingest`: add files and folders to memory, with a progress bar on stderr.

Exit code 0 when every file was added, replaced or unchanged; 1 when any failed (all results are still
printed). Ctrl-C once cancels cleanly (the file in progress is rolled back); twice stops at once.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UserError
from .base import Command, Handler, Session, add_json, console, counted, escape, no_such_project, print_json

if TYPE_CHECKING:
    from ..ingest import IngestProgress, IngestResult

_STAGES = {"scanning": "looking for files", "parsing": "reading", "embedding": "indexing", "done": "done"}


@contextlib.contextmanager
def progress_bar() -> Iterator[Callable[[IngestProgress], None]]:
    """A rich progress bar on stderr (only on a terminal), fed by IngestProgress updates."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    err = Console(stderr=True, highlight=False)
    with Progress(
        TextColumn("{task.description}", justify="left"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[files]}"),
        TimeRemainingColumn(),
        console=err, transient=True, disable=not err.is_terminal,
    ) as bar:
        task = bar.add_task("looking for files", total=None, files="")

        def update(p: IngestProgress) -> None:
            name = Path(p.current_file).name if p.current_file else ""
            what = _STAGES[p.stage] + (f" {name}" if name else "")
            if p.stage == "embedding" and p.chunks_total:
                what += f" ({p.chunks_done}/{p.chunks_total} chunks)"
            bar.update(task, description=what, total=p.bytes_total or None, completed=p.bytes_done,
                       files=f"{p.files_done}/{p.files_total} files")

        yield update


@contextlib.contextmanager
def ctrl_c_cancels(cancel: threading.Event) -> Iterator[None]:
    """First Ctrl-C sets `cancel` (the ingest stops cleanly after the current batch); a second one interrupts."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        print("cancelling… (press Ctrl-C again to stop at once)", file=sys.stderr)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _print_results(results: list[IngestResult]) -> None:
    from rich.table import Table

    c = console()
    t = Table(expand=True)
    t.add_column("status", no_wrap=True)
    t.add_column("file", ratio=1)
    t.add_column("chunks", justify="right", no_wrap=True)
    t.add_column("document / error", ratio=1)
    style = {"added": "green", "replaced": "cyan", "unchanged": "dim", "failed": "red", "waiting": "yellow"}
    for r in results:
        t.add_row(f"[{style[r.status]}]{r.status}[/]", escape(r.path or "(text)"), str(r.chunks) if r.chunks else "",
                  escape(r.error or r.document_id or ""))
    c.print(t)
    counts = {s: sum(r.status == s for r in results) for s in ("added", "replaced", "unchanged", "failed", "waiting")}
    c.print(", ".join(f"{n} {s}" for s, n in counts.items() if n) or "No files found.")


def _resume(resumed: list[IngestResult]) -> None:
    """Say on stderr what was finished (or given up) of the documents an interrupted ingest had left."""
    done = [r for r in resumed if r.status != "failed"]
    failed = len(resumed) - len(done)
    if done:
        print(f"note: finished {counted(len(done), 'documents')} an interrupted ingest had left half-indexed: "
              + ", ".join(Path(r.path).name if r.path else "(text)" for r in done[:5])
              + (", …" if len(done) > 5 else ""), file=sys.stderr)
    if failed:
        print(f"note: gave up {counted(failed, 'documents')} interrupted too often (`personal-llm documents --failed`)",
              file=sys.stderr)


def ingest(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or folders (folders are read recursively)")
    p.add_argument("--project", help="keep these documents within this project")
    p.add_argument("--max-mb", type=float, help="skip files larger than this many MB (default: settings.max_file_mb)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        if a.max_mb is not None and not 0 < a.max_mb < float("inf"):  # also false for nan
            raise UserError("--max-mb must be a positive number of megabytes.")
        cancel = threading.Event()
        with session.open_engine() as eng, progress_bar() as progress, ctrl_c_cancels(cancel):
            _resume(eng.resume_pending_documents(cancel=cancel))  # what an interrupted ingest left half-indexed
            results = eng.ingest(a.paths, project=a.project, progress=progress, cancel=cancel, max_mb=a.max_mb)
        if a.json:
            print_json(results)
        else:
            _print_results(results)
        return 1 if any(r.status == "failed" for r in results) else 0

    return run


def documents(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("--project", help="only this project's documents")
    p.add_argument("--failed", action="store_true",
                   help="the documents that could not be ingested (status failed) and why")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
            docs = eng.list_documents(a.project, failed=a.failed)
            projects = eng.projects() if not docs and a.project else []
        if a.json:
            print_json(docs)
            return 0
        from rich.table import Table

        c = console()
        if not docs:
            none = ("No document failed to be ingested." if a.failed else
                    "No documents match." if a.project else "No documents yet.")
            c.print(escape(none + no_such_project(a.project, projects)), highlight=False)
            return 0
        t = Table(expand=True)
        for col in ("id", "title", "project", "chunks" if not a.failed else "why it failed", "path"):
            t.add_column(col, ratio=1 if col in ("title", "path", "why it failed") else None)
        for d in docs:
            t.add_row(d.id, escape(d.title), escape(d.project or ""), escape(d.error or "") if a.failed
                      else str(d.chunks), escape(d.path or "(text)"))
        c.print(t)
        if a.failed:
            c.print("A failed document is not retried on its own; ingest the file again to retry, or forget it.")
        return 0

    return run


COMMANDS = [
    Command("documents", "list documents (--failed: those that could not be ingested, and why)", documents),
    Command("ingest", "add files or folders to memory (text, Markdown, PDF, Word, HTML, ePub, code, …)", ingest),
]
