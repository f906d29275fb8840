"""The rows recall reads besides its lexical and vector searches (retrieval.py, vectors.py), on PostgreSQL."""

from __future__ import annotations

from typing import Any

from ..types import TURN_CHARS, MemoryRow
from .memories import COLS
from .values import bigints


def graph_has_edges(con: Any) -> bool:
    return bool(con.execute("SELECT EXISTS(SELECT 1 FROM edges)").fetchone()[0])


def anything_unembedded(con: Any) -> bool:
    return bool(con.execute("SELECT EXISTS(SELECT 1 FROM memories WHERE embedded_hash IS NULL) OR "
                            "EXISTS(SELECT 1 FROM chunks WHERE embedded_hash IS NULL)").fetchone()[0])


def memory_rows(con: Any, ids: list[int]) -> list[MemoryRow]:
    """Memory rows by row id."""
    return [MemoryRow._make(r) for r in
            con.execute(f"SELECT {COLS} FROM memories WHERE id = ANY(%s::bigint[])", (bigints(ids),)).fetchall()]


def turn_texts(con: Any, ids: list[int]) -> list[tuple[int, str]]:
    """(row id, its text's first TURN_CHARS characters) of the episodic memories among these rows."""
    return [(int(r[0]), str(r[1])) for r in con.execute(
        "SELECT id, substr(text, 1, %s) FROM memories WHERE kind = 'episodic' AND id = ANY(%s::bigint[])",
        (TURN_CHARS, bigints(ids))).fetchall()]


def asking(con: Any, ids: list[int]) -> list[int]:
    """Those of these memory rows whose text asks something (holds a question mark)."""
    if not ids:
        return []
    return [int(r[0]) for r in con.execute(
        "SELECT id FROM memories WHERE id = ANY(%s) AND strpos(text, '?') > 0", (list(map(int, ids)),)).fetchall()]


def chunk_rows(con: Any, ids: list[int]) -> list[tuple]:
    """(id, uid, text, project, created_at, document uid, title, path, locator) of chunks by row id."""
    return con.execute(
        "SELECT c.id, c.uid, c.text, d.project, d.created_at, d.uid, d.title, d.path, c.locator FROM chunks c "
        "JOIN documents d ON d.user_id = c.user_id AND d.id = c.document_id WHERE c.id = ANY(%s::bigint[])",
        (bigints(ids),)).fetchall()


def windowed(con: Any, uids: list[str]) -> dict[str, int]:
    """{uid: row id} of those memories that have window vectors (long memories)."""
    return {str(u): int(i) for u, i in con.execute(
        "SELECT m.uid, m.id FROM memories m WHERE m.uid = ANY(%s) AND EXISTS "
        "(SELECT 1 FROM memory_windows w WHERE w.user_id = m.user_id AND w.memory_id = m.id)", (list(uids),)).fetchall()}


def text_and_time(con: Any, uid: str) -> tuple[str, float] | None:
    """A memory's text and when it happened (or was recorded)."""
    row = con.execute("SELECT text, coalesce(event_at, created_at) FROM memories WHERE uid = %s", (uid,)).fetchone()
    return None if row is None else (str(row[0]), float(row[1]))
