"""The rows recall reads besides its lexical and vector searches (engine/store/sqlite/retrieval.py, engine/store/sqlite/vectors.py)."""

from __future__ import annotations

from ..types import TURN_CHARS, MemoryRow
from . import vectors
from .db import Connection, marks, padded
from .memories import COLS


def graph_has_edges(con: Connection) -> bool:
    return bool(con.execute("SELECT EXISTS(SELECT 1 FROM edges)").fetchone()[0])


def anything_unembedded(con: Connection) -> bool:
    return bool(con.execute(
        "SELECT EXISTS(SELECT 1 FROM memories WHERE embedded_hash IS NULL) OR "
        "EXISTS(SELECT 1 FROM chunks WHERE embedded_hash IS NULL)"
    ).fetchone()[0])


def memory_rows(con: Connection, ids: list[int]) -> list[MemoryRow]:
    """Memory rows by row id."""
    return [MemoryRow._make(r) for r in
            con.execute(f"SELECT {COLS} FROM memories WHERE id IN ({marks(ids)})", padded(ids)).fetchall()]


def turn_texts(con: Connection, ids: list[int]) -> list[tuple[int, str]]:
    """(row id, its text's first TURN_CHARS characters) of the episodic memories among these rows."""
    return con.execute(f"SELECT id, substr(text, 1, {TURN_CHARS}) FROM memories WHERE kind = 'episodic' "
                       f"AND id IN ({marks(ids)})", padded(ids)).fetchall()


def asking(con: Connection, ids: list[int]) -> list[int]:
    """Those of these memory rows whose text asks something (holds a question mark)."""
    if not ids:
        return []
    return [r[0] for r in con.execute(
        f"SELECT id FROM memories WHERE id IN ({marks(ids)}) AND instr(text, '?') > 0", padded(ids))]


def chunk_rows(con: Connection, ids: list[int]) -> list[tuple]:
    """(id, uid, text, project, created_at, document uid, title, path, locator) of chunks by row id."""
    return con.execute(
        "SELECT c.id, c.uid, c.text, d.project, d.created_at, d.uid, d.title, d.path, c.locator "
        f"FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id IN ({marks(ids)})",
        padded(ids),
    ).fetchall()


def windowed(con: Connection, uids: list[str]) -> dict[str, int]:
    """{uid: row id} of those memories that have window vectors (long memories)."""
    if not vectors.has_windows(con):
        return {}
    return dict(con.execute(
        f"SELECT m.uid, m.id FROM memories m WHERE m.uid IN ({marks(uids)}) "
        "AND EXISTS (SELECT 1 FROM memory_windows w WHERE w.memory_id = m.id)", padded(uids)
    ).fetchall())


def text_and_time(con: Connection, uid: str) -> tuple[str, float] | None:
    """A memory's text and when it happened (or was recorded)."""
    return con.execute(
        "SELECT text, coalesce(event_at, created_at) FROM memories WHERE uid = ?", (uid,)
    ).fetchone()
