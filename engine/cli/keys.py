"""`personal-llm unlock`, `key`, `compact`, `backup`: the store's key, erasure and encrypted snapshots."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
import time

from ..errors import KeyMissing, UserError
from ..keys import PASSPHRASE_ENV, keychain_usable, passphrase_problem
from .base import Command, Handler, Session, add_json, console, print_json

NEW_PASSPHRASE_ENV = "PERSONAL_LLM_NEW_PASSPHRASE"


def new_passphrase(required: bool = True) -> str | None:
    """A new passphrase: $PERSONAL_LLM_NEW_PASSPHRASE, else typed twice in a terminal."""
    env = os.environ.get(NEW_PASSPHRASE_ENV)
    if env:
        if problem := passphrase_problem(env):
            raise UserError(f"{NEW_PASSPHRASE_ENV}: {problem} Nothing was changed.")
        return env
    if not sys.stdin or not sys.stdin.isatty():
        if not required:
            return None
        raise KeyMissing(f"Set {NEW_PASSPHRASE_ENV} or run this command in a terminal to type the new passphrase.")
    first = getpass.getpass("New passphrase: ")
    if getpass.getpass("Repeat the new passphrase: ") != first:
        raise UserError("The two passphrases differ; nothing was changed.")
    if problem := passphrase_problem(first):
        raise UserError(problem + " Nothing was changed.")
    return first


def show_recovery_key(key: str, *, fresh: bool) -> None:
    """Print a recovery key for a person (on stderr, so --json output stays clean)."""
    what = "Your new recovery key" if fresh else "Your recovery key"
    print(f"\n{what} (write it down or print it, and keep it away from this computer):\n\n    {key}\n\n"
          "It opens your memory on any computer: personal-llm unlock --recovery-key …\n", file=sys.stderr)


def unlock(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("--recovery-key", required=True, help="the recovery key shown when the store was made")
    p.add_argument("--new-passphrase", action="store_true",
                   help=f"protect the store with a new passphrase instead of the keychain (${NEW_PASSPHRASE_ENV} "
                        "or typed)")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        from ..engine import Engine
        from ..recovery import parse_recovery_key

        parse_recovery_key(a.recovery_key)  # a mistyped key is said before a new passphrase is asked for
        phrase = new_passphrase() if a.new_passphrase or not keychain_usable() else None
        msg = Engine.unlock_with_recovery(session.home, a.recovery_key, new_passphrase=phrase)
        if a.json:
            print_json({"ok": True, "message": msg})
        else:
            console().print(msg)
        return 0

    return run


def key(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("action", choices=["change-passphrase", "rotate", "show-recovery"])
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
            out: dict[str, object] = {"action": a.action}
            if a.action == "change-passphrase":
                out["message"] = eng.change_passphrase(new_passphrase() or "")
            elif a.action == "rotate":
                phrase = None
                if not eng.has_data_key:  # a store whose key is its passphrase: wrap the new key with it
                    phrase = os.environ.get(PASSPHRASE_ENV) or getpass.getpass("Passphrase (to keep using it): ")
                rk = eng.rotate_key(passphrase=phrase)
                out["message"] = "The store was re-encrypted with a new key."
                if rk:
                    show_recovery_key(rk, fresh=True)
            else:
                rk, fresh = eng.show_recovery_key()
                show_recovery_key(rk, fresh=fresh)
                out["message"] = "A recovery key was made for this store." if fresh else "Recovery key shown."
        if a.json:
            print_json(out)
        else:
            console().print(out["message"])
        return 0

    return run


def compact(p: argparse.ArgumentParser) -> Handler:
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        with session.open_engine() as eng:
            r = eng.compact()
        if a.json:
            print_json(r)
        else:
            console().print(f"Compacted: {r['bytes_before'] / 1e6:.1f} MB → {r['bytes_after'] / 1e6:.1f} MB")
        return 0

    return run


def backup(p: argparse.ArgumentParser) -> Handler:
    p.add_argument("action", choices=["now", "list", "restore"])
    p.add_argument("snapshot", nargs="?", help="for restore: a name from `backup list`, or a snapshot file")
    add_json(p)

    def run(a: argparse.Namespace, session: Session) -> int:
        out: dict[str, object]
        if a.action == "restore":
            if not a.snapshot:
                raise UserError("Name the snapshot to restore (see `personal-llm backup list`).")
            from ..engine import Engine

            existed = Engine.store_exists(session.home)
            snap, aside, opens = Engine.restore_snapshot(session.home, a.snapshot, actor="cli")
            if existed:
                from ..backup import kept_aside_note

                out = {"restored": snap.name, "previous_store_kept_at": str(aside) if aside else None}
                msg = f"Restored {snap.name}."
                if aside:
                    note, until = kept_aside_note(aside)
                    out["previous_store_kept_until"] = until
                    msg += f" {note}"
            else:
                out = {"restored": snap.name, "opens_here": opens}
                msg = f"Restored {snap.name}." + ("" if opens else " Open it with `personal-llm unlock "
                                                                   "--recovery-key …`.")
        else:
            with session.open_engine() as eng:
                if a.action == "now":
                    s = eng.backup_now()
                    out = {"snapshot": s.name, "path": str(s.path), "bytes": s.bytes}
                    msg = f"Snapshot {s.name} written ({s.bytes / 1e6:.1f} MB) to {s.path.parent}."
                else:
                    snaps = eng.snapshots()
                    st = eng.backup_status()
                    out = {"snapshots": [{"name": s.name, "at": s.at, "bytes": s.bytes} for s in snaps],
                           "folder": str(st.folder), "schedule": st.schedule, "due": st.due, "old": st.old}
                    msg = "\n".join(f"{s.name}  {s.bytes / 1e6:.1f} MB" for s in snaps) or "No snapshots yet."
                    if snaps and st.old:
                        days = (time.time() - snaps[0].at) / 86400
                        msg += f"\nThe newest snapshot is {days:.0f} days old: run `personal-llm backup now`."
        if a.json:
            print_json(out)
        else:
            console().print(msg)
        return 0

    return run


COMMANDS = [
    Command("unlock", "open the store with its recovery key on a new computer (writes a new keychain entry)",
            unlock),
    Command("key", "manage the store's key: change-passphrase, rotate, show-recovery", key),
    Command("compact", "rebuild the store file without free space (VACUUM); forgotten data is already erased",
            compact),
    Command("backup", "encrypted snapshots of the store: backup now | list | restore SNAPSHOT", backup),
]
