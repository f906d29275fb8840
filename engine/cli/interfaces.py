"""Commands for the interfaces to other programs: `serve`, `mcp`, `token`."""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import UserError
from .base import Command, Handler, Session, add_json, console, print_json

MAX_BODY_MB = 4096  # a request body larger than this is refused whatever --max-body-mb says


def serve(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("--port", type=int, help="port (default: settings.api_port, 8765; 0 = any free)")
    p.add_argument("--max-body-mb", type=float, help="largest request body in MB (default 10)")
    server = p.add_argument_group("a server of many users (docs/server.md)")
    server.add_argument("--database", metavar="URL",
                        help="serve the users of this PostgreSQL database instead of this profile "
                             "(or PERSONAL_LLM_DATABASE)")
    server.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1; another one needs "
                                                     "--tls-cert and --tls-key, or --behind-proxy)")
    server.add_argument("--tls-cert", metavar="FILE", help="the server's certificate (PEM)")
    server.add_argument("--tls-key", metavar="FILE", help="its private key (PEM)")
    server.add_argument("--behind-proxy", action="store_true",
                        help="listen without TLS on a non-loopback address: a TLS proxy in front is the only way in")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        from ..api import serve

        if a.port is not None and not 0 <= a.port <= 65535:
            raise UserError("--port must be between 0 and 65535.")
        if a.max_body_mb is not None and not 0.001 <= a.max_body_mb <= MAX_BODY_MB:  # also false for nan
            raise UserError(f"--max-body-mb must be a number of MB from 0.001 to {MAX_BODY_MB:,}.")
        database = a.database or os.environ.get("PERSONAL_LLM_DATABASE")
        if not database and (a.host or a.tls_cert or a.tls_key or a.behind_proxy):
            raise UserError("--host, --tls-cert, --tls-key and --behind-proxy are for a server: give --database "
                            "URL too. A profile's own API listens on 127.0.0.1 only.")

        def announce(url: str) -> None:
            if a.json:
                print_json({"url": url, "docs": f"{url}/docs"})
            else:
                console().print(f"Personal LLM API on [bold]{url}[/bold] (docs at {url}/docs). "
                                "Requests need 'Authorization: Bearer <token>' — see `personal-llm token`. "
                                "Ctrl+C stops it.")

        if database:
            from ..server import serve_database

            def announce_server(url: str) -> None:
                if a.json:
                    print_json({"url": url, "docs": f"{url}/docs"})
                else:
                    console().print(f"Personal LLM server on [bold]{url}[/bold] for the users of its database. "
                                    "Each request needs 'Authorization: Bearer <token>' of a user "
                                    "(`personal-llm server add-user`). Ctrl+C stops it.")

            serve_database(database, host=a.host or "127.0.0.1", port=a.port, tls_cert=a.tls_cert,
                           tls_key=a.tls_key, behind_proxy=a.behind_proxy, max_body_mb=a.max_body_mb or 10.0,
                           announce=announce_server)
            return 0
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
