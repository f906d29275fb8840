"""The composition root of `personal-llm`: reads the configuration (the profile directory from
$PERSONAL_LLM_HOME, the settings beside it), sets up logging, builds the parser from the command modules
and opens the engine for the command that needs it. Every command takes --json; errors go to stderr with
a non-zero exit, never a traceback."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ..errors import EngineError, UserError
from ..logs import setup_logging
from ..paths import CONNECTION_FILE, HOME_ENV, home_dir, log_dir
from ..version import __version__
from . import (
    agent,
    answers,
    consolidation,
    devices,
    documents,
    folders,
    graph,
    interfaces,
    keys,
    memories,
    retrieval,
    server,
    settings,
    status,
    transfer,
    watch,
)
from .base import Command, Session

if TYPE_CHECKING:
    from ..config import Settings
    from ..engine import Engine

log = logging.getLogger(__name__)

EXIT_USER_ERROR = 1
EXIT_USAGE = 2  # as argparse exits for a command line it cannot read
EXIT_BUG = 70

COMMANDS: dict[str, Command] = {
    c.name: c for module in (memories, retrieval, status, documents, folders, answers, settings, graph,
                             consolidation, interfaces, transfer, keys, watch, agent, server, devices)
    for c in module.COMMANDS
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `command` (the one being run), only that command's parser (building the ~40
    others, each with its help texts looked up for translation, cost a short command ~30 ms of CPU: they are
    only seen by `personal-llm --help` and a command name that is not one)."""
    parser = argparse.ArgumentParser(
        prog="personal-llm",
        description="Your local, encrypted memory: remember, ingest documents, recall and ask.",
    )
    parser.add_argument("--version", action="version", version=f"personal-llm {__version__}")
    parser.add_argument("--profile", metavar="NAME", help="use the profile called NAME (first, before the command; "
                                                           "`personal-llm connect` makes one that lives on a server)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, c in COMMANDS.items() if command is None else [(command, COMMANDS[command])]:
        p = sub.add_parser(name, help=c.help, description=c.help)
        p.set_defaults(handler=c.setup(p))
    return parser


def session(base: Path | None = None) -> Session:
    """What commands get: the engine (opened when a command asks for it) and the settings. A profile that
    lives on a server (engine/remote.py) gets the server's client, with the engine's methods."""
    home = home_dir()

    loaded: list[Settings] = []

    def load() -> Settings:
        from ..config import load_settings

        settings = load_settings(home)
        loaded.append(settings.model_copy(deep=True))
        return settings

    def save(s: Settings) -> None:
        """Only what the command changed of the settings it read: a change another program made meanwhile
        (the app, a server) is kept."""
        from ..config import load_settings, settings_changes, update_settings

        base = loaded[-1] if loaded else load_settings(home)
        loaded.append(update_settings(settings_changes(base, s), home))

    shown: list[str] = []

    later_notices: list[list[str]] = []

    def open_engine() -> Engine:
        if (home / CONNECTION_FILE).exists():  # a profile that lives on a server: its client (engine/remote.py)
            from ..remote import open_remote

            remote = open_remote(home)
            if remote is not None:
                later_notices.append(remote.notices)
                return cast("Engine", remote)
        from ..engine import Engine

        eng = Engine.open(home, actor="cli", one_shot=True)
        for notice in eng.notices:  # what the opening repaired or finished
            print(f"note: {notice}", file=sys.stderr)
        if eng.recovery_key:  # this command created the store: shown (once, unasked) when the command succeeds
            shown.append(eng.recovery_key)
        return eng

    s = Session(open_engine, load, save, home, shown, base)
    s.later_notices = later_notices
    return s


def readable(arg: str) -> str:
    """An argument as text: bytes that are not UTF-8 (Python keeps them as lone surrogates, which nothing
    can encode) become U+FFFD, as a file read with errors="replace" would."""
    return arg.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def use_profile(words: list[str]) -> tuple[list[str], Path]:
    """`personal-llm --profile NAME COMMAND …`: the named profile's folder (under the default one) becomes
    this process's profile ($PERSONAL_LLM_HOME, so that every part and child process finds it). Returns the
    other words and the default profile's folder."""
    base = home_dir()
    name = None
    if words and words[0] == "--profile" and len(words) > 1:
        name, words = words[1], words[2:]
    elif words and words[0].startswith("--profile="):
        name, words = words[0].split("=", 1)[1], words[1:]
    if name is not None:
        from ..remote import profile_home

        home = profile_home(base, name)
        os.environ[HOME_ENV] = str(home)
    return words, base


# Settings of libraries this process loads, made before they load (a process it starts inherits them):
# - numpy's OpenBLAS starts on one thread, as the engine runs it (engine/minilm.py `blas`; a batch raises it
#   for its block): the thread it otherwise starts per core at load only waits, and costs a short command
#   ~20 ms of CPU on 2 cores, more with more cores;
# - pydantic does not look for plugins among every installed package's entry points when it builds its
#   first model (~20 ms): no plugin of pydantic's is used.
LIBRARY_DEFAULTS = {"OPENBLAS_NUM_THREADS": "1", "PYDANTIC_DISABLE_PLUGINS": "__all__"}


def main(argv: list[str] | None = None) -> int:
    for name, value in LIBRARY_DEFAULTS.items():
        os.environ.setdefault(name, value)
    words = [readable(a) for a in (sys.argv[1:] if argv is None else argv)]
    try:
        words, base = use_profile(words)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    setup_logging("cli")
    if not words:  # `personal-llm` alone: what it can do, not "the following arguments are required: COMMAND"
        build_parser(None).print_help(sys.stderr)
        return EXIT_USAGE
    args = build_parser(words[0] if words and words[0] in COMMANDS else None).parse_args(words)
    s: Session | None = None
    try:
        s = session(base)
        code: int = args.handler(args, s)
        return code
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except EngineError as e:
        log.error("command %s failed: %s", args.command, type(e).__name__)
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("cancelled", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:
        from ..engine import Engine

        if (env := Engine.explain(e)) is not None:  # a read that found the disk full, the file damaged, …
            log.error("command %s failed: %s", args.command, type(env).__name__)
            print(f"error: {env}", file=sys.stderr)
            return EXIT_USER_ERROR
        log.exception("command %s crashed", args.command)
        print(f"error: an internal error occurred ({type(e).__name__}); details are in {log_dir()}",
              file=sys.stderr)
        return EXIT_BUG
    finally:
        # a store made by this command: its recovery key is shown once, after the command's own output (or
        # its error: the store exists even when the command then failed)
        if s is not None and s.new_recovery_keys:
            keys.show_recovery_key(s.new_recovery_keys.pop(), fresh=True)
        for notices in s.later_notices if s is not None else []:
            for notice in notices:
                print(f"note: {notice}", file=sys.stderr)
