"""Prompts for the language model: the templates shipped in resources/prompts, and the one rule by which
stored text (memories, chunks, answers) enters a prompt — inside `<untrusted_content>` tags that the text
itself can neither open nor close."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

# "<" that would open or close our tag inside stored text, however it is spaced or cased
_TAG_START = re.compile(r"<(?=\s*/?\s*untrusted_content)", re.IGNORECASE)


@cache
def prompt(name: str) -> str:
    """A prompt template from resources/prompts."""
    return resources.files("resources").joinpath("prompts", f"{name}.txt").read_text(encoding="utf-8").strip()


def escape_untrusted(text: str) -> str:
    """Make stored text unable to open or close an `<untrusted_content>` tag."""
    return _TAG_START.sub("&lt;", text)


def untrusted(text: str) -> str:
    """Stored text wrapped for a prompt: the model is told to treat what is inside as data, not orders."""
    return f"<untrusted_content>\n{escape_untrusted(text)}\n</untrusted_content>"
