"""Commands that move everything in or out: `export` and `import`."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import sys
import threading
from collections.abc import Callable, Iterator

from ..errors import UserError
from .base import Command, Handler, Session, add_json, console, counted, escape, print_json

NAMES = {"memory": "memories", "document": "documents", "chunk": "chunks", "conversation": "conversations",
         "message": "messages", "derivation": "derivations", "fact_check": "fact checks", "node": "graph nodes",
         "edge": "graph edges", "audit": "audit entries"}


def _summary(counts: dict[str, int]) -> str:
    return ", ".join(counted(v, NAMES.get(k, k)) for k, v in counts.items() if v)


def _export_passphrase(confirm: bool) -> str:
    """The export passphrase: $PERSONAL_LLM_EXPORT_PASSPHRASE, else typed at the terminal."""
    from ..transfer import PASSPHRASE_ENV

    env = os.environ.get(PASSPHRASE_ENV)
    if env:
        return env
    if not sys.stdin or not sys.stdin.isatty():
        raise UserError(f"A passphrase is needed: set {PASSPHRASE_ENV} or run this command in a terminal to type it.")
    first = getpass.getpass("Passphrase for the export: ")
    if not first:
        raise UserError("An empty passphrase cannot protect an export.")
    if confirm and getpass.getpass("Repeat the passphrase: ") != first:
        raise UserError("The two passphrases differ; nothing was written.")
    return first


def export(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("file", help="where to write the export (replaced atomically if it exists)")
    p.add_argument("--encrypt", action="store_true",
                   help="encrypt with a passphrase ($PERSONAL_LLM_EXPORT_PASSPHRASE, else asked)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        phrase = _export_passphrase(confirm=True) if a.encrypt else None
        with session.open_engine() as eng:
            r = eng.export(a.file, encrypt_passphrase=phrase)
        if a.json:
            print_json(r)
        else:
            what = _summary(r.counts)
            console().print(f"Exported {what or 'nothing'} to [bold]{escape(str(r.path))}[/bold]"
                            + (" (encrypted)" if r.encrypted else ""))
        return 0

    return run


SOURCES = ("chatgpt", "claude", "obsidian")


def import_(p: argparse.ArgumentParser) -> Handler:
    p.description = ("import FILE merges an export of this app (or JSON Lines of memories). import chatgpt FILE "
                     "and import claude FILE read a ChatGPT or Claude data export (its zip or its "
                     "conversations.json); import obsidian VAULT reads an Obsidian vault (a folder).")
    p.add_argument("file", metavar="FILE|SOURCE",
                   help="an export file, or JSON Lines of memories from another tool; or chatgpt, claude, obsidian")
    p.add_argument("source_file", nargs="?", metavar="PATH",
                   help="with a SOURCE: the ChatGPT/Claude export (zip or conversations.json) or the vault folder")
    p.add_argument("--project", help="with a SOURCE: the project the imported conversations or notes go into")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        from ..transfer import PASSPHRASE_ENV, is_encrypted

        if a.source_file is not None:
            return _import_source(a, session)
        if a.file.lower() in SOURCES and not os.path.exists(a.file):
            raise UserError(f"import {a.file.lower()} needs the export to read: personal-llm import "
                            f"{a.file.lower()} PATH.")
        if a.project:
            raise UserError("--project goes with an import from chatgpt, claude or obsidian.")

        phrase = None
        try:
            if is_encrypted(a.file):
                phrase = os.environ.get(PASSPHRASE_ENV) or _export_passphrase(confirm=False)
        except OSError:
            pass  # the import itself reports a missing or unreadable file clearly
        with session.open_engine() as eng, _embedding_bar() as progress:
            r = eng.import_(a.file, passphrase=phrase, progress=progress)
        if a.json:
            print_json(r)
        else:
            added = _summary(r.added) or "nothing new"
            skipped = sum(r.skipped.values())
            console().print(f"Imported {added}" + (f"; {skipped} already present" if skipped else "") + ".")
        return 0

    return run


@contextlib.contextmanager
def _embedding_bar() -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr (only on a terminal) while an import embeds what it added: minutes for a
    big export."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    err = Console(stderr=True, highlight=False)
    with Progress(TextColumn("embedding what was imported"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("embedding", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _import_source(a: argparse.Namespace, session: Session) -> int:
    source = a.file.lower()
    if source not in SOURCES:
        raise UserError(f"Unknown source '{a.file}': use one of {', '.join(SOURCES)} (import SOURCE PATH), or give "
                        "one file alone to merge an export of this app (import FILE).")
    if source == "obsidian":  # the notes are ingested as documents: the same progress and Ctrl-C as `ingest`
        from .documents import ctrl_c_cancels, progress_bar

        cancel = threading.Event()
        with session.open_engine() as eng, progress_bar() as progress, ctrl_c_cancels(cancel):
            r = eng.import_obsidian(a.source_file, project=a.project, progress=progress, cancel=cancel)
    else:
        with session.open_engine() as eng:
            importer = eng.import_chatgpt if source == "chatgpt" else eng.import_claude
            r = importer(a.source_file, project=a.project)
    if a.json:
        print_json(r)
        return 0
    out = console()
    if source == "obsidian":
        out.print(f"Imported {r.documents} note{'s' if r.documents != 1 else ''} and attachments"
                  + (f" ({r.unchanged} already present)" if r.unchanged else "")
                  + f", {r.links} link{'s' if r.links != 1 else ''} between notes.")
        for reason in r.failed:
            out.print(f"  [yellow]not read:[/yellow] {escape(reason)}")
    else:
        out.print(f"Imported {r.messages} message{'s' if r.messages != 1 else ''} in {r.conversations} "
                  f"conversation{'s' if r.conversations != 1 else ''}"
                  + (f"; {r.skipped} already present" if r.skipped else "")
                  + (f"; {r.empty} empty" if r.empty else "") + ".")
    return 1 if source == "obsidian" and r.failed and not (r.documents or r.unchanged) else 0


COMMANDS = [
    Command("export", "write everything you own to a JSON Lines file (optionally encrypted)", export),
    Command("import", "merge an export (or a JSONL of {text, kind, at, project}) into this store; "
                      "import chatgpt|claude FILE, import obsidian VAULT: your history from elsewhere", import_),
]
