"""Knowledge-graph rows of one user (the transaction's: row-level security), as engine/store/sqlite/graph.py:
nodes (with aliases), edges with the memory or chunk each came from, the queue of items waiting to be read
for triples, and the admission policy's refusals."""

from __future__ import annotations

from psycopg import Connection, sql

from . import tallies

_READ_TABLES = ("memories", "chunks")  # the tables whose rows are read for triples


def _table(table: str) -> sql.Identifier:
    if table not in _READ_TABLES:
        raise ValueError(f"not a table read for triples: {table!r}")
    return sql.Identifier(table)


def pending_extraction(con: Connection) -> int:
    """Memories and chunks not read for triples yet (from the tallies: the same cost at any size)."""
    return tallies.read(con).pending_extraction()


def unread(con: Connection, limit: int | None) -> list[tuple[int, int, str, str, str]]:
    """(is chunk, row id, uid, text, content hash) of items not read yet: memories first, oldest first."""
    return con.execute(
        "SELECT * FROM (SELECT 0 AS chunk, id, uid, text, content_hash FROM memories "
        "WHERE NOT extracted AND NOT archived "
        "UNION ALL SELECT 1, c.id, c.uid, c.text, c.content_hash FROM chunks c "
        "JOIN documents d ON d.user_id = c.user_id AND d.id = c.document_id AND d.status = 'ready' "
        "WHERE NOT c.extracted) items ORDER BY 1, 2 LIMIT %s",
        (limit,),
    ).fetchall()


def read_state(con: Connection, table: str, rid: int) -> tuple[str, int] | None:
    """(content hash, extracted) of a memory or chunk (None when it is gone)."""
    return con.execute(sql.SQL("SELECT content_hash, extracted::integer FROM {} WHERE id = %s").format(_table(table)),
                       (rid,)).fetchone()


def mark_read(con: Connection, table: str, rid: int) -> None:
    con.execute(sql.SQL("UPDATE {} SET extracted = true WHERE id = %s").format(_table(table)), (rid,))


def add_edge(con: Connection, src: int, rel: str, dst: int, table: str, rid: int, now: float) -> bool:
    """Add the edge from this memory or chunk unless it is there; True when added."""
    _table(table)
    col = sql.Identifier("memory_id" if table == "memories" else "chunk_id")
    if con.execute(sql.SQL("SELECT 1 FROM edges WHERE src = %s AND rel = %s AND dst = %s AND {} = %s").format(col),
                   (src, rel, dst, rid)).fetchone():
        return False
    con.execute(sql.SQL("INSERT INTO edges(src, rel, dst, {}, created_at) VALUES (%s, %s, %s, %s, %s)").format(col),
                (src, rel, dst, rid, now))
    return True


def count_rejections(con: Connection, rejected: dict[str, int]) -> None:
    if not rejected:
        return
    reasons = sorted(rejected)
    con.execute(
        "INSERT INTO admission_rejections AS a (reason, count) SELECT * FROM unnest(%s::text[], %s::bigint[]) "
        "ON CONFLICT (user_id, reason) DO UPDATE SET count = a.count + excluded.count",
        (reasons, [rejected[r] for r in reasons]),
    )


def rejections(con: Connection) -> dict[str, int]:
    return {reason: int(n) for reason, n in con.execute(
        "SELECT reason, count FROM admission_rejections ORDER BY reason COLLATE \"C\"").fetchall()}


def node_named(con: Connection, norm: str) -> tuple[int, str | None] | None:
    """(id, type) of the node with this normalised name."""
    return con.execute("SELECT id, type FROM nodes WHERE norm_name = %s", (norm,)).fetchone()


def node(con: Connection, rid: int) -> tuple[int, str | None]:
    """(id, type) of a node."""
    row = con.execute("SELECT id, type FROM nodes WHERE id = %s", (rid,)).fetchone()
    if row is None:
        raise LookupError(f"no node {rid}")
    return row


def aliases(con: Connection) -> list[tuple[int, list[str]]]:
    """Nodes with aliases: (id, aliases as recorded)."""
    return [(rid, list(a)) for rid, a in con.execute(
        "SELECT id, aliases FROM nodes WHERE aliases <> '[]'::jsonb ORDER BY id").fetchall()]


