"""`personal-llm watch`: folders kept indexed (engine/watch.py).

`watch add|list|remove|pause|resume` change and show the folders; `watch run` watches in the foreground
(the app and `personal-llm serve` watch while they run; one program per profile watches at a time).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from .base import Command, Handler, Session, add_json, console, counted, escape, print_json

if TYPE_CHECKING:
    from ..watch import ScanReport, WatchedFolder, WatchStatus


def _state(f: WatchedFolder) -> str:
    if not f.available:
        return "[yellow]unavailable[/]"
    if f.paused:
        return "[dim]paused[/]"
    if f.scan_interrupted:
        return "[yellow]scan to finish[/]"
    if f.scanned_at is None:
        return "[dim]not scanned yet[/]"
    return "[green]watched[/]"


def _print_folders(status: WatchStatus) -> None:
    c = console()
    if not status.folders:
        c.print("No folders are watched. Add one with `personal-llm watch add PATH [--project NAME]`.")
        return
    from rich.table import Table

    t = Table(expand=True)
    for col in ("folder", "project", "state", "files", "pending", "errors"):
        t.add_column(col, ratio=1 if col == "folder" else None, justify="right" if col in (
            "files", "pending", "errors") else "left")
    for f in status.folders:
        patterns = "".join(f"\n  include {escape(p)}" for p in f.include) + "".join(
            f"\n  exclude {escape(p)}" for p in f.exclude)
        t.add_row(escape(f.path) + patterns, escape(f.project or ""), _state(f), str(f.files), str(f.pending),
                  str(f.failed + len(f.errors)))
    c.print(t)
    for f in status.folders:
        for e in f.errors[:10]:
            c.print(f"[red]error[/] {escape(e.path)}: {escape(e.error)}")
    if not status.watching:
        c.print("[dim]No watcher is running: the app, `personal-llm serve` and `personal-llm watch run` "
                "watch these folders while they run.[/]")


def watch(p: argparse.ArgumentParser) -> Handler:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    add_json(sub.add_parser("list", help="the watched folders and their status (the default)"))
    add = sub.add_parser("add", help="watch a folder (or change its project and patterns)")
    add.add_argument("path", metavar="PATH")
    add.add_argument("--project", help="the project its documents belong to")
    add.add_argument("--include", action="append", metavar="GLOB",
                     help="only files matching this pattern (repeatable; e.g. '*.md')")
    add.add_argument("--exclude", action="append", metavar="GLOB",
                     help="leave out files or folders matching this pattern (repeatable; e.g. 'drafts')")
    remove = sub.add_parser("remove", help="stop watching a folder (its documents stay unless --forget)")
    remove.add_argument("path", metavar="PATH")
    remove.add_argument("--forget", action="store_true", help="also forget the folder's documents")
    pause = sub.add_parser("pause", help="leave a folder alone until it is resumed")
    pause.add_argument("path", metavar="PATH")
    resume = sub.add_parser("resume", help="watch a paused folder again (it is scanned)")
    resume.add_argument("path", metavar="PATH")
    run_p = sub.add_parser("run", help="watch the folders in the foreground until Ctrl-C")
    run_p.add_argument("--once", action="store_true", help="scan every folder once and exit")
    for q in (p, add, remove, pause, resume, run_p):
        add_json(q)

    def run(a: argparse.Namespace, session: Session) -> int:
        action = a.action or "list"
        if action == "run":
            return _run(a, session)
        with session.open_engine() as eng:
            out: Any
            if action == "add":
                out = eng.watch_add(a.path, project=a.project, include=a.include, exclude=a.exclude)
                message = (f"Watching {escape(out.path)}" + (f" (project {escape(out.project)})" if out.project
                                                             else "") + ". ")
            elif action == "remove":
                out = eng.watch_remove(a.path, forget=a.forget)
                message = (f"No longer watching {escape(out.path)}. "
                           + (f"{out.forgotten} document(s) forgotten." if a.forget else
                              f"Its {out.kept} document(s) stay in memory (`--forget` forgets them)."))
            elif action in ("pause", "resume"):
                out = eng.watch_pause(a.path, action == "pause")
                message = f"{'Paused' if out.paused else 'Resumed'} {escape(out.path)}."
            else:
                out = eng.watch_status()
                message = ""
            status = eng.watch_status()
        if a.json:
            print_json(out)
            return 0
        if message:
            if action in ("add", "resume") and not status.watching:
                message += (" It is indexed while the app, `personal-llm serve` or `personal-llm watch run` "
                            "is running.")
            console().print(message)
        else:
            _print_folders(status)
        return 0

    return run


def _run(a: argparse.Namespace, session: Session) -> int:
    c = console()

    def report(r: ScanReport) -> None:
        if a.json:  # one JSON object a line, as the scans and events happen
            print(r.model_dump_json(), flush=True)
            return
        if not r.available:
            c.print(f"{escape(r.path)}: unavailable (its documents are kept)")
            return
        parts = [f"{n} {what}" for what, n in (("added", r.added), ("updated", r.replaced),
                                               ("forgotten", r.forgotten), ("failed", r.failed)) if n]
        if parts or a.once:
            c.print(f"{escape(r.path)}: " + (", ".join(parts) or f"up to date ({counted(r.found, 'files')})"))

    with session.open_engine() as eng:
        if a.once:
            reports = eng.watch_scan()
            if a.json:
                print_json(reports)
            for r in [] if a.json else reports:
                report(r)
            return 0
        stop = threading.Event()
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            eng.start_background()
            if not a.json:
                print("watching folders; Ctrl-C stops", file=sys.stderr)
            eng.run_watcher(stop, report)
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
    return 0


COMMANDS = [
    Command("watch", "folders kept indexed: watch [list], watch add PATH [--project P] [--include GLOB] "
                     "[--exclude GLOB], watch remove|pause|resume PATH, watch run", watch),
]
