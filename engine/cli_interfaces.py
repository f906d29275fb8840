"""CLI commands for the interfaces to other programs: `serve`, `mcp`, `token`, `export`, `import`."""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from rich.markup import escape

from .cli import Handler, add_json, command, console, open_engine, print_json
from .errors import UserError

NAMES = {"memory": "memories", "document": "documents", "chunk": "chunks", "conversation": "conversations",
         "message": "messages", "derivation": "derivations", "fact_check": "fact checks", "node": "graph nodes",
         "edge": "graph edges", "audit": "audit entries"}


def _summary(counts: dict[str, int]) -> str:
    return ", ".join(f"{v} {NAMES.get(k, k)}" for k, v in counts.items() if v)


def _export_passphrase(confirm: bool) -> str:
    """The export passphrase: $PERSONAL_LLM_EXPORT_PASSPHRASE, else typed at the terminal."""
    from .transfer import PASSPHRASE_ENV

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


@command("serve", "serve the HTTP API on 127.0.0.1 (token: `personal-llm token`)")
def _serve(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("--port", type=int, help="port on 127.0.0.1 (default: settings.api_port, 8765; 0 = any free)")
    p.add_argument("--max-body-mb", type=float, help="largest request body in MB (default 10)")
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        from .api import serve

        if a.port is not None and not 0 <= a.port <= 65535:
            raise UserError("--port must be between 0 and 65535.")

        def announce(url: str) -> None:
            if a.json:
                print_json({"url": url, "docs": f"{url}/docs"})
            else:
                console().print(f"Personal LLM API on [bold]{url}[/bold] (docs at {url}/docs). "
                                "Requests need 'Authorization: Bearer <token>' — see `personal-llm token`. "
                                "Ctrl+C stops it.")

        serve(a.port, max_body_mb=a.max_body_mb, announce=announce)
        return 0

    return run


@command("mcp", "serve MCP on stdio, for AI assistants (see docs/mcp.md)")
def _mcp(p: argparse.ArgumentParser) -> Handler:
    add_json(p)  # accepted for uniformity; stdout carries the protocol

    def run(a: argparse.Namespace) -> int:
        from .mcp import run as run_mcp

        run_mcp()
        return 0

    return run


@command("token", "print the HTTP API's bearer token")
def _token(p: argparse.ArgumentParser) -> Handler:
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        with open_engine(a) as eng:
            tok = eng.api_token()
        if a.json:
            print_json({"token": tok})
        else:
            sys.stdout.write(tok + "\n")
        return 0

    return run


@command("export", "write everything you own to a JSON Lines file (optionally encrypted)")
def _export(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("file", help="where to write the export (replaced atomically if it exists)")
    p.add_argument("--encrypt", action="store_true",
                   help="encrypt with a passphrase ($PERSONAL_LLM_EXPORT_PASSPHRASE, else asked)")
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        phrase = _export_passphrase(confirm=True) if a.encrypt else None
        with open_engine(a) as eng:
            r = eng.export(a.file, encrypt_passphrase=phrase)
        if a.json:
            print_json(r)
        else:
            what = _summary(r.counts)
            console().print(f"Exported {what or 'nothing'} to [bold]{escape(str(r.path))}[/bold]"
                            + (" (encrypted)" if r.encrypted else ""))
        return 0

    return run


@command("import", "merge an export (or a JSONL of {text, kind, at, project}) into this store")
def _import(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("file", help="an export file, or JSON Lines of memories from another tool")
    add_json(p)

    def run(a: argparse.Namespace) -> int:
        from .transfer import PASSPHRASE_ENV, is_encrypted

        phrase = None
        try:
            if is_encrypted(a.file):
                phrase = os.environ.get(PASSPHRASE_ENV) or _export_passphrase(confirm=False)
        except OSError:
            pass  # the import itself reports a missing or unreadable file clearly
        with open_engine(a) as eng:
            r = eng.import_(a.file, passphrase=phrase)
        if a.json:
            print_json(r)
        else:
            added = _summary(r.added) or "nothing new"
            skipped = sum(r.skipped.values())
            console().print(f"Imported {added}" + (f"; {skipped} already present" if skipped else "") + ".")
        return 0

    return run