def first_word_matches(con: Connection, first: str) -> list[tuple[int, str, str | None]]:
    """(id, normalised name, type) of nodes named `first` or starting with the word `first`."""
    like = first.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + " %"
    return con.execute(
        "SELECT id, norm_name, type FROM nodes WHERE norm_name = %s OR norm_name LIKE %s ESCAPE '\\' ORDER BY id",
        (first, like),
    ).fetchall()


def add_alias(con: Connection, rid: int, alias: str) -> None:
    con.execute("UPDATE nodes SET aliases = aliases || jsonb_build_array(%s::text) WHERE id = %s", (alias, rid))


def set_type(con: Connection, rid: int, kind: str) -> None:
    con.execute("UPDATE nodes SET type = %s WHERE id = %s", (kind, rid))


def add_node(con: Connection, name: str, norm: str, kind: str | None, now: float) -> int:
    row = con.execute("INSERT INTO nodes(name, norm_name, type, created_at) VALUES (%s, %s, %s, %s) RETURNING id",
                      (name, norm, kind, now)).fetchone()
    assert row is not None
    return int(row[0])


def nodes_named_in(con: Connection, padded: str) -> dict[int, int]:
    """{node id: length of its name} of nodes whose normalised name is a whole word sequence of `padded`
    (normalised text with a space at each end)."""
    return {rid: len(norm) for rid, norm in con.execute(
        "SELECT id, norm_name FROM nodes WHERE strpos(%s, ' ' || norm_name || ' ') > 0", (padded,)).fetchall()}


def node_id(con: Connection, norm: str) -> int | None:
    row = con.execute("SELECT id FROM nodes WHERE norm_name = %s", (norm,)).fetchone()
    return None if row is None else int(row[0])


def edges_touching(con: Connection, ids: list[int], project: str | None) -> list[tuple]:
    """(edge id, src, rel, dst, memory id, memory uid, chunk id, chunk uid) of edges from or to these nodes,
    from live memories and ready documents (of `project`, when given)."""
    if not ids:
        return []
    return con.execute(
        "SELECT e.id, e.src, e.rel, e.dst, e.memory_id, m.uid, e.chunk_id, c.uid FROM edges e "
        "LEFT JOIN memories m ON m.user_id = e.user_id AND m.id = e.memory_id "
        "LEFT JOIN chunks c ON c.user_id = e.user_id AND c.id = e.chunk_id "
        "LEFT JOIN documents d ON d.user_id = c.user_id AND d.id = c.document_id "
        "WHERE (e.src = ANY(%(ids)s) OR e.dst = ANY(%(ids)s)) "
        "AND (e.memory_id IS NULL OR NOT m.archived) AND (e.chunk_id IS NULL OR d.status = 'ready') "
        "AND (%(project)s::text IS NULL OR coalesce(m.project, d.project) IS NOT DISTINCT FROM %(project)s::text)",
        {"ids": list(ids), "project": project},
    ).fetchall()


def names(con: Connection, ids: list[int]) -> list[tuple[int, str, str | None]]:
    """(id, name, type) of these nodes."""
    if not ids:
        return []
    return con.execute("SELECT id, name, type FROM nodes WHERE id = ANY(%s)", (list(ids),)).fetchall()


def nodes_of_source(con: Connection, memory_uid: str) -> list[int]:
    """The nodes of the edges a memory is the source of."""
    return [int(r[0]) for r in con.execute(
        "SELECT DISTINCT n FROM edges e JOIN memories m ON m.user_id = e.user_id AND m.id = e.memory_id "
        "CROSS JOIN LATERAL (VALUES (e.src), (e.dst)) ends(n) WHERE m.uid = %s ORDER BY n", (memory_uid,)).fetchall()]


def best_connected(con: Connection, limit: int) -> list[tuple[str, str | None, int]]:
    """(name, type, edges) of the nodes with the most edges."""
    return [(name, kind, int(n)) for name, kind, n in con.execute(
        "SELECT n.name, n.type, count(*) AS c FROM nodes n "
        "JOIN edges e ON e.user_id = n.user_id AND (e.src = n.id OR e.dst = n.id) "
        "GROUP BY n.user_id, n.id ORDER BY c DESC, n.name COLLATE \"C\" LIMIT %s", (limit,)).fetchall()]
