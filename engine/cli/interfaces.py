"""Commands for the interfaces to other programs: `serve`, `mcp`, `token`."""

from __future__ import annotations

import argparse
import sys

from ..errors import UserError
from .base import Command, Handler, Session, add_json, console, print_json

MAX_BODY_MB = 4096  # a request body larger than this is refused whatever --max-body-mb says


def serve(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("--port", type=int, help="port on 127.0.0.1 (default: settings.api_port, 8765; 0 = any free)")
    p.add_argument("--max-body-mb", type=float, help="largest request body in MB (default 10)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        from ..api import serve

        if a.port is not None and not 0 <= a.port <= 65535:
            raise UserError("--port must be between 0 and 65535.")
        if a.max_body_mb is not None and not 0.001 <= a.max_body_mb <= MAX_BODY_MB:  # also false for nan
            raise UserError(f"--max-body-mb must be a number of MB from 0.001 to {MAX_BODY_MB:,}.")

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


def mcp(p: argparse.ArgumentParser) -> Handler:
    add_json(p)  # accepted for uniformity; stdout carries the protocol

    def run(a: argparse.Namespace, session: Session) -> int:
        from ..mcp import run as run_mcp

        run_mcp()
        return 0

    return run


def token(p: argparse.ArgumentParser) -> Handler:
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
            tok = eng.api_token()
        if a.json:
            print_json({"token": tok})
        else:
            sys.stdout.write(tok + "\n")
        return 0

    return run


COMMANDS = [
    Command("serve", "serve the HTTP API on 127.0.0.1 (token: `personal-llm token`)", serve),
    Command("mcp", "serve MCP on stdio, for AI assistants (see docs/mcp.md)", mcp),
    Command("token", "print the HTTP API's bearer token", token),
]
