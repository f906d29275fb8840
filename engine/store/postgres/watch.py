"""Watched-folder rows on PostgreSQL (the SQLite backend's functions and tuples: the pattern and error lists
as JSON text, the switches as 0 and 1)."""

from __future__ import annotations

import psycopg

Connection = psycopg.Connection

COLS = ("id, path, project, include::text, exclude::text, paused::int, available::int, queued, skipped, "
        "errors::text, added_at, scan_started_at, scanned_at")


def all_folders(con: Connection) -> list[tuple]:
    """Every watched folder (COLS), in the order they were added."""
    return con.execute(f"SELECT {COLS} FROM watched_folders ORDER BY id").fetchall()


def by_path(con: Connection, path: str) -> tuple | None:
    return con.execute(f"SELECT {COLS} FROM watched_folders WHERE path = %s", (path,)).fetchone()


def config_key(con: Connection) -> list[tuple[str, int]]:
    """(path, paused) of every folder: what the watcher restarts for when it changes."""
    return [(str(p), int(paused)) for p, paused in
            con.execute("SELECT path, paused::int FROM watched_folders ORDER BY id").fetchall()]


def add(con: Connection, path: str, project: str | None, include: str, exclude: str, now: float) -> None:
    """Add a folder, or change the project and patterns of one already watched."""
    con.execute(
        "INSERT INTO watched_folders(path, project, include, exclude, added_at) VALUES (%s, %s, %s::jsonb, "
        "%s::jsonb, %s) ON CONFLICT (user_id, path) DO UPDATE SET project = excluded.project, "
        "include = excluded.include, exclude = excluded.exclude", (path, project, include, exclude, now),
    )


def remove(con: Connection, path: str) -> bool:
    return con.execute("DELETE FROM watched_folders WHERE path = %s", (path,)).rowcount > 0


def set_paused(con: Connection, path: str, paused: bool) -> bool:
    return con.execute("UPDATE watched_folders SET paused = %s WHERE path = %s", (bool(paused), path)).rowcount > 0


def set_available(con: Connection, folder_id: int, available: bool) -> None:
    con.execute("UPDATE watched_folders SET available = %s WHERE id = %s AND available IS DISTINCT FROM %s",
                (bool(available), folder_id, bool(available)))


def set_queued(con: Connection, folder_id: int, queued: int) -> None:
    con.execute("UPDATE watched_folders SET queued = %s WHERE id = %s", (queued, folder_id))


def scan_started(con: Connection, folder_id: int, now: float) -> None:
    con.execute("UPDATE watched_folders SET scan_started_at = %s WHERE id = %s", (now, folder_id))


def scan_finished(con: Connection, folder_id: int, now: float, skipped: int, errors: str) -> None:
    con.execute("UPDATE watched_folders SET scanned_at = %s, skipped = %s, errors = %s::jsonb, queued = 0 "
                "WHERE id = %s", (now, skipped, errors, folder_id))


def set_errors(con: Connection, folder_id: int, errors: str) -> None:
    con.execute("UPDATE watched_folders SET errors = %s::jsonb WHERE id = %s", (errors, folder_id))
