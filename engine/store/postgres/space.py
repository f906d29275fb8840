"""The embedding space's rows on a server: which model made the vectors (the server's, set by `server init`),
and which of a user's rows wait for one."""

from __future__ import annotations

from typing import Any

from ...errors import UserError
from . import tallies

Space = tuple[str, str, int, str]  # provider, model, dimension, version


def stamp(con: Any) -> tuple | None:
    """The space the stored vectors are made in (None before `server init` made one)."""
    return con.execute("SELECT provider, model, dimension, version FROM embedding_space").fetchone()


def restamp(con: Any, space: Space) -> None:
    """A server's embedding space is the operator's: one user's server process may not start it over (every
    user's vectors would go). `server init` with the server's model does it for everyone."""
    raise UserError(f"This server's vectors were made with another embedding model than {space[1]} "
                    f"({space[2]} dimensions): run `personal-llm server init` with the model the server uses.")


def pending(con: Any) -> int:
    """Rows stored without a current vector (from the tallies: the same cost at any size)."""
    return tallies.unembedded(con)


def rows(con: Any) -> int:
    """Memories and chunks, embedded or not."""
    return int(con.execute("SELECT (SELECT count(*) FROM memories) + (SELECT count(*) FROM chunks)").fetchone()[0])


def waiting(con: Any, table: str, limit: int) -> list[tuple[int, str, str]]:
    """(id, text, content hash) of rows without a vector, oldest first (chunks of ready documents only)."""
    if table == "memories":
        sql = "SELECT id, text, content_hash FROM memories WHERE embedded_hash IS NULL ORDER BY id LIMIT %s"
    else:
        sql = ("SELECT c.id, c.text, c.content_hash FROM chunks c JOIN documents d ON d.user_id = c.user_id "
               "AND d.id = c.document_id WHERE c.embedded_hash IS NULL AND d.status = 'ready' ORDER BY c.id LIMIT %s")
    return [(int(r[0]), str(r[1]), str(r[2])) for r in con.execute(sql, (limit,)).fetchall()]


def content_hashes(con: Any, table: str, ids: list[int]) -> dict[int, str]:
    """{row id: its current content hash} of those of these rows still there."""
    name = "memories" if table == "memories" else "chunks"
    rows = con.execute(f"SELECT id, content_hash FROM {name} WHERE id = ANY(%s)", (list(map(int, ids)),))
    return {int(r[0]): str(r[1]) for r in rows.fetchall()}
