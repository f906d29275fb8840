"""Conversations of one user (the transaction's: row-level security) and their messages, as
engine/store/sqlite/conversations.py: the transcript of each exchange with `ask` (never memories). An
answer's `meta.sources` is indexed in message_sources by a trigger, so forgetting a source finds the answers
that cite it."""

from __future__ import annotations

import json
from typing import Any

from psycopg import Connection

from ...errors import NotFound


def row_id(con: Connection, uid: str) -> int:
    row = con.execute("SELECT id FROM conversations WHERE uid = %s", (uid,)).fetchone()
    if row is None:
        raise NotFound(f"No conversation with id {uid}.")
    return int(row[0])


def memory_ids(con: Connection, conversation: int) -> list[int]:
    """The memories of a conversation: its imported turns and the facts read from them."""
    return [int(r[0]) for r in con.execute("SELECT id FROM memories WHERE conversation_id = %s", (conversation,))]


def delete(con: Connection, conversation: int) -> int:
    """Delete a conversation and its transcript (its messages go by cascade); the number of messages."""
    row = con.execute("SELECT count(*) FROM messages WHERE conversation_id = %s", (conversation,)).fetchone()
    con.execute("DELETE FROM conversations WHERE id = %s", (conversation,))
    return int(row[0]) if row else 0


def last_messages(con: Connection, conversation: int, n: int) -> list[tuple[str, str]]:
    """(role, content) of the conversation's last n messages, oldest first."""
    rows = con.execute(
        "SELECT role, content FROM messages WHERE conversation_id = %s ORDER BY id DESC LIMIT %s", (conversation, n),
    ).fetchall()
    return [(role, content) for role, content in reversed(rows)]


def start(con: Connection, uid: str, title: str, project: str | None, created_at: float, now: float) -> int:
    row = con.execute(
        "INSERT INTO conversations(uid, title, project, created_at, updated_at) VALUES (%s, %s, %s, %s, %s) "
        "RETURNING id", (uid, title, project, created_at, now),
    ).fetchone()
    assert row is not None
    return int(row[0])


def add_exchange(con: Connection, conversation: int, question: str, asked_at: float, answer: str, now: float,
                 meta: dict[str, Any]) -> None:
    if not con.execute("UPDATE conversations SET updated_at = %s WHERE id = %s", (now, conversation)).rowcount:
        raise NotFound(f"No conversation row {conversation}.")
    _add_messages(con, conversation, [("user", question, asked_at, "{}"), ("assistant", answer, now, json.dumps(meta))])


def _add_messages(con: Connection, conversation: int, rows: list[tuple[str, str, float, str]]) -> None:
    """(role, content, created_at, meta as JSON text) rows, in this order (their ids increase with it)."""
    roles, contents, times, metas = (list(c) for c in zip(*rows, strict=True))
    con.execute(
        "INSERT INTO messages(conversation_id, role, content, created_at, meta) "
        "SELECT %s, role, content, created_at, meta::jsonb "
        "FROM unnest(%s::text[], %s::text[], %s::double precision[], %s::text[]) WITH ORDINALITY "
        "AS m(role, content, created_at, meta, n) ORDER BY n",
        (conversation, roles, contents, times, metas),
    )


# --- imported conversations (engine/imports): identified by meta.import = {"source": ..., "id": ...} ----


def imported(con: Connection, source: str, external_id: str) -> tuple[int, str] | None:
    """(id, uid) of the conversation imported from this source with this id."""
    return con.execute(
        "SELECT id, uid FROM conversations WHERE meta -> 'import' ->> 'source' = %s "
        "AND meta -> 'import' ->> 'id' = %s ORDER BY id LIMIT 1", (source, external_id),
    ).fetchone()


def imported_message_ids(con: Connection, conversation: int) -> set[str]:
    """The source's ids of the messages already imported into this conversation."""
    return {r[0] for r in con.execute(
        "SELECT meta ->> 'import_id' FROM messages WHERE conversation_id = %s AND meta ? 'import_id' "
        "AND meta ->> 'import_id' IS NOT NULL", (conversation,),
    ).fetchall()}


def start_imported(con: Connection, uid: str, title: str, project: str | None, created_at: float,
                   updated_at: float, meta: dict[str, Any]) -> int:
    row = con.execute(
        "INSERT INTO conversations(uid, title, project, created_at, updated_at, meta) "
        "VALUES (%s, %s, %s, %s, %s, %s::jsonb) RETURNING id",
        (uid, title, project, created_at, updated_at, json.dumps(meta)),
    ).fetchone()
    assert row is not None
    return int(row[0])


def add_imported_messages(con: Connection, conversation: int, messages: list[tuple[str, str, float, str]],
                          updated_at: float) -> None:
    """(role, content, created_at, source id) rows, and the conversation's updated_at moved forward."""
    if not con.execute("UPDATE conversations SET updated_at = greatest(updated_at, %s) WHERE id = %s",
                       (updated_at, conversation)).rowcount:
        raise NotFound(f"No conversation row {conversation}.")
    if messages:
        _add_messages(con, conversation, [(role, content, at, json.dumps({"import_id": mid}))
                                          for role, content, at, mid in messages])
