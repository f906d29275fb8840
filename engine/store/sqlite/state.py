"""Small values kept inside the encrypted store (the `state` table)."""

from __future__ import annotations

from collections.abc import Callable

from .db import Connection


def get(con: Connection, key: str) -> str | None:
    """The value under `key`, None when there is none."""
    row = con.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def put(con: Connection, key: str, value: str) -> None:
    """Store `value` under `key`, replacing what was there (call inside a write)."""
    con.execute("INSERT INTO state(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value))


def get_or_set(con: Connection, key: str, make: Callable[[], str]) -> str:
    """The value under `key`; made and stored first when there is none (call inside a write)."""
    value = get(con, key)
    if value is not None:
        return value
    value = make()
    con.execute("INSERT INTO state(key, value) VALUES (?, ?)", (key, value))
    return value
