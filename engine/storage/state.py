"""Small values kept inside the encrypted store (the `state` table)."""

from __future__ import annotations

from collections.abc import Callable

from ..db import Connection


def get_or_set(con: Connection, key: str, make: Callable[[], str]) -> str:
    """The value under `key`; made and stored first when there is none (call inside a write)."""
    row = con.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
    if row:
        return str(row[0])
    value = make()
    con.execute("INSERT INTO state(key, value) VALUES (?, ?)", (key, value))
    return value
