"""Commands for a profile that lives on a server (engine/remote.py; docs/server.md, "Using it from several
devices"): `connect` checks a server and a token and makes the profile use it, `disconnect` undoes that,
`outbox` lists (and sends) the writes waiting for the server."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ..errors import UserError
from .base import Command, Handler, Session, add_json, console, counted, escape, print_json, short


def _home(a: argparse.Namespace, session: Session) -> Path:
    if getattr(a, "profile", None):
        from ..remote import profile_home

        return profile_home(session.base, a.profile)
    return session.home


def _server_profile(a: argparse.Namespace, session: Session):  # type: ignore[no-untyped-def]
    from ..remote import read_server_profile

    home = _home(a, session)
    server = read_server_profile(home)
    if server is None:
        raise UserError(f"The profile at {home} keeps its memory on this computer; it is not connected to a server.")
    return server


def connect(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("url", metavar="URL", help="the server's address, https://HOST[:PORT]")
    p.add_argument("--token", required=True, help="your API token on that server (from `personal-llm server add-user`)")
    p.add_argument("--profile", metavar="NAME", help="the profile that uses the server (default: this one)")
    p.add_argument("--fingerprint", metavar="SHA256",
                   help="trust the server's self-signed certificate with this SHA-256 fingerprint (shown when "
                        "connecting without it)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        from ..locking import private_dir
        from ..remote import CertificateRefused, check_server, connect_profile, read_server_profile

        home = _home(a, session)
        try:
            checked = check_server(a.url, a.token, fingerprint=a.fingerprint)
        except CertificateRefused as e:
            if a.json and e.fingerprint:
                print_json({"connected": False, "fingerprint": e.fingerprint})
            raise
        private_dir(home)
        from ..keys import _passphrase, keychain_usable

        passphrase = None
        old = read_server_profile(home)
        if not keychain_usable() or (old is not None and old.protected is not None):
            # no keychain: a passphrase protects the token (PERSONAL_LLM_PASSPHRASE, or typed twice)
            passphrase = _passphrase(confirm=old is None or old.protected is None)
        profile = connect_profile(home, checked, a.token, passphrase=passphrase)
        if a.json:
            print_json({"connected": True, "profile": a.profile, "home": str(home), **profile.as_dict(),
                        "memories": checked.memories})
        else:
            pinned = f" (certificate pinned: {profile.fingerprint})" if profile.fingerprint else ""
            use = f"personal-llm --profile {a.profile} …" if a.profile else "every command of this profile"
            console().print(f"Connected to {escape(profile.url)}{pinned}: {counted(checked.memories, 'memories')} "
                            f"there. {use} uses it; the token is "
                            + ("protected by your passphrase." if profile.protected else "in the keychain."))
        return 0

    return run


def disconnect(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("--profile", metavar="NAME", help="the profile to disconnect (default: this one)")
    p.add_argument("--discard", action="store_true", help="drop the writes still waiting in the outbox")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        from ..remote import disconnect_profile

        server = _server_profile(a, session)
        dropped = disconnect_profile(server, drop_outbox=a.discard)
        if a.json:
            print_json({"disconnected": True, "url": server.url, "dropped": dropped})
        else:
            console().print(f"Disconnected from {escape(server.url)}: its token left the keychain"
                            + (f"; {counted(dropped, 'writes')} were dropped unsent." if dropped else "."))
        return 0

    return run


def outbox(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("--profile", metavar="NAME", help="the profile (default: this one)")
    p.add_argument("--send", action="store_true", help="send what waits now (any command that reaches the server does)")
    p.add_argument("--drop", metavar="ID", help="take one write out of the outbox unsent (one the server refused)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        from ..remote import Outbox, client_for, listing, send_waiting

        server = _server_profile(a, session)
        sent = None
        if a.drop:
            with Outbox(server) as box:
                if not box.drop(a.drop):
                    raise UserError(f"No write {a.drop} waits in the outbox.")
        if a.send:
            client = client_for(server, "cli")
            try:
                sent = send_waiting(server, client)
            finally:
                client.close()
        waiting = listing(server)
        if a.json:
            print_json(waiting)
            return 0
        c = console()
        if sent is not None:
            c.print(f"Sent {counted(sent.delivered, 'writes')}"
                    + (f"; {sent.gone} were about things already gone from the server" if sent.gone else "")
                    + (f"; {sent.refused} refused by the server" if sent.refused else "") + ".")
        if not waiting:
            c.print("Nothing waits to be sent.")
            return 0
        for w in waiting:
            what = w.get("text") or w.get("filename") or w.get("target") or ""
            state = f"[red]refused: {escape(w['refused'])}[/red]" if w["refused"] else f"tried {w['attempts']}×"
            c.print(f"{w['id']}  {w['op']:<8} {w['made_at']}  {escape(short(str(what), 60))}  [dim]{state}[/dim]")
        n = sum(1 for w in waiting if not w["refused"])
        c.print(f"{counted(n, 'writes')} waiting to send.", highlight=False)
        if n != len(waiting):
            print("note: a refused write stays until you drop it (--drop ID)", file=sys.stderr)
        return 0

    return run


def _progress(verb: str) -> Callable[[int, int], None]:
    """Progress on stderr: one line rewritten on a terminal, a line per batch otherwise."""
    tty = sys.stderr.isatty()

    def show(done: int, total: int) -> None:
        line = f"{verb} {done:,} of {total:,} records"
        print(f"\r{line}" if tty else line, end="" if tty and done < total else "\n", file=sys.stderr, flush=True)

    return show


def _moved(moved) -> str:  # type: ignore[no-untyped-def]
    """What moved, by type, for people: "1,000 memories (12 new), 20 documents (20 new), …"."""
    names = {"memory": "memories", "document": "documents", "chunk": "passages", "conversation": "conversations",
             "message": "turns", "node": "entities", "edge": "graph facts"}
    parts = []
    for kind, name in names.items():
        added, skipped = moved.added_by_type.get(kind, 0), moved.skipped_by_type.get(kind, 0)
        if added or skipped:
            parts.append(f"{added + skipped:,} {name} ({added:,} new)")
    return ", ".join(parts) or "nothing"


def push(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("url", metavar="URL", help="the server's address, https://HOST[:PORT]")
    p.add_argument("--token", required=True, help="your API token on that server")
    p.add_argument("--fingerprint", metavar="SHA256", help="the server's self-signed certificate's fingerprint")
    p.add_argument("--batch", type=int, metavar="N", help="records in one request (default 500; fewer on a slow link)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        from ..remote import ServerClient, check_server, pinned_context, push_store, read_server_profile

        if read_server_profile(session.home) is not None:
            raise UserError("This profile already keeps its memory on a server: push a local profile "
                            "(personal-llm --profile NAME push …).")
        checked = check_server(a.url, a.token, fingerprint=a.fingerprint)
        client = ServerClient(checked.url, a.token, fingerprint=checked.fingerprint,
                              verify=pinned_context(checked.certificate) if checked.certificate else True, door="cli")
        try:
            with session.open_engine() as eng:
                moved = push_store(eng, client, None if a.json else _progress("pushed"), batch=a.batch)
        finally:
            client.close()
        if a.json:
            print_json({"url": checked.url, **moved.as_dict()})
        else:
            console().print(f"Pushed to {escape(checked.url)}: {_moved(moved)}; {moved.vectors:,} vectors stored as "
                            f"they are. {moved.sent:,} of {moved.records:,} records were sent: what the server held "
                            "already stayed here, and nothing is stored twice.")
        return 0

    return run


def pull(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("--into", metavar="NAME", required=True,
                   help="the local profile to copy the account's memories into (made when new)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        from ..engine import Engine
        from ..remote import RemoteEngine, profile_home, pull_into, read_server_profile

        server = read_server_profile(session.home)
        if server is None:
            raise UserError("Pull runs on a profile that lives on a server: personal-llm --profile NAME pull --into "
                            "LOCAL.")
        home = profile_home(session.base, a.into)
        if read_server_profile(home) is not None:
            raise UserError(f"The profile {a.into} lives on a server too: pull into a local profile.")
        with RemoteEngine(server) as remote, Engine.open(home, actor="cli") as eng:
            if eng.recovery_key:
                session.new_recovery_keys.append(eng.recovery_key)
            moved = pull_into(remote, eng, None if a.json else _progress("pulled"))
            eng.embed_pending()  # searchable by meaning when the command ends
        if a.json:
            print_json({"into": a.into, "home": str(home), **moved.as_dict()})
        else:
            console().print(f"Pulled into the local profile {escape(a.into)}: {_moved(moved)}: personal-llm "
                            f"--profile {escape(a.into)} …")
        return 0

    return run


COMMANDS = [
    Command("connect", "use a Personal LLM server for this profile (or --profile NAME): connect URL --token TOKEN",
            connect),
    Command("disconnect", "stop using the server of this profile (its token leaves the keychain)", disconnect),
    Command("outbox", "the writes waiting for the server of a server profile (--send: send them now)", outbox),
    Command("push", "upload this local profile (memories, documents, conversations, the graph, vectors) into your "
                    "account on a server: push URL --token TOKEN", push),
    Command("pull", "copy a server profile's account (memories, documents, conversations, the graph, vectors) into a "
                    "local encrypted profile: pull --into NAME", pull),
]
