"""Time named in a question: "last May", "two weeks ago", "in 2023", "yesterday", "recently".

`cue(query, now)` reads the question's words only (no model) and returns what time it asks about:
a window of time (`since`..`until`, epoch seconds, local time) or a wish for the newest (or oldest)
memories, or None when the question names no time. Recall uses it to prefer memories whose event time
fits (docs/retrieval.md, "Time in questions"); it never filters, so a misread cue costs order, not
answers. Pure functions, tested in tests/unit/test_timecues.py.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta

DAY = 86_400.0

MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
MONTHS["sept"] = 9
WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "couple": 2, "few": 3, "several": 3}
UNITS = {"day": 1, "week": 7, "fortnight": 14, "month": 30.44, "year": 365.25}

_MONTH_RE = "|".join(sorted(MONTHS, key=len, reverse=True))
_NUM_RE = r"\d{1,3}|" + "|".join(sorted(NUMBERS, key=len, reverse=True))
_UNIT_RE = r"(day|week|fortnight|month|year)s?"

_AGO = re.compile(rf"\b(?:(?:a\s+)?(?P<n>{_NUM_RE})\s+(?:of\s+)?)?{_UNIT_RE}\s+ago\b")
_LAST_UNIT = re.compile(rf"\b(?P<which>last|past|previous|this|current)\s+(?:(?P<n>{_NUM_RE})\s+)?{_UNIT_RE}\b")
_LAST_WEEKDAY = re.compile(r"\b(?P<which>last|this|on)\s+(?P<d>" + "|".join(WEEKDAYS) + r")\b")
_DAY_MONTH_YEAR = re.compile(
    rf"\b(?:(?P<d1>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<m1>{_MONTH_RE})\.?|(?P<m2>{_MONTH_RE})\.?\s+"
    rf"(?P<d2>\d{{1,2}})(?:st|nd|rd|th)?)(?:,?\s+(?P<y>(?:19|20)\d\d))?\b"
)
_MONTH_YEAR = re.compile(rf"\b(?P<which>last|this|in|during|since|of|early|late|mid)?\s*(?P<m>{_MONTH_RE})\.?"
                         rf"(?:,?\s+(?P<y>(?:19|20)\d\d))?\b")
_YEAR = re.compile(r"\b(?:in|during|of|since|from|for)?\s*(?P<y>(?:19|20)\d\d)\b")
_ISO_DATE = re.compile(r"\b(?P<y>(?:19|20)\d\d)-(?P<m>\d\d)-(?P<d>\d\d)\b")
# 16.01.2024 (day first, as everywhere dots separate a date), 16/01/2024 or 01/16/2024 (only when one of the
# two can only be the day)
_NUMERIC_DATE = re.compile(r"\b(?P<a>\d{1,2})(?P<sep>[./])(?P<b>\d{1,2})(?P=sep)(?P<y>(?:19|20)\d\d)\b")
_SIMPLE = {
    "today": (0, 1), "tonight": (0, 1), "this morning": (0, 1), "this afternoon": (0, 1), "this evening": (0, 1),
    "yesterday": (-1, 0), "last night": (-1, 1), "day before yesterday": (-2, -1),
}
# Month names that mean a month on their own; the others ("may", "march", abbreviations) only with a year
# or a preposition ("in May", "last March").
_PLAIN_MONTHS = frozenset({"january", "february", "april", "june", "july", "september", "october", "november",
                           "december"})
_NEWEST = re.compile(r"\b(recent|recently|lately|latest|newest|most recent|currently|current|these days|nowadays"
                     r"|last time)\b")
_OLDEST = re.compile(r"\b(first time|earliest|oldest|originally|at first|initially)\b")


@dataclass(frozen=True)
class TimeCue:
    """What time a question asks about: a window (since/until, epoch seconds) or the newest/oldest."""

    since: float | None = None
    until: float | None = None
    prefer: str | None = None  # "newest" | "oldest"
    phrase: str = ""

    @property
    def window(self) -> bool:
        return self.since is not None and self.until is not None


def _num(word: str | None) -> int:
    if not word:
        return 1
    return int(word) if word.isdigit() else NUMBERS.get(word, 1)


def _ts(d: date) -> float:
    return time.mktime(d.timetuple())


def _month_window(year: int, month: int) -> tuple[float, float]:
    start = date(year, month, 1)
    end = date(year + (month == 12), month % 12 + 1, 1)
    return _ts(start), _ts(end)


def cue(query: str, now: float | None = None) -> TimeCue | None:
    """The time the question names, or None. Relative phrases are read against `now` (default: now)."""
    q = " ".join(query.lower().split())
    now = time.time() if now is None else now
    today = datetime.fromtimestamp(now).date()

    for phrase, (a, b) in sorted(_SIMPLE.items(), key=lambda kv: -len(kv[0])):
        if re.search(rf"\b{phrase}\b", q):
            return TimeCue(_ts(today + timedelta(days=a)), _ts(today + timedelta(days=b)), phrase=phrase)

    m = _ISO_DATE.search(q)
    if m:
        try:
            d = date(int(m["y"]), int(m["m"]), int(m["d"]))
            return TimeCue(_ts(d), _ts(d + timedelta(days=1)), phrase=m.group(0))
        except ValueError:
            pass

    m = _NUMERIC_DATE.search(q)
    if m:
        a, b = int(m["a"]), int(m["b"])
        dm = (a, b) if m["sep"] == "." or a > 12 else (b, a) if b > 12 else None
        try:
            if dm is not None:
                d = date(int(m["y"]), dm[1], dm[0])
                return TimeCue(_ts(d), _ts(d + timedelta(days=1)), phrase=m.group(0))
        except ValueError:
            pass

    m = _AGO.search(q)
    if m:
        days = _num(m["n"]) * UNITS[m.group(2)]
        centre = now - days * DAY
        half = max(1.0, days * 0.25) * DAY  # "two weeks ago" is about then, give or take a few days
        return TimeCue(centre - half, centre + half, phrase=m.group(0))

    m = _DAY_MONTH_YEAR.search(q)
    if m:
        month = MONTHS[(m["m1"] or m["m2"]).lower()]
        day = int(m["d1"] or m["d2"])
        year = int(m["y"]) if m["y"] else today.year
        try:
            d = date(year, month, day)
            if not m["y"] and d > today:
                d = date(year - 1, month, day)
            return TimeCue(_ts(d), _ts(d + timedelta(days=1)), phrase=m.group(0))
        except ValueError:
            pass

    m = _LAST_WEEKDAY.search(q)
    if m:
        back = (today.weekday() - WEEKDAYS[m["d"]]) % 7
        if m["which"] == "last" and back == 0:
            back = 7
        d = today - timedelta(days=back)
        return TimeCue(_ts(d), _ts(d + timedelta(days=1)), phrase=m.group(0))

    m = _LAST_UNIT.search(q)
    if m:
        unit, n = m.group(3), _num(m["n"])
        if unit == "day":
            start = today - timedelta(days=n if m["which"] in ("last", "past", "previous") else 0)
            return TimeCue(_ts(start), _ts(today + timedelta(days=1)), phrase=m.group(0))
        if m["which"] in ("this", "current"):
            if unit == "week":
                start = today - timedelta(days=today.weekday())
            elif unit == "month":
                start = today.replace(day=1)
            else:
                start = today.replace(month=1, day=1)
            return TimeCue(_ts(start), now + DAY, phrase=m.group(0))
        if m["which"] == "last" and not m["n"]:  # the previous calendar week / month / year
            if unit in ("week", "fortnight"):
                start = today - timedelta(days=today.weekday() + 7)
                return TimeCue(_ts(start), _ts(start + timedelta(days=7)), phrase=m.group(0))
            if unit == "month":
                y, mo = (today.year, today.month - 1) if today.month > 1 else (today.year - 1, 12)
                s, e = _month_window(y, mo)
                return TimeCue(s, e, phrase=m.group(0))
            y = today.year - 1
            return TimeCue(_ts(date(y, 1, 1)), _ts(date(y + 1, 1, 1)), phrase=m.group(0))
        days = n * UNITS[unit]  # "the past two weeks", "last 3 months"
        return TimeCue(now - days * DAY, now + DAY, phrase=m.group(0))

    for m in _MONTH_YEAR.finditer(q):
        word = m["m"]
        if word not in _PLAIN_MONTHS and not (m["which"] or m["y"]):
            continue  # "may" and "march" are verbs, "jan" a name: such a word alone is not a month
        month = MONTHS[word]
        if m["y"]:
            year = int(m["y"])
        else:
            year = today.year if (month < today.month or (month == today.month and m["which"] == "this")) \
                else today.year - 1
            if m["which"] == "last" and month >= today.month:
                year = today.year - 1
        s, e = _month_window(year, month)
        return TimeCue(s, e, phrase=m.group(0).strip())

    m = _YEAR.search(q)
    if m:
        y = int(m["y"])
        return TimeCue(_ts(date(y, 1, 1)), _ts(date(y + 1, 1, 1)), phrase=m.group(0).strip())

    m = _NEWEST.search(q)
    if m:
        return TimeCue(prefer="newest", phrase=m.group(0))
    m = _OLDEST.search(q)
    if m:
        return TimeCue(prefer="oldest", phrase=m.group(0))
    return None


def fit(t: float | None, c: TimeCue) -> float:
    """How well a time fits a window cue, in [0, 1]: 1 inside, halving every window-length (at least a
    day) outside it. Unknown times fit 0."""
    if t is None or not c.window:
        return 0.0
    assert c.since is not None and c.until is not None
    if c.since <= t < c.until:
        return 1.0
    scale = max(DAY, c.until - c.since)
    gap = (c.since - t) if t < c.since else (t - c.until)
    return 0.5 ** (gap / scale)


def order_fit(times: dict, c: TimeCue) -> dict:
    """{key: fit in [0, 1]} for a newest/oldest cue: the candidates' event times min-max scaled (the
    newest 1 for "newest", the oldest 1 for "oldest"); unknown times fit 0."""
    known = {k: t for k, t in times.items() if t is not None}
    if not known:
        return {k: 0.0 for k in times}
    lo, hi = min(known.values()), max(known.values())
    span = hi - lo
    out = {}
    for k, t in times.items():
        if t is None:
            out[k] = 0.0
        elif span <= 0:
            out[k] = 1.0
        else:
            x = (t - lo) / span
            out[k] = x if c.prefer == "newest" else 1.0 - x
    return out
