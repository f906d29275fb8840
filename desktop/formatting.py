"""How the app writes times, kinds and counts for people."""

from __future__ import annotations

from datetime import datetime

KIND_LABELS = {"fact": "Fact", "episodic": "Event", "procedural": "How-to", "chunk": "Document"}


def kind_label(kind: str) -> str:
    return KIND_LABELS.get(kind, kind.title())


def parse_iso(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone()
    except ValueError:
        return None


def when(value: str | None, now: datetime | None = None) -> str:
    """'Today 14:30', 'Yesterday 09:05', '12 Mar', '12 Mar 2023'."""
    moment = parse_iso(value)
    if moment is None:
        return ""
    now = now or datetime.now().astimezone()
    days = (now.date() - moment.date()).days
    if days == 0:
        return f"Today {moment:%H:%M}"
    if days == 1:
        return f"Yesterday {moment:%H:%M}"
    if moment.year == now.year:
        return f"{moment.day} {moment:%b}"
    return f"{moment.day} {moment:%b %Y}"


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
