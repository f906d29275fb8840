"""Knowledge-graph rows: nodes (with aliases), edges with the memory or chunk each came from, the queue of
items waiting to be read for triples, and the admission policy's refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import cast

from . import tallies
from .db import Connection, marks, padded


def batched(items: list[int], size: int = 400) -> Iterator[list[int]]:
    """Slices small enough for SQLite's limit on bound parameters."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def pending_extraction(con: Connection) -> int:
    """Memories and chunks not read for triples yet (from the tallies: the same cost at any size)."""
    return tallies.read(con).pending_extraction()


def unread(con: Connection, limit: int | None) -> list[tuple[int, int, str, str, str]]:
    """(is chunk, row id, uid, text, content hash) of items not read yet: memories first, oldest first."""
    return con.execute(
        "SELECT * FROM (SELECT 0, id, uid, text, content_hash FROM memories WHERE extracted = 0 AND archived = 0 "
        "UNION ALL SELECT 1, c.id, c.uid, c.text, c.content_hash FROM chunks c "
        "JOIN documents d ON d.id = c.document_id AND d.status = 'ready' WHERE c.extracted = 0) "
        "ORDER BY 1, 2 LIMIT ?",
        (-1 if limit is None else limit,),
    ).fetchall()


def read_state(con: Connection, table: str, rid: int) -> tuple[str, int] | None:
    """(content hash, extracted) of a memory or chunk (None when it is gone)."""
    return con.execute(f"SELECT content_hash, extracted FROM {table} WHERE id = ?", (rid,)).fetchone()


def mark_read(con: Connection, table: str, rid: int) -> None:
    con.execute(f"UPDATE {table} SET extracted = 1 WHERE id = ?", (rid,))


def add_edge(con: Connection, src: int, rel: str, dst: int, table: str, rid: int, now: float) -> bool:
    """Add the edge from this memory or chunk unless it is there; True when added."""
    col = "memory_id" if table == "memories" else "chunk_id"
    if con.execute(f"SELECT 1 FROM edges WHERE src = ? AND rel = ? AND dst = ? AND {col} = ?",
                   (src, rel, dst, rid)).fetchone():
        return False
    con.execute(f"INSERT INTO edges(src, rel, dst, {col}, created_at) VALUES (?,?,?,?,?)", (src, rel, dst, rid, now))
    return True


def count_rejections(con: Connection, rejected: dict[str, int]) -> None:
    con.executemany(
        "INSERT INTO admission_rejections(reason, count) VALUES (?, ?) "
        "ON CONFLICT(reason) DO UPDATE SET count = count + excluded.count",
        sorted(rejected.items()),
    )


def rejections(con: Connection) -> dict[str, int]:
    return dict(con.execute("SELECT reason, count FROM admission_rejections ORDER BY reason").fetchall())


def node_named(con: Connection, norm: str) -> tuple[int, str | None] | None:
    """(id, type) of the node with this normalised name."""
    return con.execute("SELECT id, type FROM nodes WHERE norm_name = ?", (norm,)).fetchone()


def node(con: Connection, rid: int) -> tuple[int, str | None]:
    """(id, type) of a node."""
    return con.execute("SELECT id, type FROM nodes WHERE id = ?", (rid,)).fetchone()


def aliases(con: Connection) -> list[tuple[int, list[str]]]:
    """Nodes with aliases: (id, aliases as recorded)."""
    return [(rid, json.loads(a)) for rid, a in con.execute("SELECT id, aliases FROM nodes WHERE aliases <> '[]'")]


def first_word_matches(con: Connection, first: str) -> list[tuple[int, str, str | None]]:
    """(id, normalised name, type) of nodes named `first` or starting with the word `first`."""
    like = first.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + " %"
    return con.execute(
        "SELECT id, norm_name, type FROM nodes WHERE norm_name = ? OR norm_name LIKE ? ESCAPE '\\'", (first, like),
    ).fetchall()


def add_alias(con: Connection, rid: int, alias: str) -> None:
    current = json.loads(con.execute("SELECT aliases FROM nodes WHERE id = ?", (rid,)).fetchone()[0])
    con.execute("UPDATE nodes SET aliases = ? WHERE id = ?", (json.dumps([*current, alias]), rid))


def set_type(con: Connection, rid: int, kind: str) -> None:
    con.execute("UPDATE nodes SET type = ? WHERE id = ?", (kind, rid))


def add_node(con: Connection, name: str, norm: str, kind: str | None, now: float) -> int:
    return cast(int, con.execute("INSERT INTO nodes(name, norm_name, type, created_at) VALUES (?,?,?,?)",
                                 (name, norm, kind, now)).lastrowid)


def nodes_named_in(con: Connection, padded: str) -> dict[int, int]:
    """{node id: length of its name} of nodes whose normalised name is a whole word sequence of `padded`
    (normalised text with a space at each end)."""
    return {rid: len(norm) for rid, norm in con.execute(
        "SELECT id, norm_name FROM nodes WHERE instr(?, ' ' || norm_name || ' ') > 0", (padded,)).fetchall()}


def node_id(con: Connection, norm: str) -> int | None:
    row = con.execute("SELECT id FROM nodes WHERE norm_name = ?", (norm,)).fetchone()
    return None if row is None else int(row[0])


def edges_touching(con: Connection, ids: list[int], project: str | None) -> list[tuple]:
    """(edge id, src, rel, dst, memory id, memory uid, chunk id, chunk uid) of edges from or to these nodes,
    from live memories and ready documents (of `project`, when given)."""
    found: list[tuple] = []
    for part in batched(ids):
        in_part, part = marks(part), padded(part)
        found += con.execute(
            "SELECT e.id, e.src, e.rel, e.dst, e.memory_id, m.uid, e.chunk_id, c.uid FROM edges e "
            "LEFT JOIN memories m ON m.id = e.memory_id "
            "LEFT JOIN chunks c ON c.id = e.chunk_id LEFT JOIN documents d ON d.id = c.document_id "
            f"WHERE (e.src IN ({in_part}) OR e.dst IN ({in_part})) "
            "AND (e.memory_id IS NULL OR m.archived = 0) AND (e.chunk_id IS NULL OR d.status = 'ready') "
            "AND (? IS NULL OR coalesce(m.project, d.project) IS ?)",
            (*part, *part, project, project),
        ).fetchall()
    return found


def names(con: Connection, ids: list[int]) -> list[tuple[int, str, str | None]]:
    """(id, name, type) of these nodes."""
    found: list[tuple[int, str, str | None]] = []
    for part in batched(ids):
        found += con.execute(f"SELECT id, name, type FROM nodes WHERE id IN ({marks(part)})", padded(part)).fetchall()
    return found


def nodes_of_source(con: Connection, memory_uid: str) -> list[int]:
    """The nodes of the edges a memory is the source of."""
    return [int(r[0]) for r in con.execute(
        "SELECT e.src FROM edges e JOIN memories m ON m.id = e.memory_id WHERE m.uid = ? "
        "UNION SELECT e.dst FROM edges e JOIN memories m ON m.id = e.memory_id WHERE m.uid = ?",
        (memory_uid, memory_uid)).fetchall()]


def best_connected(con: Connection, limit: int) -> list[tuple[str, str | None, int]]:
    """(name, type, edges) of the nodes with the most edges."""
    return con.execute(
        "SELECT n.name, n.type, count(*) AS c FROM nodes n JOIN edges e ON e.src = n.id OR e.dst = n.id "
        "GROUP BY n.id ORDER BY c DESC, n.name LIMIT ?", (limit,)).fetchall()
