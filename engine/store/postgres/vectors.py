"""Vectors on PostgreSQL: pgvector columns (`memory_vectors`, `memory_windows`, `chunk_vectors`) with HNSW
(cosine) indexes on the vectors cast to half precision, made for the server's embedding space by `server init`
(migrations.ensure_space, hnsw_index).

A user with few vectors in a table (at most `EXACT_ROWS`, counted by the tallies: `VectorIndex.rows`) is
searched exactly there: ordered by the single-precision distance, an expression no index is built on, so
PostgreSQL computes the distance of each of the user's rows under the filter (their rows only, through the
primary key's user_id), instead of walking a graph that every user's vectors share. A user with more asks the
HNSW index for a wide set of candidates under the filter (`CANDIDATES` times k, at least `MIN_CANDIDATES`;
pgvector 0.8's iterative scan keeps looking while the filter drops rows), ordered by the half-precision
distance the index holds (`_ORDER`), with the index's own list (hnsw.ef_search, `ef_search`) grown with the
user's vectors: a walk of one length finds less of the true nearest as the graph grows. Either way the
candidates are rescored exactly from the stored vectors: the cosine is computed in numpy, and a memory with
windows gets the best of its own and its windows' cosines, as on SQLite. So the top k equals exact search
whenever the true top k are among the candidates (bench/scale.py --backend postgres measures recall@10
against exact; bench/pg_hnsw.py how it depends on the vectors, the size and the settings).

There is no in-process mirror on a server: many processes and users share the database, and PostgreSQL keeps
what is read often in its buffer cache. The epoch and log of the SQLite backend, which let other processes'
mirrors catch up, have nothing to do here.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...embeddings import Windows
from ..types import Filter, Stopped  # noqa: F401  (Stopped: what a SQLite mirror's load raises; never here)
from .values import bigints

log = logging.getLogger(__name__)

CANDIDATES = 4  # candidates asked of the HNSW index, times k
MIN_CANDIDATES = 40
EF_SEARCH = 100  # hnsw.ef_search: the index's own candidate list (pgvector's default is 40), at least
EF_MAX = 1000  # pgvector's largest hnsw.ef_search
EXACT_ROWS = 20_000  # a user with at most this many vectors in a table is searched exactly there
ROWS_TTL = 30.0  # seconds a user's count of vectors is kept (VectorIndex.rows)
EF_PER_DOUBLING = 160  # hnsw.ef_search added for each doubling of the user's vectors past EXACT_ROWS
_TABLES = {"memories": ("memory_vectors", "memory_id"), "chunks": ("chunk_vectors", "chunk_id")}


def ef_search(rows: int, n: int) -> int:
    """hnsw.ef_search for n candidates among `rows` of the user's vectors: a graph walk of a given length
    misses more of the nearest as the graph grows, so the walk's list grows with the user's vectors, from
    EF_SEARCH at EXACT_ROWS by EF_PER_DOUBLING a doubling (pgvector's EF_MAX at a million), and is never
    shorter than the candidates asked."""
    doublings = max(0.0, math.log2(max(rows, 1) / EXACT_ROWS))
    return min(EF_MAX, max(n, EF_SEARCH + math.ceil(EF_PER_DOUBLING * doublings)))


def _literal(v: np.ndarray) -> str:
    """A vector as pgvector reads it from text: '[0.1,0.2,…]' (written by json's C encoder: the same text as
    each float's repr, a tenth of the time, which was most of storing a push's 1,000 vectors)."""
    return json.dumps(np.asarray(v, dtype=np.float32).tolist(), separators=(",", ":"))


# a stored vector read in pgvector's binary form (`vector_send`: int16 dimension, int16 unused, then float4
# big-endian each), as bytes: numpy reads it at once, where parsing the text form of a recall's few hundred
# candidates took a third of the server's time for it
_BINARY = "vector_send(embedding)"


# the order of a search: the distance in half precision, the expression the HNSW index is built on
# (migrations.hnsw_index); another expression would not use the index and compute every distance
_ORDER = "(v.embedding::halfvec({dim})) <=> (%s::halfvec({dim}))"


# the order of an exact search: the distance in single precision, which no index is built on, so PostgreSQL
# computes it for each of the user's rows under the filter
_EXACT = "v.embedding <=> %s::vector"


def _unpack(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=">f4", offset=4).astype(np.float32)


def _unpack_all(datas: list[bytes]) -> np.ndarray:
    """Vectors of one dimension read by `_BINARY`, as the rows of one matrix, converted at once (a row's 4 bytes
    of header take one float's place): converting each of a recall's few hundred on its own was a tenth of its
    time in the server's process."""
    if not datas:
        return np.zeros((0, 0), dtype=np.float32)
    return np.frombuffer(b"".join(datas), dtype=">f4").reshape(len(datas), -1)[:, 1:].astype(np.float32)


def read_epoch(con: Any) -> int:
    return 0


def bump_epoch(con: Any) -> int:
    return 0


def has_log(con: Any) -> bool:
    return False


def log_changes(con: Any, epoch: int, memories: set[int], chunks: set[int]) -> None:
    """Nothing to log: no process keeps a mirror to catch up."""


def create_tables(con: Any, dim: int) -> None:
    """The vector columns are the server's (made by `server init` for its embedding space); nothing to do for
    a user."""


def put(con: Any, table: str, ids: list[int], vecs: np.ndarray, windows: list[Windows | None] | None = None) -> None:
    """Store (replace) the vectors of these rows; for memories, also their window vectors (None: none).

    Writers run at once here (not one at a time as in a SQLite file): the rows are locked first, so two
    transactions storing vectors for the same rows (a request's own embedding and the background backfill)
    take turns, the second replacing the first's instead of failing on its key or doubling the windows."""
    name, key = _TABLES[table]
    con.execute(f"SELECT id FROM {table} WHERE id = ANY(%s) ORDER BY id FOR UPDATE", (list(map(int, ids)),))
    delete(con, table, ids)
    with con.cursor() as cur:
        cur.executemany(f"INSERT INTO {name}({key}, embedding) VALUES (%s, %s::vector) "
                        f"ON CONFLICT (user_id, {key}) DO UPDATE SET embedding = EXCLUDED.embedding",
                        [(int(i), _literal(v)) for i, v in zip(ids, vecs, strict=True)])
        rows = [(int(rid), int(start), int(end), _literal(v))
                for rid, wins in zip(ids, windows or [], strict=False) if wins is not None
                for v, (start, end) in zip(wins.vectors, wins.spans, strict=True)]
        if rows:
            cur.executemany('INSERT INTO memory_windows(memory_id, start, "end", embedding) VALUES (%s, %s, %s, %s::vector)',
                            rows)


def delete(con: Any, table: str, ids: list[int]) -> None:
    """Drop the vectors (and a memory's windows) of these rows; the rows stay."""
    name, key = _TABLES[table]
    con.execute(f"DELETE FROM {name} WHERE {key} = ANY(%s)", (list(map(int, ids)),))
    if table == "memories":
        con.execute("DELETE FROM memory_windows WHERE memory_id = ANY(%s)", (list(map(int, ids)),))


def read_vectors(con: Any, table: str, ids: list[int]) -> dict[int, np.ndarray]:
    """The stored vectors of these rows: id -> vector (rows without one are left out)."""
    name, key = _TABLES[table]
    rows = con.execute(f"SELECT {key}, {_BINARY} FROM {name} WHERE {key} = ANY(%s::bigint[])",
                       (bigints(ids),)).fetchall()
    vecs = _unpack_all([data for _, data in rows])
    return {int(rid): vecs[i] for i, (rid, _) in enumerate(rows)}


def read_windows(con: Any, ids: list[int]) -> dict[int, np.ndarray]:
    """Window vectors of these memories, only those that have any: id -> (n, dim) matrix, in window order."""
    out: dict[int, list[np.ndarray]] = {}
    for rid, data in con.execute(f"SELECT memory_id, {_BINARY} FROM memory_windows WHERE memory_id = ANY(%s) "
                                 "ORDER BY memory_id, id", (list(map(int, ids)),)).fetchall():
        out.setdefault(int(rid), []).append(_unpack(data))
    return {rid: np.stack(v) for rid, v in out.items()}


def _filter_sql(table: str, f: Filter) -> tuple[str, list[Any]]:
    """(join and conditions, their values) for rows of `table` under the filter (as the SQLite mirror's mask)."""
    args: list[Any] = []
    if table == "chunks":
        where = ["d.status = 'ready'"]
        if f.kinds is not None and "chunk" not in f.kinds:
            where.append("false")
        if f.projects is not None:
            named = [p for p in f.projects if p is not None]
            cond = "d.project = ANY(%s)"
            args.append(named)
            if None in f.projects:
                cond = f"({cond} OR d.project IS NULL)"
            where.append(cond)
        if f.since is not None:
            where.append("d.created_at >= %s")
            args.append(f.since)
        if f.until is not None:
            where.append("d.created_at <= %s")
            args.append(f.until)
        join = "JOIN chunks c ON c.user_id = v.user_id AND c.id = v.chunk_id " \
               "JOIN documents d ON d.user_id = c.user_id AND d.id = c.document_id"
        return join + " WHERE " + " AND ".join(where), args
    where = []
    if f.kinds is not None:
        kinds = [k for k in f.kinds if k != "chunk"]
        cond = "(m.kind = ANY(%s) AND m.source != 'activity')"
        args.append(kinds)
        if f.activity and "episodic" in f.kinds:
            cond = f"({cond} OR m.source = 'activity')"
        where.append(cond)
    elif not f.activity:
        where.append("m.source != 'activity'")
    if f.projects is not None:
        named = [p for p in f.projects if p is not None]
        cond = "m.project = ANY(%s)"
        args.append(named)
        if None in f.projects:
            cond = f"({cond} OR m.project IS NULL)"
        where.append(cond)
    if not f.include_archived:
        where.append("NOT m.archived")
    if f.since is not None:
        where.append("coalesce(m.event_at, m.created_at) >= %s")
        args.append(f.since)
    if f.until is not None:
        where.append("coalesce(m.event_at, m.created_at) <= %s")
        args.append(f.until)
    join = "JOIN memories m ON m.user_id = v.user_id AND m.id = v.{key}"
    return join + (" WHERE " + " AND ".join(where) if where else ""), args


def _with_windows(cosine: float, windows: np.ndarray | None, q: np.ndarray) -> float:
    return cosine if windows is None or len(windows) == 0 else max(cosine, float(np.max(windows @ q)))


class VectorIndex:
    """Cosine search over one table's pgvector column (see the module doc): the same methods the parts use of
    the SQLite backend's index."""

    def __init__(self, table: str, dim: int, *, mirror: bool = True, store: Any = None) -> None:
        self.table = table
        self.dim = dim
        self.store = store
        self.siblings: list[VectorIndex] = []
        self._rows: tuple[int, float] | None = None  # (the user's vectors in the table, when read)

    def rows(self, con: Any) -> int:
        """The user's vectors in this table, about (the embedded memories or chunks the tallies count; a memory's
        windows go with it): read at most every ROWS_TTL seconds, as it only chooses how to search."""
        now = time.monotonic()
        if self._rows is None or now - self._rows[1] > ROWS_TTL:
            prefix = "c:" if self.table == "chunks" else "m:"
            row = con.execute("SELECT coalesce(sum(n), 0) FROM tallies WHERE starts_with(name, %s) "
                              "AND right(name, 2) = ':0'", (prefix,)).fetchone()
            self._rows = (int(row[0]) if row else 0, now)
        return self._rows[0]

    def _candidates(self, con: Any, q: np.ndarray, n: int, f: Filter, *, windows: bool) -> list[int]:
        name, key = _TABLES[self.table]
        join, args = _filter_sql(self.table, f)
        literal = _literal(q)
        rows = self.rows(con)
        if rows <= EXACT_ROWS:  # every distance, in single precision: an expression no index is built on
            order = _EXACT
        else:
            order = _ORDER.format(dim=int(self.dim))
            con.execute("SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', "
                        "'relaxed_order', true)", (str(ef_search(rows, n)),))
        ids = [int(r[0]) for r in con.execute(
            f"SELECT v.{key} FROM {name} v {join.format(key=key)} ORDER BY {order} LIMIT %s",
            (*args, literal, n)).fetchall()]
        if self.table == "memories" and windows:
            wjoin = join.format(key="memory_id")
            near = [int(r[0]) for r in con.execute(
                f"SELECT v.memory_id FROM memory_windows v {wjoin} ORDER BY {order} LIMIT %s",
                (*args, literal, n)).fetchall()]
            ids += [i for i in dict.fromkeys(near) if i not in set(ids)]
        return ids

    def cosines(self, con: Any, ids: list[int], q: np.ndarray) -> dict[int, float]:
        """Exact cosine to q for these rows (those without a vector are left out); a memory with windows gets
        the best of its own and its windows'."""
        return self.cosines_later(con, ids)(q)

    def cosines_later(self, con: Any, ids: list[int]) -> Callable[[np.ndarray], dict[int, float]]:
        """`cosines` in two steps: the rows' vectors are read now, their cosines computed once q is known."""
        if self.table != "memories":
            plain = read_vectors(con, self.table, ids)

            def plainly(q: np.ndarray) -> dict[int, float]:
                q = np.asarray(q, dtype=np.float32)
                return {rid: float(v @ q) for rid, v in plain.items()}

            return plainly
        vecs: dict[int, np.ndarray] = {}
        found: dict[int, list[np.ndarray]] = {}
        rows = con.execute(  # the vectors and their windows in one statement
            f"SELECT false, memory_id, {_BINARY}, 0 AS id FROM memory_vectors WHERE memory_id = ANY(%s::bigint[]) "
            f"UNION ALL SELECT true, memory_id, {_BINARY}, id FROM memory_windows WHERE memory_id = ANY(%s::bigint[]) "
            "ORDER BY 1, 2, 4", (bigints(ids),) * 2).fetchall()
        unpacked = _unpack_all([r[2] for r in rows])
        for (window, rid, _, _), v in zip(rows, unpacked, strict=True):
            if window:
                found.setdefault(int(rid), []).append(v)
            else:
                vecs[int(rid)] = v
        windows = {rid: np.stack(v) for rid, v in found.items()}

        def to(q: np.ndarray) -> dict[int, float]:
            q = np.asarray(q, dtype=np.float32)
            return {rid: _with_windows(float(v @ q), windows.get(rid), q) for rid, v in vecs.items()}

        return to

    def search(self, con: Any, q: np.ndarray, k: int, f: Filter, *, windows: bool = True) -> list[tuple[int, float]]:
        """[(row id, cosine)] best first: the top k of the HNSW candidates, rescored exactly."""
        q = np.asarray(q, dtype=np.float32)
        if k <= 0:
            return []
        ids = self._candidates(con, q, max(MIN_CANDIDATES, CANDIDATES * k), f, windows=windows)
        if not ids:
            return []
        if windows:
            scored = self.cosines(con, ids, q)
        else:
            scored = {rid: float(v @ q) for rid, v in read_vectors(con, self.table, ids).items()}
        return sorted(scored.items(), key=lambda x: (-x[1], x[0]))[:k]

    def near(self, con: Any, q: np.ndarray, threshold: float, f: Filter) -> list[tuple[int, float]]:
        """[(row id, cosine)] of the rows at least `threshold` close to q, whole texts only, best first."""
        return [(i, c) for i, c in self.search(con, q, 2, f, windows=False) if c >= threshold]

    def best_window(self, con: Any, rid: int, q: np.ndarray) -> tuple[int, int] | None:
        """(start, end) in memory rid's text of its window that matches q better than the whole text, if any."""
        q = np.asarray(q, dtype=np.float32)
        whole = read_vectors(con, self.table, [rid]).get(rid)
        if whole is None:
            return None
        rows = con.execute(f'SELECT start, "end", {_BINARY} FROM memory_windows WHERE memory_id = %s ORDER BY id',
                           (int(rid),)).fetchall()
        if not rows:
            return None
        scores = [float(_unpack(r[2]) @ q) for r in rows]
        best = int(np.argmax(scores))
        return (int(rows[best][0]), int(rows[best][1])) if scores[best] > float(whole @ q) else None

    def after_write(self, con: Any, epoch_before: int, epoch_after: int, ids: set[int], deleted: set[int]) -> None:
        """Nothing follows a write: the database is the index."""

    def warm(self, con: Any) -> None:
        """Nothing to load."""

    def stop(self, timeout: float = 5.0) -> None:
        """Nothing runs in the background."""

    def invalidate(self) -> None:
        """Nothing is cached."""
