"""What every command module shares: the command record, the session a command runs in, output helpers."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from ..config import Settings
    from ..engine import Engine


class Session:
    """What a command gets from the composition root (engine/cli/root.py): the engine, opened on demand,
    and the settings. Commands never open a store or read configuration themselves."""

    def __init__(self, open_engine: Callable[[], Engine], load_settings: Callable[[], Settings],
                 save_settings: Callable[[Settings], None], home: Path,
                 new_recovery_keys: list[str] | None = None, base: Path | None = None):
        self.home = home  # the profile directory (what `folders` keeps the API away from)
        self.base = base or home  # the default profile's directory (named profiles live under it)
        self.later_notices: list[list[str]] = []  # shown on stderr when the command ends (a write kept to send)
        self.new_recovery_keys = new_recovery_keys if new_recovery_keys is not None else []  # shown after success
        self.open_engine = open_engine
        self.load_settings = load_settings
        self.save_settings = save_settings


Handler = Callable[[argparse.Namespace, Session], int]


@dataclass(frozen=True)
class Command:
    """A subcommand: `setup` adds its arguments to its parser and returns the handler that runs it."""

    name: str
    help: str
    setup: Callable[[argparse.ArgumentParser], Handler]


def dump(obj: Any) -> str:
    def conv(o: Any) -> Any:
        if hasattr(o, "model_dump"):  # a pydantic model, or a hit (engine/hits.py: plain data, as the API sends it)
            return o.model_dump(mode="json")
        if isinstance(o, list | tuple):
            return [conv(x) for x in o]
        if isinstance(o, dict):
            return {k: conv(v) for k, v in o.items()}
        return o

    return json.dumps(conv(obj), ensure_ascii=False, indent=2)


def print_json(obj: Any) -> None:
    sys.stdout.write(dump(obj) + "\n")
    sys.stdout.flush()


def console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


# Terminal control sequences (colours, a window title, a cursor move) and other control characters: text
# from an import, the API or MCP is shown, never obeyed by the terminal.
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x00-\x1f\x7f]*(?:\x07|\x1b\\)?|\x1b.?|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """The text as a terminal may print it: control sequences and characters taken out (lines kept)."""
    return _CONTROL.sub("", text)


def escape(text: str) -> str:
    """User text for rich markup: shown as written (no `[bold]` taken as a style), without the control
    sequences a terminal would obey."""
    from rich.markup import escape as markup_escape

    return markup_escape(visible(text))


def short(text: str, n: int = 90) -> str:
    text = " ".join(visible(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def counted(n: int, plural: str) -> str:
    """A count and its noun, singular for one: '1 chunk', '2 chunks', '1 memory', '1 audit entry'."""
    if n == 1:
        plural = plural[:-3] + "y" if plural.endswith("ies") else plural[:-1] if plural.endswith("s") else plural
    return f"{n:,} {plural}"


def no_such_project(project: str | None, projects: list[str]) -> str:
    """What to add when a listing came back empty because --project names no project (a typo, another case:
    "Work" is not "work"), else ''. Without it an empty list read as if everything had been lost."""
    name = (project or "").strip()
    if not name or name in projects:
        return ""
    if not projects:
        return f" There is no project '{name}': nothing is in a project yet."
    return f" There is no project '{name}'; the projects are: {', '.join(projects)}."


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")


def an_id(value: str) -> str:
    """An id argument (mem_…, doc_…, chk_…, cnv_…): an empty one is refused by the parser, with the usage,
    instead of being looked up ("No memory with id .")."""
    value = value.strip()
    if not value:
        raise argparse.ArgumentTypeError("the id is empty; give one such as mem_… (`personal-llm list` shows them)")
    return value
