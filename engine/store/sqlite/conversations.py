"""Conversations and their messages: the transcript of each exchange with `ask` (never memories)."""

from __future__ import annotations

import json
from typing import Any, cast

from ...errors import NotFound
from .db import Connection


def row_id(con: Connection, uid: str) -> int:
    row = con.execute("SELECT id FROM conversations WHERE uid = ?", (uid,)).fetchone()
    if row is None:
        raise NotFound(f"No conversation with id {uid}.")
    return int(row[0])


def memory_ids(con: Connection, conversation: int) -> list[int]:
    """The memories of a conversation: its imported turns and the facts read from them."""
    return [r[0] for r in con.execute("SELECT id FROM memories WHERE conversation_id = ?", (conversation,))]


def delete(con: Connection, conversation: int) -> int:
    """Delete a conversation and its transcript (its messages go by cascade); the number of messages."""
    messages = con.execute("SELECT count(*) FROM messages WHERE conversation_id = ?", (conversation,)).fetchone()[0]
    con.execute("DELETE FROM conversations WHERE id = ?", (conversation,))
    return int(messages)


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


# --- imported conversations (engine/imports): identified by meta.import = {"source": ..., "id": ...} ----


def imported(con: Connection, source: str, external_id: str) -> tuple[int, str] | None:
    """(id, uid) of the conversation imported from this source with this id."""
    return con.execute(
        "SELECT id, uid FROM conversations WHERE json_extract(meta, '$.import.source') = ? "
        "AND json_extract(meta, '$.import.id') = ? ORDER BY id LIMIT 1", (source, external_id),
    ).fetchone()


def imported_message_ids(con: Connection, conversation: int) -> set[str]:
    """The source's ids of the messages already imported into this conversation."""
    return {r[0] for r in con.execute(
        "SELECT json_extract(meta, '$.import_id') FROM messages WHERE conversation_id = ? "
        "AND json_extract(meta, '$.import_id') IS NOT NULL", (conversation,),
    ).fetchall()}


def start_imported(con: Connection, uid: str, title: str, project: str | None, created_at: float,
                   updated_at: float, meta: dict[str, Any]) -> int:
    return cast(int, con.execute(
        "INSERT INTO conversations(uid, title, project, created_at, updated_at, meta) VALUES (?,?,?,?,?,?)",
        (uid, title, project, created_at, updated_at, json.dumps(meta)),
    ).lastrowid)


def add_imported_messages(con: Connection, conversation: int, messages: list[tuple[str, str, float, str]],
                          updated_at: float) -> None:
    """(role, content, created_at, source id) rows, and the conversation's updated_at moved forward."""
    con.execute("UPDATE conversations SET updated_at = max(updated_at, ?) WHERE id = ?", (updated_at, conversation))
    con.executemany(
        "INSERT INTO messages(conversation_id, role, content, created_at, meta) VALUES (?,?,?,?,?)",
        [(conversation, role, content, at, json.dumps({"import_id": mid})) for role, content, at, mid in messages],
    )
