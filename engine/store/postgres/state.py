"""Small values kept for a user (the `state` table), as the SQLite backend's functions."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

Connection = psycopg.Connection


def get(con: Connection, key: str) -> str | None:
    """The value under `key`, None when there is none."""
    row = con.execute("SELECT value FROM state WHERE key = %s", (key,)).fetchone()
    return None if row is None else str(row[0])


def put(con: Connection, key: str, value: str) -> None:
    """Store `value` under `key`, replacing what was there (call inside a write)."""
    con.execute("INSERT INTO state(key, value) VALUES (%s, %s) "
                "ON CONFLICT (user_id, key) DO UPDATE SET value = excluded.value", (key, value))


def get_or_set(con: Connection, key: str, make: Callable[[], str]) -> str:
    """The value under `key`; made and stored first when there is none (call inside a write)."""
    value = get(con, key)
    if value is not None:
        return value
    value = make()
    con.execute("INSERT INTO state(key, value) VALUES (%s, %s)", (key, value))
    return value
