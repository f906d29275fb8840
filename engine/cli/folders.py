"""`personal-llm folders`: the folders the HTTP API may ingest files from (settings.ingest.allowed_folders).

The CLI itself is not limited (it acts for the user at the keyboard); see engine/pathpolicy.py.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import UserError
from .base import Command, Handler, Session, add_json, console, escape, print_json


def folders(p: argparse.ArgumentParser) -> Handler:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    add_json(sub.add_parser("list", help="show the allowed folders (the default)"))
    allow = sub.add_parser("allow", help="let API clients ingest files under these folders")
    allow.add_argument("paths", nargs="+", metavar="PATH")
    remove = sub.add_parser("remove", help="stop allowing these folders")
    remove.add_argument("paths", nargs="+", metavar="PATH")
    for q in (p, allow, remove):
        add_json(q)

    def run(a: argparse.Namespace, session: Session) -> int:
        home = session.home
        settings = session.load_settings()
        folders = list(settings.ingest.allowed_folders)
        if a.action == "allow":
            from ..pathpolicy import PathPolicy

            policy = PathPolicy([], profile=home)
            for raw in a.paths:
                path = Path(os.path.realpath(Path(raw).expanduser()))
                if not path.is_dir():
                    raise UserError(f"{raw} is not a folder.")
                if path == Path(path.anchor):
                    raise UserError(f"{raw} is the whole disk; allow the folders that hold your documents instead.")
                if (why := policy.secret(path)) is not None:
                    raise UserError(f"Not allowed: {why}.")
                if str(path) not in folders:
                    folders.append(str(path))
        elif a.action == "remove":
            for raw in a.paths:
                real = str(Path(os.path.realpath(Path(raw).expanduser())))
                if real not in folders and raw not in folders:
                    raise UserError(f"{raw} is not an allowed folder (`personal-llm folders` lists them).")
                folders = [f for f in folders if f not in (real, raw)]
        if folders != settings.ingest.allowed_folders:
            settings.ingest.allowed_folders = folders
            session.save_settings(settings)
        if a.json:
            print_json({"allowed_folders": folders})
        elif folders:
            console().print("The HTTP API may ingest files under:\n" + "\n".join(f"  {escape(f)}" for f in folders))
        else:
            console().print("No folders are allowed: API clients can only upload files (POST /ingest/upload). "
                            "Allow one with `personal-llm folders allow PATH`.")
        return 0

    return run


COMMANDS = [
    Command("folders", "folders the HTTP API may ingest from: folders [list], folders allow PATH…, "
                       "folders remove PATH…", folders),
]
