"""Conversations and their messages: the transcript of each exchange with `ask` (never memories)."""

from __future__ import annotations

import json
from typing import Any, cast

from ..db import Connection
from ..errors import NotFound


def row_id(con: Connection, uid: str) -> int:
    row = con.execute("SELECT id FROM conversations WHERE uid = ?", (uid,)).fetchone()
    if row is None:
        raise NotFound(f"No conversation with id {uid}.")
    return int(row[0])


def last_messages(con: Connection, conversation: int, n: int) -> list[tuple[str, str]]:
    """(role, content) of the conversation's last n messages, oldest first."""
    rows = con.execute(
        "SELECT role, content FROM messages WHERE conversation_id = ? ORDER BY id DESC LIMIT ?", (conversation, n),
    ).fetchall()
    return [(role, content) for role, content in reversed(rows)]


def start(con: Connection, uid: str, title: str, project: str | None, created_at: float, now: float) -> int:
    return cast(int, con.execute(
        "INSERT INTO conversations(uid, title, project, created_at, updated_at) VALUES (?,?,?,?,?)",
        (uid, title, project, created_at, now),
    ).lastrowid)


def add_exchange(con: Connection, conversation: int, question: str, asked_at: float, answer: str, now: float,
                 meta: dict[str, Any]) -> None:
    con.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation))
    con.executemany(
        "INSERT INTO messages(conversation_id, role, content, created_at, meta) VALUES (?,?,?,?,?)",
        [(conversation, "user", question, asked_at, "{}"), (conversation, "assistant", answer, now, json.dumps(meta))],
    )
