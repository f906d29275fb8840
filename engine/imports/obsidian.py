"""An Obsidian vault read as notes and the links between them. Pure functions: no store.

A vault is a folder of Markdown notes (and attachments: pictures, PDFs, ...), with the app's own settings
in ``.obsidian/``. A note links to another with ``[[Note name]]`` (also ``[[Note name|shown text]]``,
``[[Note name#Heading]]``, ``[[folder/Note name]]``) and embeds an attachment with ``![[file.png]]``.
A link names a note by its file name without ``.md`` (or by its path in the vault); names are matched
case-insensitively, as Obsidian does. Front matter (the YAML block at the top) and tags are read by the
Markdown parser (engine/parsers.py) into the document's meta.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

NOTE_SUFFIXES = (".md", ".markdown")
_WIKILINK = re.compile(r"(!?)\[\[([^\[\]\n|#^]+)(?:[#^][^\[\]\n|]*)?(?:\|[^\[\]\n]*)?\]\]")
_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")


@dataclass(frozen=True)
class Link:
    target: str  # as written, without heading or alias
    embed: bool  # ![[...]]: an attachment or a note shown inline


def links(text: str) -> list[Link]:
    """The wikilinks of a note in order, each once (those in code are not links)."""
    text = _INLINE_CODE.sub("", _FENCE.sub("", text))
    seen: dict[str, Link] = {}
    for m in _WIKILINK.finditer(text):
        target = " ".join(m.group(2).split())
        if target and target.casefold() not in seen:
            seen[target.casefold()] = Link(target, bool(m.group(1)))
    return list(seen.values())


def note_key(target: str) -> str:
    """How a link target and a note's name are compared: no .md, forward slashes, case folded."""
    t = target.strip().replace("\\", "/")
    for suffix in NOTE_SUFFIXES:
        if t.lower().endswith(suffix):
            t = t[: -len(suffix)]
    return t.casefold()


def note_keys(vault: Path, path: Path) -> list[str]:
    """The names a link may use for this file: its name and its path in the vault (notes without .md)."""
    rel = path.relative_to(vault).as_posix()
    name = path.name
    if path.suffix.lower() in NOTE_SUFFIXES:
        return list(dict.fromkeys([note_key(name), note_key(rel)]))
    return list(dict.fromkeys([name.casefold(), rel.casefold()]))


def note_title(path: Path) -> str:
    """A note's name in the graph: its file name without .md (what links use)."""
    return path.stem if path.suffix.lower() in NOTE_SUFFIXES else path.name
