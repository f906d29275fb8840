"""The embedding space's rows: which model made the vectors, and which rows wait for one."""

from __future__ import annotations

import time

from . import tallies, vectors
from .db import Connection

Space = tuple[str, str, int, str]  # provider, model, dimension, version


def stamp(con: Connection) -> tuple | None:
    """The space the stored vectors were made in (None before the first)."""
    return con.execute("SELECT provider, model, dimension, version FROM embedding_space").fetchone()


def restamp(con: Connection, space: Space) -> None:
    """Start over in another space: empty vector tables of its dimension, every row waiting for a vector."""
    vectors.drop_tables(con)
    vectors.create_tables(con, space[2])
    con.execute("UPDATE memories SET embedded_hash = NULL")
    con.execute("UPDATE chunks SET embedded_hash = NULL")
    con.execute(
        "INSERT INTO embedding_space(id, provider, model, dimension, version, updated_at) "
        "VALUES (1,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET provider=excluded.provider, "
        "model=excluded.model, dimension=excluded.dimension, version=excluded.version, "
        "updated_at=excluded.updated_at",
        (*space, time.time()),
    )
    vectors.bump_epoch(con)


def pending(con: Connection) -> int:
    """Rows stored without a current vector (from the tallies: the same cost at any size)."""
    return tallies.unembedded(con)


def rows(con: Connection) -> int:
    """Memories and chunks, embedded or not (what a change of model re-embeds)."""
    return con.execute("SELECT (SELECT count(*) FROM memories) + (SELECT count(*) FROM chunks)").fetchone()[0]


def waiting(con: Connection, table: str, limit: int) -> list[tuple[int, str, str]]:
    """(id, text, content hash) of rows without a vector, oldest first (chunks of ready documents only)."""
    extra = "" if table == "memories" else " AND document_id IN (SELECT id FROM documents WHERE status = 'ready')"
    return con.execute(
        f"SELECT id, text, content_hash FROM {table} WHERE embedded_hash IS NULL{extra} ORDER BY id LIMIT ?",
        (limit,),
    ).fetchall()


def content_hashes(con: Connection, table: str, ids: list[int]) -> dict[int, str]:
    """{row id: its current content hash} of those of these rows still there."""
    out: dict[int, str] = {}
    for start in range(0, len(ids), 500):
        part = ids[start : start + 500]
        out.update(con.execute(f"SELECT id, content_hash FROM {table} WHERE id IN ({','.join('?' * len(part))})",
                               part).fetchall())
    return out
