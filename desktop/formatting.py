"""How the app writes times, kinds and counts for people."""

from __future__ import annotations

from datetime import date, datetime

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


def editable_when(value: str | None) -> str:
    """A stored time as a person types it, in local time: '2024-05-01' for a day (midnight), else
    '2024-05-01 14:30'. `natural_date` reads both back to the same moment."""
    moment = parse_iso(value)
    if moment is None:
        return value or ""
    if (moment.hour, moment.minute, moment.second) == (0, 0, 0):
        return moment.date().isoformat()
    return f"{moment:%Y-%m-%d %H:%M}"


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10}


def natural_date(text: str, today: date | None = None) -> str | None:
    """A date typed the way people say it, as ISO (YYYY-MM-DD, or YYYY-MM-DDTHH:MM when a time is given):
    'today', 'yesterday', 'tomorrow', 'next tuesday', 'last friday', 'monday', 'in 3 days', '2 weeks ago',
    '3 march', 'March 3 2024', '2024-05-01', '2024-05-01 14:30'. None when it is not a date."""
    import re
    from datetime import timedelta

    t = " ".join(text.lower().replace(",", " ").split())
    if not t:
        return None
    try:
        return datetime.fromisoformat(t.upper().replace(" ", "T")).isoformat(timespec="minutes") \
            if any(c in t for c in ":t ") and t[:4].isdigit() else date.fromisoformat(t).isoformat()
    except ValueError:
        pass
    today = today or date.today()
    clock = re.search(r"\s*(?:at\s+)?(\d{1,2})[:.](\d{2})$", t)
    suffix = ""
    if clock:
        hour, minute = int(clock[1]), int(clock[2])
        if hour > 23 or minute > 59:
            return None
        suffix = f"T{hour:02d}:{minute:02d}"
        t = t[: clock.start()].strip()
    day: date | None = None
    simple = {"today": 0, "tonight": 0, "now": 0, "yesterday": -1, "tomorrow": 1, "day before yesterday": -2,
              "day after tomorrow": 2}
    if t in simple:
        day = today + timedelta(days=simple[t])
    elif m := re.fullmatch(r"(next|last|this|on)?\s*(" + "|".join(WEEKDAYS) + r")", t):
        target = WEEKDAYS.index(m[2])
        ahead = (target - today.weekday()) % 7
        if m[1] == "last":
            day = today - timedelta(days=(today.weekday() - target) % 7 or 7)
        else:
            day = today + timedelta(days=ahead or 7 if m[1] == "next" else ahead)
    elif m := re.fullmatch(r"in\s+(\d+|\w+)\s+(day|week|month)s?", t) or re.fullmatch(
            r"(\d+|\w+)\s+(day|week|month)s?\s+ago", t):
        n = int(m[1]) if m[1].isdigit() else _NUMBERS.get(m[1])
        if n is None:
            return None
        days = n * {"day": 1, "week": 7, "month": 30}[m[2]]
        day = today + timedelta(days=days if t.startswith("in") else -days)
    else:
        months = "|".join(MONTHS) + "|" + "|".join(m[:3] for m in MONTHS) + "|sept"
        m = re.fullmatch(rf"(\d{{1,2}})(?:st|nd|rd|th)?\s+({months})\.?(?:\s+(\d{{4}}))?", t) or re.fullmatch(
            rf"({months})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?(?:\s+(\d{{4}}))?", t)
        if m:
            a, b, year = m[1], m[2], m[3]
            day_s, month_s = (a, b) if a.isdigit() else (b, a)
            month = next(i + 1 for i, name in enumerate(MONTHS) if name.startswith(month_s[:3]))
            try:
                day = date(int(year) if year else today.year, month, int(day_s))
            except ValueError:
                return None
    return None if day is None else day.isoformat() + suffix


def message_html(text: str) -> str:
    """A message for a rich-text label: `commands` set as code (no backticks shown), web addresses as links,
    and neither broken across lines."""
    import html
    import re

    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", lambda m: f"<nobr><code>{m[1]}</code></nobr>", out)

    def link(m: re.Match[str]) -> str:
        url = m[0].rstrip(".,:;)")
        rest = m[0][len(url):]
        shown = url.removeprefix("https://").removeprefix("http://") if "ollama.com" in url else url
        shown = shown.replace("/", "/\u2060").replace(":", ":\u2060")  # word joiners:
        return f"<nobr><a href='{url}'>{shown}</a></nobr>{rest}"  # Qt breaks after '/' even in <nobr>

    out = re.sub(r"https?://[^\s<>'\"]+", link, out)
    return out


def size(n: int) -> str:
    """'812 bytes', '14 KB', '3.2 MB'."""
    if n < 1000:
        return "1 byte" if n == 1 else f"{n} bytes"
    value = float(n)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000 or unit == "TB":
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{n} bytes"


def fingerprint_lines(fingerprint: str, per_line: int = 8) -> str:
    """A certificate's fingerprint (AB:CD:… 32 pairs) in lines of `per_line` pairs: it has no space to wrap
    at, and in one line it widens a dialog past a small screen."""
    pairs = fingerprint.split(":")
    return "\n".join(":".join(pairs[i:i + per_line]) for i in range(0, len(pairs), per_line))
