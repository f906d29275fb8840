"""The rules every memory follows, whichever door it comes through and whichever backend keeps it: the
importance it starts with, its id, the hash and the content words by which duplicates are found, the limits
of its text, project and kind, and the times a store keeps. Pure functions: no store, no model."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
import unicodedata
from datetime import UTC, datetime

from .errors import UserError
from .hits import KINDS
from .limits import MAX_PROJECT_CHARS
from .terms import STOPWORDS, WORD

# Importance at birth: an explicit statement outranks a document, which outranks incidental chat.
IMPORTANCE_BY_SOURCE = {"user": 0.8, "import": 0.7, "rollup": 0.7, "document": 0.5, "chat": 0.3, "activity": 0.4}
EPISODIC_DISCOUNT = 0.1
NEAR_DUPLICATE_COSINE = 0.95
# remember(embed="auto") embeds a text this long or shorter at once (about one model window, 128 word-pieces)
AUTO_EMBED_CHARS = 700
MAX_TEXT_CHARS = 100_000


def content_hash(text: str) -> str:
    """Hash of the text as a person reads it: case, spacing and trailing punctuation don't matter."""
    norm = " ".join(unicodedata.normalize("NFKC", text).casefold().split()).rstrip(".!?;, ")
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()


_SUFFIXES = ("ing", "ed", "es", "s")


def _stem(word: str) -> str:
    if word.isdigit() or len(word) <= 4:
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> frozenset[str]:
    """The words that carry a text's facts: lowercased, function words left out, simple endings taken off
    ("works", "working" -> "work"); numbers as they are."""
    words = [w.casefold() for w in WORD.findall(unicodedata.normalize("NFKC", text))]
    return frozenset(_stem(w) for w in words if w not in STOPWORDS)


def says_the_same(a: str, b: str) -> bool:
    """Whether two texts close in meaning state the same thing: the same content words. Vectors put
    "Invoice 1001 was paid" and "Invoice 1002 was paid", or a meeting on Monday and on Tuesday, above any
    cosine threshold; merging them would drop the newer fact."""
    return content_words(a) == content_words(b)


def _visible(text: str) -> bool:
    """Whether the text has a character a person can see (not only spaces, controls, zero-width or
    direction marks)."""
    return any(not ch.isspace() and unicodedata.category(ch)[0] not in "CZ" for ch in text)


# An id's 16 characters (80 bits, base32 in Crockford's alphabet: digits and lowercase letters but i, l, o
# and u, in ASCII order so the text sorts as the number): the time in milliseconds (44 bits, to the year
# 2527) then 36 random bits. Ids made later sort after the earlier ones (within a process strictly: one more
# than the last when the clock has not moved on), so a unique index on uid takes a new row at its end, whose
# page is in the cache: with wholly random ids every insert touched a leaf anywhere in the index, a page not
# in the cache once the store is large (docs/performance.md, Flat costs). 36 random bits keep two processes
# writing in the same millisecond apart.
UID_RANDOM_BITS = 36
UID_CHARS = 16
_UID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
_uid_lock = threading.Lock()
_uid_last = 0


def new_uid(prefix: str) -> str:
    """A new id for a memory, document, chunk...: `prefix_` and 16 characters, in the order they are made."""
    global _uid_last
    with _uid_lock:
        value = max(time.time_ns() // 1_000_000 << UID_RANDOM_BITS | secrets.randbits(UID_RANDOM_BITS),
                    _uid_last + 1)
        _uid_last = value
    chars = []
    for _ in range(UID_CHARS):
        chars.append(_UID_ALPHABET[value & 31])
        value >>= 5
    return f"{prefix}_{''.join(reversed(chars))}"


def check_client_uid(uid: str | None, prefix: str) -> str | None:
    """An id a client made with `new_uid(prefix)` (a device's outbox), checked; None stays None."""
    if uid is None:
        return None
    if (not isinstance(uid, str) or len(uid) != len(prefix) + 1 + UID_CHARS or not uid.startswith(prefix + "_")
            or any(ch not in _UID_ALPHABET for ch in uid[len(prefix) + 1:])):
        raise UserError(f"{str(uid)[:40]!r} is not an id made by Personal LLM ({prefix}_ and {UID_CHARS} "
                        "characters).")
    return uid


def parse_time(value: str | float | datetime | None) -> float | None:
    """ISO-8601 (date or date-time; naive means local time), a datetime, or epoch seconds."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, int | float):
            ts = float(value)
        elif isinstance(value, datetime):
            ts = value.timestamp()
        else:
            ts = datetime.fromisoformat(value.strip().replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError) as e:
        raise UserError(f"'{value}' is not a date or time; use ISO format like 2024-05-01 or 2024-05-01T14:30.") from e
    if not MIN_TIME <= ts <= MAX_TIME:  # also false for nan
        raise UserError(f"'{value}' is not a time between the years 1 and 9999 (a time in milliseconds? use seconds "
                        "or an ISO date like 2024-05-01).")
    return ts


# The times a store keeps: what a UTC date can show (years 1 to 9999).
MIN_TIME = datetime(1, 1, 2, tzinfo=UTC).timestamp()
MAX_TIME = datetime(9999, 12, 30, tzinfo=UTC).timestamp()


def check_text(text: str) -> str:
    """The text as stored: trimmed, without NUL characters (never content, and a server's PostgreSQL cannot
    store one in text); refused when nothing is left or when it is too long."""
    text = (text or "").replace("\x00", "").strip()
    if not text or not _visible(text):
        raise UserError("There is nothing to remember: the text is empty.")
    if len(text) > MAX_TEXT_CHARS:
        raise UserError(
            f"That text is {len(text):,} characters; a memory holds at most {MAX_TEXT_CHARS:,}. "
            "Save long text as a document instead (ingest)."
        )
    return text


def check_project(project: str | None) -> str | None:
    """A project name as stored: trimmed, None when empty; refused when longer than MAX_PROJECT_CHARS (the
    HTTP API's limit too) or when it holds control characters (a line break would break every list)."""
    name = (project or "").strip()
    if not name:
        return None
    if len(name) > MAX_PROJECT_CHARS:
        raise UserError(f"That project name is {len(name):,} characters; a project name holds at most "
                        f"{MAX_PROJECT_CHARS}.")
    if any(unicodedata.category(c) == "Cc" for c in name):
        raise UserError("A project name cannot hold control characters (a line break, a tab, …).")
    return name


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise UserError(f"Unknown kind '{kind}'; use one of: {', '.join(KINDS)}.")
    return kind
