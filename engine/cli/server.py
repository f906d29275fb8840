"""`personal-llm server`: a PostgreSQL database serving many users (docs/server.md): `init` creates or
upgrades its schema, `add-user` makes a user and prints their API token once, `users` lists them,
`remove-user` removes one (`--forget`: with every row of theirs). The database is --database URL or
$PERSONAL_LLM_DATABASE; its password is never printed."""

from __future__ import annotations

import argparse
import os

from .base import Command, Handler, Session, add_json, console, counted, escape, print_json

ENV = "PERSONAL_LLM_DATABASE"


def server(p: argparse.ArgumentParser) -> Handler:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    init = sub.add_parser("init", help="create the schema, or bring it up to date (safe to run again)")
    add = sub.add_parser("add-user", help="add a user and print their API token (shown only this once)")
    add.add_argument("name", metavar="NAME")
    listing = sub.add_parser("users", help="list the users")
    remove = sub.add_parser("remove-user", help="remove a user: their tokens stop working")
    remove.add_argument("name", metavar="NAME")
    remove.add_argument("--forget", action="store_true",
                        help="also erase every memory, document and other row of theirs (cannot be undone)")
    for q in (init, add, listing, remove):
        q.add_argument("--database", metavar="URL",
                       help=f"postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE (default: ${ENV})")
        add_json(q)

    def run(a: argparse.Namespace, session: Session) -> int:
        from .. import users  # psycopg and the model's space: only for these commands

        url = a.database or os.environ.get(ENV) or ""
        if a.action == "init":
            where, done = users.init(url)
            if a.json:
                print_json({"database": where, "schema_version": done.version, "migrations_applied": done.applied})
            else:
                what = f"{counted(done.applied, 'migrations')} applied" if done.applied else "already up to date"
                console().print(f"{escape(where)} is ready: schema version {done.version} ({what}).")
        elif a.action == "add-user":
            token = users.add(url, a.name)
            if a.json:
                print_json({"user": a.name, "token": token})
            else:
                console().print(f"User {escape(a.name)} added. Their API token, shown only this once "
                                "(the database keeps only its hash):")
                print(token)
        elif a.action == "users":
            found = users.listing(url)
            if a.json:
                print_json([u.as_dict() for u in found])
            elif not found:
                console().print("No users yet: add one with `personal-llm server add-user NAME`.")
            else:
                for u in found:
                    state = "removed" if u.removed else counted(u.tokens, "tokens")
                    console().print(f"{escape(u.name)}  added {u.created_at}  {state}")
        else:
            gone = users.remove(url, a.name, forget=a.forget)
            if a.json:
                print_json({"user": a.name, "forgotten": a.forget, "rows": gone})
            elif a.forget:
                console().print(f"User {escape(a.name)} and {counted(sum(gone.values()), 'rows')} of theirs "
                                "were erased.")
            else:
                console().print(f"User {escape(a.name)} removed: their tokens no longer work; their rows are "
                                f"kept (erase them with `personal-llm server remove-user {escape(a.name)} --forget`).")
        return 0

    return run


COMMANDS = [
    Command("server", "a PostgreSQL database for many users: server init | add-user NAME | users | "
                      "remove-user NAME [--forget] (--database URL or $PERSONAL_LLM_DATABASE)", server),
]
