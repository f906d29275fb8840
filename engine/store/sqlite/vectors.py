"""Vectors: stored in sqlite-vec `vec0` tables inside the encrypted file, searched exactly.

The vec0 table is the store of record (a derived index: it can always be rebuilt from the rows). Beside
it, `vec_<table>_f32` keeps the same float32 vectors in a plain table (inside the encrypted file), because
vec0 reads one row by id slowly (0.1-0.5 ms: it decodes a chunk of 1,024 vectors) and scans slowly; the
plain table reads 200 rows by id in ~1 ms.

Search runs over an in-process **int8 mirror** (one byte per dimension, a quarter of float32, plus the few
columns filters need): the approximate cosine of every row is computed with simsimd's int8 dot products
(the query quantized to int8 too; without simsimd, numpy's float32 product block by block), then the best
candidates are **rescored exactly** from the float copy. Every code of a table shares one scale
(`code_scale`: a unit vector's components are ~1/sqrt(dim), and CODE_LIMIT of those map to 127) and one
bound of its error (`code_bound`: rho >= ||v - scale * code||, so |approximate - exact| <= rho * ||q||, plus
vmax * ||e|| for the query's own rounding error e, vmax bounding every row's ||scale * code||). A row whose
codes err by more than that (a component beyond the codes' range) is an **exception**: its float32 vector
is kept beside the codes and its cosine computed exactly (none among a million random unit vectors, nor
among the bundled model's vectors of two public datasets). Every row whose approximate cosine plus the
bound reaches the k-th exact cosine found is rescored too, so no row left out can belong to the top k. The mirror follows
writes made in this process row by row, and catches up from `vector_log` (the rows each write touched)
when the store's vector epoch shows another process wrote. With the mirror off (settings.vector_cache =
false) vec0 answers directly.

The mirror is also **kept in the store** (table `vector_mirror`, inside the encrypted file like everything
else), so that opening a big store does not read every float vector through SQLCipher (~30 us a row): one
row per block of STORED_IDS row ids holds the block's codes, filter columns and exception flags as packed
numpy bytes (the head records the scale they were made with), and the state row `vector_mirror:<table>` the epoch every block is up to date with. A store
that opens loads the blocks (a quarter of the float32 bytes, in big blobs) and replays the vector log
since that epoch; it loads from every row instead when there are no blocks, they are older than the log
reaches, of another dimension or format, or one does not add up. A vector that goes (a forget, or the
old vector of an edit or a re-embedding: `put` deletes, then inserts) is **forgotten in its block in the
same transaction**, by trigger: its codes and filter columns become zeros and the row is flagged gone, in
place (engine/store/sqlite/mirror_layout.py: the record keeps its size, so SQLite writes only the pages whose bytes
changed), and the loader passes over it; a vector row rewritten in place erases its whole block, whose
rows are then read from the float copy until it is written again. Either way a forgotten row's code
never outlives it. Blocks are written by `VectorIndex.save`, in the background once
a mirror of STORED_MIN_ROWS rows or more has loaded from the rows and then every REFRESH_EPOCHS writes
(only the blocks that changed): SAVE_BLOCKS blocks a transaction, each from the mirror as it is at that
transaction, so a user's write waits at most one of those and a crash leaves the previous state usable.

A memory longer than the model's window also has **window vectors** (overlapping passages of it, see
`embeddings.Embedder.encode_windows`) in `vec_memory_windows`, owned through `memory_windows`. Its cosine
to a query is then the best of its whole-text cosine and its windows': the whole text's vector only sees
the first 256 word-pieces and blurs several topics into one, a window finds the part that matches (as a
document's best chunk does).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import mmap
import threading
import time
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from ... import lsh
from ...embeddings import Windows
from ...errors import EngineError
from ..types import Filter, Stopped
from . import maintenance, mirror_layout
from . import state as state_rows
from .db import Connection, DatabaseError, ProgrammingError, marks, padded
from .mirror_layout import EXCEPTION, GONE, META_BYTES

_simd: Any
try:  # int8 dot products in SIMD (AVX2/AVX-512 VNNI/NEON), 3x numpy's cast-and-multiply; numpy without it
    import simsimd as _simd
except ImportError:  # pragma: no cover - a wheel for every platform the app ships on
    _simd = None

if TYPE_CHECKING:
    from .db import Store

log = logging.getLogger(__name__)

KIND_CODES = {"fact": 0, "episodic": 1, "procedural": 2, "chunk": 3, "activity": 4}

EPOCH_KEY = "vector_epoch"

# table -> how to read its filter columns next to the vectors (from the float copy; an edit of a memory that
# changes none of them, memories.MIRRORED_FIELDS, leaves the mirror as it is)
_SOURCES = {
    "memories": (
        "SELECT m.id, CASE WHEN m.source = 'activity' THEN 'activity' ELSE m.kind END, m.project, m.archived, "
        "coalesce(m.event_at, m.created_at), v.embedding "
        "FROM vec_memories_f32 v JOIN memories m ON m.id = v.id"
    ),
    "chunks": (
        "SELECT c.id, 'chunk', d.project, 0, d.created_at, v.embedding "
        "FROM vec_chunks_f32 v JOIN chunks c ON c.id = v.id JOIN documents d ON d.id = c.document_id "
        "AND d.status = 'ready'"
    ),
}
# vectors per vec0 chunk (its default is 1024; the least it takes is 8): a delete zeroes the row's slot in the
# chunk's blob, reached through the blob's chain of overflow pages, so at 1024 (a 1.5 MB blob) it read ~0.75 MB
# (1.3 ms cold at a million rows) and at 64 (96 KiB, 12 pages) half of those pages; at 8 (12 KiB) a page or
# two: 0.35-0.45 ms less a delete of a row not in the cache at 200k rows. vec0's own search (used only with
# the mirror off) is ~1.4x slower over the smaller chunks, inserts ~6 us a row slower.
VEC0_CHUNK = 8
COPY_KEY = "vector_copy"  # state: the float copies hold every vector of vec0 (filled once for older stores)
BLOCK_ROWS = 1024  # int8 rows turned into float32 at a time (fits in the CPU cache)
LOAD_ROWS = 20_000  # rows read at a time when the mirror loads
LOG_EPOCHS = 2000  # writes kept in vector_log for other processes' mirrors to catch up with
NEAR_STEP = 20_000  # rows given their near-duplicate keys at a time by the background build (engine/lsh.py)

# the mirror kept in the store (table vector_mirror, one row per block of row ids)
TABLE_CODES = {"memories": 0, "chunks": 1}
# the int8 codes: one scale per table (code_scale), CODE_LIMIT times a unit vector's typical component at 127
CODE_LIMIT = 6.5
STORED_IDS = 256  # row ids per stored block (~0.1 MB at 384 dimensions; when a forget erased the whole
# block, 1024 made a forget at a million items 2.4 ms slower; 256 makes loading a million rows ~20 ms slower)
STORED_MIN_ROWS = 5000  # a table's mirror is kept in the store from this many rows (smaller ones load fast)
STORED_FORMAT = 2  # 2: one scale for every code (the table's), exceptions flagged; 1 had a scale and bound a row
HEAD_KEY = "vector_mirror:"  # + table: state row describing the stored blocks (JSON)
REFRESH_EPOCHS = 200  # writes after which the stored blocks are brought up to date (well within LOG_EPOCHS)
SAVE_BLOCKS = 4  # stored blocks written per transaction (~1.6 MB: a user's write waits at most that long)
SAVE_BUSY_MS = 200  # a save gives way to another program's write instead of waiting for it
RETRY_SECONDS = 30.0  # after a save that could not finish
SAVE_WAIT_SECONDS = 120.0  # how long closing the store waits for a save under way to finish
READ_CACHE_KIB = 4096  # page cache while the stored blocks are read (they are read once)
USE_SIMD = True  # the int8 scan through simsimd when it is installed (tests turn it off for the numpy path)
# arrays at least this big that are filled at once (a mirror loading) get their pages mapped in one go
POPULATE_MIN_BYTES = 1 << 20
# a search with no mirror loaded reads the stored blocks this many rows at a time, holding only those; from
# this many blocks, on two threads (each half of the blocks)
STREAM_ROWS = 16384
STREAM_SPLIT_BLOCKS = 64
# ... unless the blocks are due to be written again (REFRESH_EPOCHS writes behind, or more than these rows
# changed or blocks erased since: each is read from the float copy): the mirror then loads, and saves them
STREAM_MAX_CHANGED = 2000
STREAM_MAX_ERASED = 16


# memory windows: (owner memory id, vector), by owner
WINDOWS_OWNER_TRIGGER = ("CREATE TRIGGER memories_windows_ad AFTER DELETE ON memories BEGIN "
                         "DELETE FROM memory_windows WHERE memory_id = old.id; END")
_WINDOWS = (
    "SELECT w.memory_id, v.embedding FROM vec_memory_windows v JOIN memory_windows w ON w.id = v.rowid"
)


def read_epoch(con: Connection) -> int:
    row = con.execute("SELECT value FROM state WHERE key = ?", (EPOCH_KEY,)).fetchone()
    return int(row[0]) if row else 0


def bump_epoch(con: Connection) -> int:
    con.execute(
        "INSERT INTO state(key, value) VALUES (?, '1') "
        "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
        (EPOCH_KEY,),
    )
    return read_epoch(con)


def log_changes(con: Connection, epoch: int, memories: set[int], chunks: set[int]) -> None:
    """Record which rows a write at this epoch touched, so other processes' mirrors catch up by reading
    those rows instead of reloading everything; entries older than LOG_EPOCHS epochs are dropped."""
    con.executemany("INSERT INTO vector_log(epoch, tbl, rid) VALUES (?, ?, ?)",
                    [(epoch, 0, i) for i in memories] + [(epoch, 1, i) for i in chunks])
    con.execute("INSERT INTO vector_log(epoch, tbl, rid) VALUES (?, -1, 0)", (epoch,))  # the epoch itself
    con.execute("DELETE FROM vector_log WHERE epoch < ?", (epoch - LOG_EPOCHS,))


def changes_since(con: Connection, table: str, after: int, upto: int) -> set[int] | None:
    """Rows of `table` touched by writes after epoch `after` up to `upto`; None when the log does not hold
    every one of those epochs (a write that bumped the epoch without logging, or one pruned away)."""
    if upto - after > LOG_EPOCHS or not has_log(con):
        return None
    seen = con.execute("SELECT count(DISTINCT epoch) FROM vector_log WHERE epoch > ? AND epoch <= ? AND tbl = -1",
                       (after, upto)).fetchone()[0]
    if seen != upto - after:
        return None
    code = 0 if table == "memories" else 1
    return {r[0] for r in con.execute("SELECT rid FROM vector_log WHERE epoch > ? AND epoch <= ? AND tbl = ?",
                                      (after, upto, code)).fetchall()}


def has_log(con: Connection) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE name = 'vector_log'").fetchone() is not None


def create_tables(con: Connection, dim: int) -> None:
    """vec0 tables for memories, their windows and chunks, and triggers so a deleted row never keeps a
    vector. All of it is a derived index: dropped and rebuilt from the rows when the embedding space changes."""
    for table in ("memories", "memory_windows", "chunks"):
        con.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS vec_{table} USING vec0(embedding float[{dim}] distance_metric=cosine"
            f", chunk_size={VEC0_CHUNK})"
        )
    con.execute(
        "CREATE TABLE IF NOT EXISTS memory_windows(id INTEGER PRIMARY KEY, memory_id INTEGER NOT NULL, "
        "start INTEGER NOT NULL, end INTEGER NOT NULL)"  # the window is text[start:end] of its memory
    )
    con.execute("CREATE INDEX IF NOT EXISTS memory_windows_owner ON memory_windows(memory_id)")
    for table in ("memories", "chunks"):
        con.execute(
            f"CREATE TRIGGER IF NOT EXISTS {table}_vec_ad AFTER DELETE ON {table} BEGIN "
            f"DELETE FROM vec_{table} WHERE rowid = old.id; END"
        )
        con.execute(f"CREATE TABLE IF NOT EXISTS vec_{table}_f32(id INTEGER PRIMARY KEY, embedding BLOB NOT NULL)")
        con.execute(
            f"CREATE TRIGGER IF NOT EXISTS {table}_f32_ad AFTER DELETE ON {table} BEGIN "
            f"DELETE FROM vec_{table}_f32 WHERE id = old.id; END"
        )
    if con.execute("SELECT 1 FROM state WHERE key = ?", (COPY_KEY,)).fetchone() is None:
        for table in ("memories", "chunks"):  # a store from before the float copies: fill them once
            con.execute(f"INSERT OR REPLACE INTO vec_{table}_f32(id, embedding) SELECT rowid, embedding FROM vec_{table}")
        con.execute("INSERT INTO state(key, value) VALUES (?, '1')", (COPY_KEY,))
    # A window's vector goes with its row, one by one: vec0 answers `rowid = ?` from its rowid index but
    # `rowid IN (…)` by reading every vector it holds, so the trigger this replaces (one DELETE … WHERE rowid
    # IN the memory's windows) read all the windows of the store whenever any memory went or was re-embedded
    # (13-18 ms with 50,000 windows, growing with them; ~1 ms by rowid).
    con.execute(
        "CREATE TRIGGER IF NOT EXISTS memory_windows_vec_ad AFTER DELETE ON memory_windows BEGIN "
        "DELETE FROM vec_memory_windows WHERE rowid = old.id; END"
    )
    owned = con.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'memories_windows_ad'").fetchone()
    if owned is None or owned[0] != WINDOWS_OWNER_TRIGGER:  # a store from before: its trigger scanned
        con.execute("DROP TRIGGER IF EXISTS memories_windows_ad")
        con.execute(WINDOWS_OWNER_TRIGGER)
    if has_stored_mirror(con):
        _mirror_triggers(con)


def _mirror_trigger_sql(table: str, code: int, event: str) -> str:
    """A vector that goes is forgotten in its stored block in the same transaction (engine/store/sqlite/mirror_layout.py:
    its codes zeroed, the row flagged GONE, the record overwritten in place); one that changes erases its
    block (the block's rows are read from the float copy until it is written again). Either way a row's
    old code never outlives it."""
    where = f"WHERE tbl = {code} AND block = old.id / {STORED_IDS} AND codes IS NOT NULL"
    if event == "DELETE":
        change = ("SET meta = mirror_forget_meta(meta, old.id), codes = mirror_forget_codes(codes, meta, old.id)")
    else:
        change = "SET projects = NULL, meta = NULL, codes = NULL"
    return (f"CREATE TRIGGER {table}_f32_mirror_{event[0].lower()} AFTER {event} ON vec_{table}_f32 "
            f"BEGIN UPDATE vector_mirror {change} {where}; END")


def _mirror_triggers(con: Connection) -> None:
    """Create (or bring up to date) the triggers that keep the stored blocks from outliving a row's vector."""
    erase = f"block = old.id / {STORED_IDS} AND"
    triggers = dict(con.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%_f32_mirror_%'").fetchall())
    if any(erase not in sql for sql in triggers.values()):  # blocks of another size: they go, the triggers change
        drop_stored(con)
    for table, code in TABLE_CODES.items():
        for event in ("DELETE", "UPDATE"):
            name, sql = f"{table}_f32_mirror_{event[0].lower()}", _mirror_trigger_sql(table, code, event)
            if triggers.get(name) != sql:  # missing, or as an earlier version made it
                con.execute(f"DROP TRIGGER IF EXISTS {name}")
                con.execute(sql)


def has_stored_mirror(con: Connection) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE name = 'vector_mirror'").fetchone() is not None


def read_head(con: Connection, table: str) -> dict | None:
    """What the stored blocks of `table` are (format, dimension, block size, the epoch they are up to date
    with); None when there are none, or of another format."""
    value = state_rows.get(con, HEAD_KEY + table)
    if value is None:
        return None
    try:
        head = json.loads(value)
    except ValueError:
        return None
    if not isinstance(head, dict) or head.get("format") != STORED_FORMAT or head.get("ids") != STORED_IDS:
        return None
    if not isinstance(head.get("dim"), int) or not isinstance(head.get("epoch"), int):
        return None
    return head


# the erased stored blocks (a vector of theirs changed or went), by their partial index (migrations.m009)
_ERASED = "FROM vector_mirror INDEXED BY vector_mirror_erased WHERE tbl = ? AND codes IS NULL"


def erased_blocks(con: Connection, table: str) -> set[int]:
    return {r[0] for r in con.execute(f"SELECT block {_ERASED}", (TABLE_CODES[table],))}


def gone_rows(con: Connection, table: str, blocks: list[int]) -> dict[int, np.ndarray]:
    """The ids flagged GONE in these stored blocks (their vector was deleted after the block was written)
    that have no vector now, by block (only blocks with some)."""
    out: dict[int, np.ndarray] = {}
    code = TABLE_CODES[table]
    for i in range(0, len(blocks), 500):
        part = blocks[i : i + 500]
        for block, meta in con.execute(
                f"SELECT block, meta FROM vector_mirror WHERE tbl = ? AND codes IS NOT NULL AND block IN "
                f"({marks(part)})", (code, *padded(part))):
            flagged = mirror_layout.flagged(meta, GONE)
            if not len(flagged):
                continue
            back = {r[0] for r in con.execute(
                f"SELECT id FROM vec_{table}_f32 WHERE id IN ({marks(flagged)})", padded(flagged.tolist()))}
            went = np.array([rid for rid in flagged.tolist() if rid not in back], dtype=np.int64)
            if len(went):
                out[int(block)] = went
    return out


def stored_counts(con: Connection, table: str) -> tuple[int, int, int]:
    """(blocks, erased blocks, rows they hold) of the table's stored mirror, from two small indexes alone
    (migrations.m009): each block's own row is on a page of its own, not in the cache before the blocks are
    read, and at a million items asking them cost ~0.3 s a table."""
    code = TABLE_CODES[table]
    blocks, rows = con.execute("SELECT count(*), coalesce(sum(rows), 0) FROM vector_mirror INDEXED BY vector_mirror_rows "
                               "WHERE tbl = ?", (code,)).fetchone()
    erased = con.execute(f"SELECT count(*) {_ERASED}", (code,)).fetchone()[0]
    return int(blocks), int(erased), int(rows)


def drop_stored(con: Connection) -> None:
    """Forget the stored mirror (its blocks are zeroed on disk by secure_delete)."""
    if has_stored_mirror(con):
        con.execute("DELETE FROM vector_mirror")
    con.execute("DELETE FROM state WHERE key LIKE ?", (HEAD_KEY + "%",))


def drop_tables(con: Connection) -> None:
    con.execute("DROP TRIGGER IF EXISTS memories_windows_ad")
    con.execute("DROP TRIGGER IF EXISTS memory_windows_vec_ad")
    for table in ("memories", "chunks"):
        con.execute(f"DROP TRIGGER IF EXISTS {table}_vec_ad")
        con.execute(f"DROP TRIGGER IF EXISTS {table}_f32_ad")
        con.execute(f"DROP TABLE IF EXISTS vec_{table}_f32")
    for table in ("memories", "memory_windows", "chunks"):
        con.execute(f"DROP TABLE IF EXISTS vec_{table}")
    con.execute("DROP TABLE IF EXISTS memory_windows")
    con.execute("DELETE FROM state WHERE key = ?", (COPY_KEY,))
    drop_stored(con)


def put(con: Connection, table: str, ids: list[int], vecs: np.ndarray,
        windows: list[Windows | None] | None = None) -> None:
    """Store (replace) the vectors of these rows; for memories, also their window vectors (None: none)."""
    delete(con, table, ids)
    rows = [(i, np.asarray(v, dtype=np.float32).tobytes()) for i, v in zip(ids, vecs, strict=True)]
    con.executemany(f"INSERT INTO vec_{table}(rowid, embedding) VALUES (?, ?)", rows)
    con.executemany(f"INSERT OR REPLACE INTO vec_{table}_f32(id, embedding) VALUES (?, ?)", rows)
    for rid, wins in zip(ids, windows or [], strict=False):
        if wins is None:
            continue
        for v, (start, end) in zip(wins.vectors, wins.spans, strict=True):
            wid = con.execute("INSERT INTO memory_windows(memory_id, start, end) VALUES (?, ?, ?)",
                              (rid, start, end)).lastrowid
            con.execute("INSERT INTO vec_memory_windows(rowid, embedding) VALUES (?, ?)",
                        (wid, np.asarray(v, dtype=np.float32).tobytes()))


def has_windows(con: Connection) -> bool:
    """Whether this store has the window tables yet (they come with the first embedding space check)."""
    return con.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_windows'").fetchone() is not None


def delete(con: Connection, table: str, ids: list[int]) -> None:
    """Drop the vectors (and a memory's windows) of these rows; the rows stay."""
    con.executemany(f"DELETE FROM vec_{table} WHERE rowid = ?", [(i,) for i in ids])
    con.executemany(f"DELETE FROM vec_{table}_f32 WHERE id = ?", [(i,) for i in ids])
    if table == "memories" and has_windows(con):  # their vectors go by trigger (memory_windows_vec_ad)
        con.executemany("DELETE FROM memory_windows WHERE memory_id = ?", [(i,) for i in ids])


def read_windows(con: Connection, ids: list[int] | None = None) -> dict[int, np.ndarray]:
    """Window vectors of these memories (None: of all), only those that have any: id -> (n, dim) matrix."""
    out: dict[int, list[np.ndarray]] = {}
    parts = [None] if ids is None else [ids[p : p + 500] for p in range(0, len(ids), 500)]
    for part in parts:
        where = "" if part is None else f" WHERE w.memory_id IN ({marks(part)})"
        for rid, blob in con.execute(_WINDOWS + where + " ORDER BY w.memory_id, w.id", padded(part or ())).fetchall():
            out.setdefault(rid, []).append(np.frombuffer(blob, dtype=np.float32))
    return {rid: np.stack(v) for rid, v in out.items()}


def read_vectors(con: Connection, table: str, ids: list[int]) -> dict[int, np.ndarray]:
    """The exact (float32) vectors of these rows, from the float copy: id -> vector (rows without one are
    left out)."""
    out: dict[int, np.ndarray] = {}
    for p in range(0, len(ids), 500):
        part = ids[p : p + 500]
        for rid, blob in con.execute(
            f"SELECT id, embedding FROM vec_{table}_f32 WHERE id IN ({marks(part)})", padded(part)
        ).fetchall():
            out[rid] = np.frombuffer(blob, dtype=np.float32)
    return out


def code_scale(dim: int) -> float:
    """The one scale of every int8 code of a table: a unit vector's components are ~1/sqrt(dim) each, and
    CODE_LIMIT of those map to 127 (0.33 at 384 dimensions; no component of a unit vector exceeds 1)."""
    return min(1.0, CODE_LIMIT / math.sqrt(dim)) / 127.0


def code_bound(dim: int) -> float:
    """The bound of every code's error ||v - scale * code|| (a row over it is an exception, kept in float32).
    Rounding each of dim components to the nearest step errs by at most half a step, so the error is at most
    scale/2 * sqrt(dim); rounding errors are spread evenly, so it is scale * sqrt(dim/12) on average with a
    relative spread of ~0.9/sqrt(dim) in its square, and the bound sits 7 of those above (at 384 dimensions
    1.15x the average, 0.017; a million random unit vectors erred at most 1.11x), or at the worst case."""
    spread = min(3.0, 1.0 + 6.3 / math.sqrt(dim))
    return code_scale(dim) * math.sqrt(dim / 12.0 * spread) * 1.0001 + 1e-5


def quantize(mat: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(int8 codes, error per row) of float32 rows: v ~ scale * code and ||v - scale * code|| <= error, so a
    cosine from the codes is within error * ||q|| of the exact one (a component beyond 127 steps is clipped,
    which the error counts)."""
    mat = np.asarray(mat, dtype=np.float32)
    codes = np.clip(np.rint(mat / np.float32(scale)), -127, 127).astype(np.int8)
    err = mat - codes.astype(np.float32) * np.float32(scale)
    # float32 rounding of the cosines themselves is ~1e-6: added so the bound holds as computed
    return codes, np.sqrt(np.einsum("ij,ij->i", err, err)) * 1.0001 + 1e-5


def with_windows(cosine: float, windows: np.ndarray | None, q: np.ndarray) -> float:
    """A memory's cosine to q: the best of its whole-text cosine and its windows'."""
    if windows is None or len(windows) == 0:
        return cosine
    return max(cosine, float((windows @ q).max()))





class _Positions:
    """Row id -> position in the mirror. The rows loaded from the stored blocks come in id order and are
    found by bisection (a million ids need no dict built when the mirror loads); rows added later, by a dict."""

    def __init__(self, mirror: _Mirror):
        self.m = mirror
        self.sorted_n = 0  # positions [0, sorted_n) hold ids in increasing order
        self.extra: dict[int, int] = {}

    def get(self, rid: int, default: int | None = None) -> int | None:
        m = self.m
        if self.sorted_n:
            i = int(np.searchsorted(m.ids[: self.sorted_n], rid))
            if i < self.sorted_n and int(m.ids[i]) == rid and m.alive[i]:
                return i
        return self.extra.get(rid, default)

    def pop(self, rid: int, default: int | None = None) -> int | None:
        p = self.get(rid)
        if p is None:
            return default
        self.extra.pop(rid, None)
        return p

    def update(self, pairs) -> None:
        self.extra.update(pairs)

    def __contains__(self, rid: int) -> bool:
        return self.get(rid) is not None

    def __bool__(self) -> bool:
        return bool(self.sorted_n or self.extra)


def _zeros(shape: int | tuple[int, ...], dtype: type | np.dtype, *, populate: bool = False) -> np.ndarray:
    """np.zeros; with populate (an array about to be filled at once, as a mirror that loads) its zero pages
    are mapped by the kernel in one go (Linux's MAP_POPULATE) instead of one fault per page as it is
    written: on a virtual machine a page the guest has not used yet can cost 5x as much faulted in alone
    (200 MB: 75-100 ms populated, 30-460 ms faulted; docs/performance.md)."""
    flag = getattr(mmap, "MAP_POPULATE", None)
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if not populate or flag is None or nbytes < POPULATE_MIN_BYTES:
        return np.zeros(shape, dtype=dtype)
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | flag)
    return np.frombuffer(buf, dtype=dtype).reshape(shape)  # the array keeps the mapping alive


def _room(mat: np.ndarray, pos: np.ndarray, alive: np.ndarray, used: int, need: int, least: int
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A side table of float32 rows (vectors, their positions in the mirror, alive) with room for `need`
    rows, its first `used` kept: these arrays when they have it, else new ones, doubling (a view taken
    before keeps the old ones)."""
    if need <= len(pos):
        return mat, pos, alive
    new = max(least, 2 * len(pos), need)
    out = (np.zeros((new, mat.shape[1]), dtype=mat.dtype), np.zeros(new, dtype=pos.dtype),
           np.zeros(new, dtype=alive.dtype))
    for grown, old in zip(out, (mat, pos, alive), strict=True):
        grown[:used] = old[:used]
    return out


class _Mirror:
    """A growable int8 matrix of one table's vectors (codes sharing one scale, each within one error bound of
    its vector) plus filter columns; deleted rows are tombstoned. Window vectors of long memories stay
    float32 (few), and so do the exceptions: rows whose codes err by more than the bound (a component beyond
    the codes' range), scored exactly."""

    def __init__(self, dim: int):
        self.dim = dim
        self.n = 0
        self.ids = np.zeros(0, dtype=np.int64)
        self.codes = np.zeros((0, dim), dtype=np.int8)
        self.scale = code_scale(dim)
        self.bound = code_bound(dim)
        self.kind = np.zeros(0, dtype=np.int8)
        self.proj = np.zeros(0, dtype=np.int32)  # code into self.projects; 0 = no project
        self.archived = np.zeros(0, dtype=bool)
        self.t = np.zeros(0, dtype=np.float64)
        self.alive = np.zeros(0, dtype=bool)
        self.pos = _Positions(self)
        self.projects: dict[str | None, int] = {None: 0}
        self.dead = 0
        # window vectors of long memories: row i of wmat belongs to the row at position wpos[i]
        self.wn = 0
        self.wmat = np.zeros((0, dim), dtype=np.float32)
        self.wpos = np.zeros(0, dtype=np.int64)
        self.walive = np.zeros(0, dtype=bool)
        self.wrows: dict[int, list[int]] = {}  # owner id -> its rows in wmat
        # exceptions: row i of xmat is the float32 vector of the row at position xpos[i]
        self.xn = 0
        self.xmat = np.zeros((0, dim), dtype=np.float32)
        self.xpos = np.zeros(0, dtype=np.int64)
        self.xalive = np.zeros(0, dtype=bool)
        self.xrows: dict[int, int] = {}  # row id -> its row in xmat
        self._buf = np.zeros((BLOCK_ROWS, dim), dtype=np.float32)
        # near-duplicate buckets (memories; engine/lsh.py), built in the background once a duplicate check
        # asks: positions [0, near_n) have their keys in `near`, later ones are scanned
        self.near: lsh.Buckets | None = None
        self.near_n = 0
        # an upper bound of every row's ||scale * code|| (rows added since only raise it)
        self.vmax = 0.0

    def resident_bytes(self, *, vectors_only: bool = False) -> int:
        """Bytes of the rows in use (the arrays' spare capacity is allocated untouched, so not resident):
        of the vectors (codes, windows, exceptions), or of everything with the filter columns."""
        per_row = self.codes.itemsize * self.dim
        if not vectors_only:
            per_row += sum(a.itemsize for a in (self.ids, self.kind, self.proj, self.archived, self.t, self.alive))
        near = self.near.resident_bytes() if self.near is not None and not vectors_only else 0
        floats = (self.wn + self.xn) * (self.wmat.itemsize * self.dim + self.wpos.itemsize + 1)
        return int(self.n * per_row + floats) + near

    def _grow(self, need: int, *, exact: bool = False) -> None:
        """Room for `need` more rows: doubling, or with exact just that many, mapped at once (the rows are
        about to be written: a mirror loading from its stored blocks)."""
        cap = len(self.ids)
        if self.n + need <= cap:
            return
        new = self.n + need if exact else max(1024, cap * 2, self.n + need)
        for name in ("ids", "kind", "proj", "archived", "t", "alive"):
            old = getattr(self, name)
            arr = _zeros(new, old.dtype, populate=exact)
            arr[: self.n] = old[: self.n]
            setattr(self, name, arr)
        codes = _zeros((new, self.dim), np.int8, populate=exact)
        codes[: self.n] = self.codes[: self.n]
        self.codes = codes

    def remove(self, rid: int) -> None:
        p = self.pos.pop(rid, None)
        if p is not None:
            self.alive[p] = False
            self.dead += 1
        rows = self.wrows.pop(rid, None)
        if rows:
            self.walive[rows] = False
            self.dead += len(rows)
        x = self.xrows.pop(rid, None)
        if x is not None:
            self.xalive[x] = False

    def add_exceptions(self, pos: np.ndarray, mat: np.ndarray) -> None:
        """Keep the float32 vectors `mat` of the rows at positions `pos` (their codes err beyond the bound)."""
        if not len(pos):
            return
        need = self.xn + len(pos)
        self.xmat, self.xpos, self.xalive = _room(self.xmat, self.xpos, self.xalive, self.xn, need, 64)
        rows = np.arange(self.xn, need)
        self.xmat[rows] = mat
        self.xpos[rows] = pos
        self.xalive[rows] = True
        self.xrows.update(zip(self.ids[pos].tolist(), rows.tolist(), strict=True))
        self.xn = need

    def exceptions(self, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(positions, rows of xmat) of the live exceptions among the first n rows (all)."""
        live = np.flatnonzero(self.xalive[: self.xn])
        pos = self.xpos[live]
        if n is not None:
            keep = pos < n
            live, pos = live[keep], pos[keep]
        return pos, live

    def is_exception(self, pos: np.ndarray) -> np.ndarray:
        """Which of these positions hold a live exception (a bool mask)."""
        return np.isin(pos, self.exceptions()[0]) if self.xn else np.zeros(len(pos), dtype=bool)

    def add_windows(self, windows: dict[int, np.ndarray]) -> None:
        """Window vectors for rows already added (add() drops a row's old windows)."""
        for rid, mat in windows.items():
            p = self.pos.get(rid)
            if p is None or len(mat) == 0:
                continue
            need = self.wn + len(mat)
            self.wmat, self.wpos, self.walive = _room(self.wmat, self.wpos, self.walive, self.wn, need, 256)
            rows = list(range(self.wn, need))
            self.wmat[rows] = mat
            self.wpos[rows] = p
            self.walive[rows] = True
            self.wrows[rid] = rows
            self.wn = need

    def approximate(self, q: np.ndarray) -> tuple[np.ndarray, float]:
        """(cosine of every row to q from the int8 codes, extra): each within bound * ||q|| + extra of the
        exact one. With simsimd the query is quantized too and the products are integers (exact), so the
        query's own rounding error e adds extra = vmax * ||e|| (vmax bounds every row's ||scale * code||,
        Cauchy-Schwarz); with numpy, the float32 query against the codes block by block (extra = 0). An
        exception's cosine is exact (its float32 vector)."""
        out, extra = self._from_codes(q)
        if self.xn:
            pos, rows = self.exceptions(self.n)
            out[pos] = self.xmat[rows] @ q
        return out, extra

    def _from_codes(self, q: np.ndarray) -> tuple[np.ndarray, float]:
        n = self.n
        if _simd is not None and USE_SIMD and n:
            peak = float(np.abs(q).max())
            sq = peak / 127.0 if peak > 0 else 1.0
            cq = np.clip(np.rint(q / sq), -127, 127).astype(np.int8)
            err = q.astype(np.float64) - cq.astype(np.float64) * sq
            extra = self.vmax * (float(np.sqrt(err @ err)) * 1.0001 + 1e-6)
            dots = np.empty((1, n), dtype=np.float64)
            _simd.cdist(cq[None, :], self.codes[:n], metric="inner", threads=1, out=dots)
            out = dots[0].astype(np.float32)
            out *= np.float32(self.scale * sq)
            return out, extra
        out = np.empty(n, dtype=np.float32)
        buf = self._buf
        for s in range(0, n, BLOCK_ROWS):
            e = min(n, s + BLOCK_ROWS)
            block = buf[: e - s]
            np.copyto(block, self.codes[s:e], casting="unsafe")
            np.matmul(block, q, out=out[s:e])
        out *= np.float32(self.scale)
        return out, 0.0

    def code_norm_max(self) -> float:
        """The largest ||scale * code|| of the rows (what `vmax` bounds), computed from the codes."""
        best = 0.0
        for s in range(0, self.n, 65536):
            e = min(self.n, s + 65536)
            c = self.codes[s:e]
            sq = np.asarray(_simd.dot(c, c)) if _simd is not None else np.einsum("ij,ij->i", c, c, dtype=np.int64)
            if len(sq):
                best = max(best, float(np.sqrt(sq.astype(np.float64)).max()) * self.scale)
        return best * 1.0001 + 1e-6

    def window_best(self, q: np.ndarray) -> np.ndarray | None:
        """For every row, the best cosine of its windows to q (-inf without windows); None: no windows."""
        if not self.wrows:
            return None
        best = np.full(self.n, -np.inf, dtype=np.float32)
        live = np.flatnonzero(self.walive[: self.wn])
        np.maximum.at(best, self.wpos[live], self.wmat[live] @ q)
        return best

    def add_stored(self, block: int, rows: int, projects: list, meta: bytes, codes: bytes) -> np.ndarray:
        """Append one stored block (rows already quantized, ids in increasing order, none in the mirror yet:
        blocks are added in block order on a fresh mirror); the positions of its exceptions, whose float32
        vectors the caller gives (add_exceptions). ValueError when the block does not add up."""
        if len(meta) != rows * META_BYTES or len(codes) != rows * self.dim or len(projects) < 1:
            raise ValueError("stored mirror block of the wrong size")
        parts = mirror_layout.arrays(meta, rows)
        ids = parts["ids"]
        lo = block * STORED_IDS
        if rows and (ids[0] < lo or ids[-1] >= lo + STORED_IDS or np.any(np.diff(ids) <= 0)):
            raise ValueError("stored mirror block with ids out of place")
        if self.n and rows and ids[0] <= self.ids[self.n - 1]:
            raise ValueError("stored mirror blocks out of order")
        local = parts["proj"]
        if rows and (local.min() < 0 or local.max() >= len(projects)):
            raise ValueError("stored mirror block with unknown project codes")
        mat = np.frombuffer(codes, dtype=np.int8).reshape(rows, self.dim)
        flags = parts["exception"]
        if rows and flags.max() > GONE:
            raise ValueError("stored mirror block with unknown row flags")
        kept = flags != GONE  # a row whose vector went since the block was written (mirror_layout.forget_meta)
        if not kept.all():
            parts = {name: a[kept] for name, a in parts.items()}
            ids, local, mat, flags, rows = parts["ids"], parts["proj"], mat[kept], parts["exception"], int(kept.sum())
        lut = np.array([self.projects.setdefault(p, len(self.projects)) for p in projects], dtype=np.int32)
        self._grow(rows)
        span = slice(self.n, self.n + rows)
        self.ids[span] = ids
        self.codes[span] = mat
        self.t[span] = parts["t"]
        self.proj[span] = lut[local]
        self.kind[span] = parts["kind"]
        self.archived[span] = parts["archived"].astype(bool)
        self.alive[span] = True
        if self.near is not None and self.near_n == self.n:  # the buckets are complete: keep them so
            self.near.set(self.n, lsh.keys(self.codes[span].astype(np.float32), lsh.hyperplanes(self.dim)))
            self.near_n = self.n + rows
        self.n += rows
        self.pos.sorted_n = self.n
        return span.start + np.flatnonzero(flags == EXCEPTION)

    def by_id(self) -> tuple[int, np.ndarray, np.ndarray]:
        """(n, live positions by id, their stored blocks) as of now: what `block_positions` starts from."""
        n = self.n
        live = np.flatnonzero(self.alive[:n])
        order = live[np.argsort(self.ids[live], kind="stable")]
        return n, order, self.ids[order] // STORED_IDS

    def block_positions(self, blocks: list[int], start: tuple[int, np.ndarray, np.ndarray] | None = None
                        ) -> dict[int, np.ndarray]:
        """The live positions of the rows of these stored blocks, each block's by id; from `by_id()` taken
        earlier on this mirror (rows are only appended or tombstoned since), or from scratch."""
        n0, order, blk = start if start is not None else self.by_id()
        tail = np.arange(n0, self.n, dtype=np.int64)
        tail = tail[self.alive[tail]]
        tail_blk = self.ids[tail] // STORED_IDS
        want = np.asarray(blocks, dtype=np.int64)
        lo, hi = np.searchsorted(blk, want, "left"), np.searchsorted(blk, want, "right")
        out = {}
        for b, i, j in zip(want.tolist(), lo.tolist(), hi.tolist(), strict=True):
            p = order[i:j]
            p = p[self.alive[p]]
            extra = tail[tail_blk == b]
            if len(extra):
                p = np.concatenate([p, extra])
                p = p[np.argsort(self.ids[p], kind="stable")]
            out[b] = p
        return out

    def pack(self, p: np.ndarray, names: dict[int, str | None]) -> tuple[int, str, bytes, bytes]:
        """(rows, project names JSON, meta, codes) of a stored block holding the rows at positions p (by id);
        names: project code -> name."""
        codes, local = np.unique(self.proj[p], return_inverse=True)
        projects = json.dumps([names[int(c)] for c in codes] or [None])
        meta = mirror_layout.meta_bytes({"ids": self.ids[p], "t": self.t[p], "proj": local, "kind": self.kind[p],
                                         "archived": self.archived[p], "exception": self.is_exception(p)})
        return len(p), projects, meta, self.codes[p].tobytes()

    def add(self, rows: list[tuple], *, fresh: bool = False) -> None:
        """Add (or replace) rows (id, kind, project, archived, time, float32 blob), vectorised: loading a
        big mirror is bound by reading the rows, not by this. fresh: none of them is in the mirror yet,
        and they come in increasing id order after every row it holds (they join the bisected rows)."""
        if not rows:
            return
        if self.pos and not fresh:
            for r in rows:
                self.remove(r[0])
        n = len(rows)
        self._grow(n)
        p0 = self.n
        mat = np.frombuffer(b"".join(r[5] for r in rows), dtype=np.float32).reshape(n, self.dim)
        span = slice(p0, p0 + n)
        self.codes[span], err = quantize(mat, self.scale)
        if n:  # ||scale * code|| <= ||v|| + its error
            self.vmax = max(self.vmax, float((np.linalg.norm(mat, axis=1) + err).max()) * 1.0001)
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=n)
        self.ids[span] = ids
        over = np.flatnonzero(err > self.bound)
        self.add_exceptions(p0 + over, mat[over])
        self.kind[span] = np.fromiter((KIND_CODES[r[1]] for r in rows), dtype=np.int8, count=n)
        projects = self.projects
        self.proj[span] = np.fromiter((projects.setdefault(r[2], len(projects)) for r in rows), dtype=np.int32,
                                      count=n)
        self.archived[span] = np.fromiter((bool(r[3]) for r in rows), dtype=bool, count=n)
        self.t[span] = np.fromiter((r[4] or 0.0 for r in rows), dtype=np.float64, count=n)
        self.alive[span] = True
        if fresh and self.pos.sorted_n == p0 and not self.pos.extra:
            self.pos.sorted_n = p0 + n
        else:
            self.pos.update(zip(ids.tolist(), range(p0, p0 + n), strict=True))
        if self.near is not None and self.near_n == p0:  # the buckets are complete: keep them so
            self.near.set(p0, lsh.keys(mat, lsh.hyperplanes(self.dim)))
            self.near_n = p0 + n
        self.n += n

    def mask(self, f: Filter, pos: np.ndarray | None = None) -> np.ndarray:
        """Which rows pass the filter: all n, or those at positions `pos`."""
        at: slice | np.ndarray = slice(0, self.n) if pos is None else pos
        mask = self.alive[at].copy()
        if f.projects is not None:
            codes = [self.projects[p] for p in f.projects if p in self.projects]
            mask &= np.isin(self.proj[at], codes)
        if f.kinds is not None:
            codes = [KIND_CODES[x] for x in f.kinds]
            if f.activity and "episodic" in f.kinds:
                codes.append(KIND_CODES["activity"])
            mask &= np.isin(self.kind[at], codes)
        elif not f.activity:
            mask &= self.kind[at] != KIND_CODES["activity"]
        if not f.include_archived:
            mask &= ~self.archived[at]
        if f.since is not None:
            mask &= self.t[at] >= f.since
        if f.until is not None:
            mask &= self.t[at] <= f.until
        return mask

    def near_rows(self, q: np.ndarray, threshold: float, f: Filter,
                  exact: Callable[[list[int]], dict[int, np.ndarray]]) -> list[tuple[int, float]]:
        """[(row id, cosine)] of the rows at least `threshold` close to q (whole texts, no windows), best
        first: the rows sharing a bucket with q (engine/lsh.py) and those not in the buckets yet, checked by
        their int8 bounds and then exactly. Misses a row only as the buckets do (P in engine/lsh.py)."""
        n = self.n
        done = min(self.near_n, n) if self.near is not None else 0
        parts = [np.arange(done, n, dtype=np.int64)]
        if done:
            found = self.near.lookup(lsh.keys(q, lsh.hyperplanes(self.dim))[0])  # type: ignore[union-attr]
            parts.append(found[found < done])
        pos = np.concatenate(parts)
        pos = pos[self.mask(f, pos)]
        if pos.size == 0:
            return []
        upper = (self.codes[pos].astype(np.float32) @ q) * np.float32(self.scale) + self.bound * float(np.linalg.norm(q))
        upper[self.is_exception(pos)] = np.inf  # an exception's codes say nothing: checked exactly
        pos = pos[upper >= threshold]
        if pos.size == 0:
            return []
        ids = [int(i) for i in self.ids[pos]]
        vecs = exact(ids)
        out = [(rid, float(vecs[rid] @ q)) for rid in ids if rid in vecs]
        return sorted(((rid, c) for rid, c in out if c >= threshold), key=lambda x: (-x[1], x[0]))

    def search(self, q: np.ndarray, k: int, f: Filter, exact: Callable[[list[int]], dict[int, np.ndarray]],
               windows: bool = True) -> list[tuple[int, float]]:
        """Exactly the top k under the filter: candidates by the int8 cosines, rescored with `exact` (row id
        -> float32 vector), widened to every row whose bound says it could still be in the top k."""
        s = self.scored(q, f, windows)
        return _select(s, q, k, exact) if s is not None else []

    def scored(self, q: np.ndarray, f: Filter, windows: bool = True) -> _Scored | None:
        """The int8 cosines of the rows passing the filter (None: none passes); with windows, each row's is
        the best of its own and its windows' (exact). The arrays may be views of this mirror's."""
        n = self.n
        if n == 0:
            return None
        passing = self.mask(f)
        idx = None if passing.all() else np.flatnonzero(passing)  # all pass: no gathers below
        if idx is not None and idx.size == 0:
            return None
        approx, extra = self.approximate(q)
        ids = self.ids[:n]
        wb = self.window_best(q) if windows else None
        if idx is not None:
            approx, ids = approx[idx], ids[idx]
            wb = wb[idx] if wb is not None else None
        if wb is not None:
            approx = np.maximum(approx, wb)  # approx + bound * qn + extra still bounds every row from above
        return _Scored(ids, approx, self.bound, wb, extra)

    def clear(self) -> None:
        """Empty, keeping the arrays' room (one mirror reused for group after group of stored blocks)."""
        self.n = self.dead = self.wn = self.near_n = 0
        self.pos = _Positions(self)
        self.projects = {None: 0}
        self.wrows = {}
        self.xn = 0
        self.xrows = {}
        self.near = None
        self.vmax = 0.0


@dataclass
class _Scored:
    """Rows with their int8 cosines to a query: each exact cosine is within bound * ||q|| + extra of approx;
    wb, when there are windows, is each row's best window cosine (exact; -inf without)."""

    ids: np.ndarray
    approx: np.ndarray
    bound: float
    wb: np.ndarray | None
    extra: float

    def bounds(self, qn: float) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper): what each row's exact score can be at least and at most."""
        d = self.bound * np.float32(qn) + np.float32(self.extra)
        return self.approx - d, self.approx + d

    def take(self, keep: np.ndarray) -> _Scored:
        """These rows only (copies: the arrays no longer share a mirror's)."""
        return _Scored(self.ids[keep], self.approx[keep], self.bound,
                       self.wb[keep] if self.wb is not None else None, self.extra)

    @staticmethod
    def join(parts: list[_Scored]) -> _Scored | None:
        if not parts:
            return None
        wbs = [p.wb if p.wb is not None else np.full(len(p.ids), -np.inf, dtype=np.float32) for p in parts]
        return _Scored(np.concatenate([p.ids for p in parts]), np.concatenate([p.approx for p in parts]),
                       max(p.bound for p in parts),
                       np.concatenate(wbs) if any(p.wb is not None for p in parts) else None,
                       max(p.extra for p in parts))


class _Pruned:
    """Keeps, of scored rows seen group by group, those that could still be among the top k: a row whose
    upper bound is below the k-th best lower bound seen so far cannot (what a search over the whole mirror
    would rescore is a subset of what is kept, so the top k come out the same)."""

    def __init__(self, k: int, qn: float):
        self.k, self.qn = k, qn
        self.parts: list[_Scored] = []
        self.lows = np.zeros(0, dtype=np.float32)  # the k best lower bounds so far
        self.floor = -np.inf

    def add(self, s: _Scored | None) -> None:
        if s is None or self.k <= 0:
            return
        lower, upper = s.bounds(self.qn)
        lows = np.concatenate([self.lows, lower])
        if len(lows) > self.k:
            lows = np.partition(lows, len(lows) - self.k)[len(lows) - self.k:]
        self.lows = lows
        if len(lows) >= self.k:
            self.floor = float(lows.min())
        self.parts.append(s.take(np.flatnonzero(upper >= self.floor)))

    def merge(self, other: _Pruned) -> None:
        for s in other.parts:
            self.add(s)

    def result(self) -> _Scored | None:
        joined = _Scored.join(self.parts)
        if joined is None:
            return None
        return joined.take(np.flatnonzero(joined.bounds(self.qn)[1] >= self.floor))


def _select(s: _Scored, q: np.ndarray, k: int, exact: Callable[[list[int]], dict[int, np.ndarray]]
            ) -> list[tuple[int, float]]:
    """Exactly the top k of scored rows: the best by their int8 cosines rescored with `exact` (row id ->
    float32 vector), widened to every row whose bound says it could still be in the top k."""
    m = s.ids.size
    if m == 0 or k <= 0:
        return []
    qn = float(np.linalg.norm(q))
    approx, bound, wb, extra = s.approx, s.bound, s.wb, s.extra
    scored: dict[int, float] = {}  # position in s -> exact cosine

    def rescore(which: np.ndarray) -> None:
        fresh = [int(j) for j in which if int(j) not in scored]
        if not fresh:
            return
        vecs = exact([int(s.ids[j]) for j in fresh])
        for j in fresh:
            v = vecs.get(int(s.ids[j]))
            # a row whose vector is gone meanwhile keeps its approximate cosine (the next write reloads it)
            c = float(v @ q) if v is not None else float(approx[j])
            scored[j] = max(c, float(wb[j])) if wb is not None else c

    want = min(m, max(2 * k, k + 16))
    first = np.argpartition(approx, m - want)[m - want:] if m > want else np.arange(m)
    rescore(first)
    if len(scored) >= k:
        kth = sorted(scored.values(), reverse=True)[k - 1]
        rescore(np.flatnonzero(approx + bound * qn + extra >= kth))  # could still beat the k-th: rescored too
    local = np.fromiter(scored, dtype=np.int64, count=len(scored))
    sc = np.fromiter((scored[j] for j in local), dtype=np.float64, count=len(local))
    ids = s.ids[local]
    order = np.lexsort((ids, -sc))[:k]  # by score, ties by id: deterministic
    return [(int(ids[i]), float(sc[i])) for i in order]


def _take_vmax(m: _Mirror, head: dict) -> None:
    """m's bound of its codes' norms from the stored blocks' head (computed from the codes for a head
    written without it); rows added from the float copy have raised it already."""
    stored = head.get("vmax")
    m.vmax = max(m.vmax, float(stored) if isinstance(stored, (int, float)) else m.code_norm_max())



class VectorIndex:
    """Exact cosine search over one table (memories or chunks) with filters. With a store, the mirror is
    also kept in it (`save`), and loads from there when it can."""

    def __init__(self, table: str, dim: int, *, mirror: bool = True, store: Store | None = None):
        self.table = table
        self.dim = dim
        self.use_mirror = mirror
        self.store = store
        self._mirror: _Mirror | None = None
        self._epoch = -1
        self._lock = threading.Lock()
        self._scratch = threading.local()
        self._saved: int | None = None  # epoch the stored blocks are up to date with, as far as we know
        self._save_lock = threading.Lock()
        self._saver: threading.Thread | None = None
        self._retry_at = 0.0
        self._damaged = False
        self.last_save: dict[str, float] = {}  # blocks written, seconds, longest write transaction (s)
        self.loaded_from: str | None = None  # "stored" or "rows": how the mirror last loaded
        self.siblings: list[VectorIndex] = []  # the other tables' indexes of the same store
        self._streams = 0  # searches answered from the stored blocks as they were read (_from_blocks)
        self._loading = False  # the mirror is being loaded (a search waits for it)
        self._loader: threading.Thread | None = None  # loading the mirror in the background (preload)
        self._stopping = False  # the store is closing (stop)

    def invalidate(self) -> None:
        with self._lock:
            self._mirror = None
            self._epoch = -1

    def resident_bytes(self, *, vectors_only: bool = False) -> int:
        """What the loaded mirror holds in memory (0 when it is not loaded)."""
        m = self._mirror
        return m.resident_bytes(vectors_only=vectors_only) if m is not None else 0

    def _load(self, con: Connection) -> tuple[_Mirror, int]:
        """The mirror and the epoch it is up to date with: from the stored blocks when they can be
        caught up, else from every row."""
        try:
            stored = self._load_stored(con)
        except ProgrammingError:  # the store was closed meanwhile (a load in the background): not damage
            raise
        except (ValueError, DatabaseError, EngineError) as e:  # a damaged block: the rows are the truth
            log.warning("the stored vector mirror of %s could not be read (%s); loading from the rows",
                        self.table, type(e).__name__)
            stored = None
            self._damaged = True  # the next save writes every block
            self._saved = None
        if stored is not None:
            self.loaded_from = "stored"
            return stored
        epoch = read_epoch(con)
        m = _Mirror(self.dim)
        cur = con.execute(_SOURCES[self.table])
        while rows := cur.fetchmany(LOAD_ROWS):
            if self._stopping:
                raise Stopped
            m.add(rows)
        if self.table == "memories":
            m.add_windows(read_windows(con))
        log.info("vector mirror %s loaded: %d rows, %d windows", self.table, m.n, m.wn)
        self.loaded_from = "rows"
        return m, epoch

    def _fits(self, head: dict | None) -> TypeGuard[dict]:
        """Whether stored blocks with this head are of this index's dimension and codes' scale."""
        return head is not None and head["dim"] == self.dim and head.get("scale") == code_scale(self.dim)

    def _stored_state(self, con: Connection) -> tuple[dict, int, set[int]] | None:
        """(head, epoch, rows changed since the blocks were written) when the stored blocks can be caught up
        to this snapshot; None when there are none, they are for another dimension, or older than the log."""
        if not has_stored_mirror(con):
            return None
        head = read_head(con, self.table)
        if not self._fits(head):
            return None
        epoch = read_epoch(con)
        changed = changes_since(con, self.table, head["epoch"], epoch)
        if changed is None:
            return None
        return head, epoch, changed

    def _read_blocks(self, con: Connection, m: _Mirror, *, first: int | None = None, stop: int | None = None,
                     group: int | None = None) -> Iterator[int]:
        """Add the stored blocks (from block `first`, before block `stop`) to m in block order, erased ones
        from their rows; with `group`, m is handed back (yielded) every time it holds that many rows and
        emptied after, else once at the end. Yields how many erased blocks were read so far."""
        code = TABLE_CODES[self.table]
        key = "m.id" if self.table == "memories" else "c.id"
        by_range = _SOURCES[self.table] + f" WHERE {key} >= ? AND {key} < ? ORDER BY {key}"
        sql = "SELECT block, rows, projects, meta, codes FROM vector_mirror WHERE tbl = ?"
        args: list[int] = [code]
        if first is not None:
            sql, args = sql + " AND block >= ?", [*args, first]
        if stop is not None:
            sql, args = sql + " AND block < ?", [*args, stop]
        cache = con.execute("PRAGMA cache_size").fetchone()[0]
        con.execute(f"PRAGMA cache_size = -{READ_CACHE_KIB}")  # read once: not worth keeping in the cache
        erased = 0
        try:
            for block, rows, projects, meta, codes in con.execute(sql + " ORDER BY block", args):
                if self._stopping:
                    raise Stopped
                if meta is None or codes is None:  # erased by a deleted vector: its rows are the truth
                    erased += 1
                    lo = block * STORED_IDS
                    m.add(con.execute(by_range, (lo, lo + STORED_IDS)).fetchall(), fresh=True)
                else:
                    exceptions = m.add_stored(block, rows, json.loads(projects), meta, codes)
                    if len(exceptions):  # few: their float32 vectors from the copy
                        want = [int(i) for i in m.ids[exceptions]]
                        vecs = read_vectors(con, self.table, want)
                        if len(vecs) != len(want):
                            raise ValueError("stored mirror block with an exception that has no vector")
                        m.add_exceptions(exceptions, np.stack([vecs[i] for i in want]))
                if group is not None and m.n >= group:
                    yield erased
                    m.clear()
        finally:
            con.execute(f"PRAGMA cache_size = {int(cache)}")
        yield erased

    def _load_stored(self, con: Connection) -> tuple[_Mirror, int] | None:
        """The mirror from its stored blocks (erased blocks read from their rows), caught up from the vector
        log; None when there are none, they are for another dimension, or older than the log reaches."""
        state = self._stored_state(con)
        if state is None:
            return None
        head, epoch, changed = state
        blocks, _, rows = stored_counts(con, self.table)
        m = _Mirror(self.dim)
        m._grow(rows, exact=True)
        *_, erased = self._read_blocks(con, m)  # the count of erased blocks, as of the last
        _take_vmax(m, head)
        if self.table == "memories":
            m.add_windows(read_windows(con))
        if not self._apply_to(con, m, changed):
            return None
        self._saved = head["epoch"] if not erased else None
        log.info("vector mirror %s loaded from %d stored blocks (%d erased): %d rows, %d changed since",
                 self.table, blocks, erased, m.n, len(changed))
        return m, epoch

    # -- searching the stored blocks as they are read (no mirror loaded yet) ------------------------------

    def _streamed(self, con: Connection, each: Callable[[Connection, _Mirror], Any], *,
                  windows: bool) -> list[Any] | None:
        """`each(con, group)` for group after group of the current rows (STREAM_ROWS at a time, from the stored
        blocks, with rows changed since read from the float copy), on this thread and a helper reading the
        second half of the blocks (its own connection, as the mirror's loading does); None when the stored
        blocks cannot serve (what `_stored_state` says). Holds nothing but one group in memory at a time:
        no mirror of hundreds of MB to map and fill before the first search can answer."""
        state = self._stored_state(con)
        if state is None:
            return None
        head, epoch, changed = state
        code = TABLE_CODES[self.table]
        count, erased, _ = stored_counts(con, self.table)
        if epoch - head["epoch"] >= REFRESH_EPOCHS or len(changed) > STREAM_MAX_CHANGED or erased > STREAM_MAX_ERASED:
            return None  # the blocks are due to be written again: loading the mirror does that (then saves)
        mid = None
        if count >= STREAM_SPLIT_BLOCKS:
            mid = con.execute("SELECT block FROM vector_mirror WHERE tbl = ? ORDER BY block LIMIT 1 OFFSET ?",
                              (code, count // 2)).fetchone()[0]
        gone = np.array(sorted(changed), dtype=np.int64)
        wins = read_windows(con) if windows and self.table == "memories" else {}
        owners = np.array(sorted(wins), dtype=np.int64)

        def run(c: Connection, first: int | None, stop: int | None) -> list[Any]:
            out = []
            m = _Mirror(self.dim)
            for _ in self._read_blocks(c, m, first=first, stop=stop, group=STREAM_ROWS):
                if m.n == 0:
                    continue
                _take_vmax(m, head)
                ids = m.ids[: m.n]
                if len(gone):  # changed since the blocks were written: read from the rows after the blocks
                    stale = np.flatnonzero(np.isin(ids, gone))
                    m.alive[stale] = False
                    m.dead += len(stale)
                if len(owners):  # the group's rows are in id order
                    sel = owners[np.searchsorted(owners, ids[0]):np.searchsorted(owners, ids[-1], "right")]
                    m.add_windows({int(r): wins[int(r)] for r in sel})
                out.append(each(c, m))
            return out

        def helper() -> None:
            c = self._connect()  # its own: nothing else closes it under the read
            try:
                c.execute("BEGIN")
                result.extend(run(c, mid, None))
            except BaseException as e:  # raised again on the searching thread
                failed.append(e)
            finally:
                c.close()

        result: list[Any] = []
        failed: list[BaseException] = []
        other = None
        if mid is not None:
            other = threading.Thread(target=helper, name=f"mirror-scan-{self.table}", daemon=True)
            other.start()
        try:
            mine = run(con, None, mid)
        finally:
            if other is not None:
                other.join()
        if failed:
            raise failed[0]
        if changed:
            m = _Mirror(self.dim)
            self._apply_to(con, m, changed)
            if m.n:
                mine.append(each(con, m))
        return mine + result

    def _try_streamed(self, con: Connection, each: Callable[[Connection, _Mirror], Any], *,
                      windows: bool) -> list[Any] | None:
        """`_streamed`, or None when a stored block does not add up (the load that follows reads the rows
        instead, says so, and writes every block again)."""
        try:
            return self._streamed(con, each, windows=windows)
        except ProgrammingError:  # the store closed under it
            raise
        except (ValueError, DatabaseError, EngineError):
            return None

    def _search_streamed(self, con: Connection, q: np.ndarray, k: int, f: Filter,
                         windows: bool) -> list[tuple[int, float]] | None:
        qn = float(np.linalg.norm(q))

        def each(_c: Connection, m: _Mirror) -> _Pruned:
            kept = _Pruned(k, qn)
            kept.add(m.scored(q, f, windows))
            return kept

        parts = self._try_streamed(con, each, windows=windows)
        if parts is None:
            return None
        kept = _Pruned(k, qn)
        for part in parts:
            kept.merge(part)
        s = kept.result()
        return _select(s, q, k, lambda ids: read_vectors(con, self.table, ids)) if s is not None else []

    def _near_streamed(self, con: Connection, q: np.ndarray, threshold: float,
                       f: Filter) -> list[tuple[int, float]] | None:
        parts = self._try_streamed(
            con, lambda c, m: m.near_rows(q, threshold, f, lambda ids: read_vectors(c, self.table, ids)), windows=False)
        if parts is None:
            return None
        return sorted((hit for part in parts for hit in part), key=lambda x: (-x[1], x[0]))

    def _from_blocks(self, answer: Callable[[], list[tuple[int, float]] | None]) -> list[tuple[int, float]] | None:
        """`answer()` (a search of the stored blocks as they are read) when this is the process's first search
        of this table with no mirror loaded or loading (a CLI command searches once: it never loads the
        mirror); None otherwise, or when the blocks cannot serve: the search then loads the mirror for the
        searches after, as a search always did."""
        if self.store is None or self._mirror is not None or self._streams or self._loading:
            return None
        hits = answer()
        if hits is not None:
            self._streams += 1
        return hits

    def after_write(self, con: Connection, epoch_before: int, epoch_after: int, ids: set[int],
                    deleted: AbstractSet[int] = frozenset()) -> None:
        """Apply this process's committed write to the mirror, or catch up if another process wrote too;
        `deleted`: those of `ids` the write deleted (dropped without reading them back)."""
        with self._lock:
            if self._mirror is None:
                return
            if self._epoch != epoch_before and not self._catch_up(con, epoch_before):
                self._mirror = None
                return
            self._apply(con, ids, deleted)
            self._epoch = epoch_after
        self._save_if_due()

    def _catch_up(self, con: Connection, epoch: int) -> bool:
        """Apply other processes' writes up to `epoch` from the vector log; False when the log does not
        cover them all (a full reload is needed). Call holding self._lock."""
        if self._mirror is None:
            return False
        if epoch == self._epoch:
            return True
        changed = changes_since(con, self.table, self._epoch, epoch)
        if changed is None:
            return False
        self._apply(con, changed)
        if self._mirror is None:  # compacted: reload
            return False
        self._epoch = epoch
        return True

    def _apply(self, con: Connection, ids: set[int], deleted: AbstractSet[int] = frozenset()) -> None:
        assert self._mirror is not None
        if not self._apply_to(con, self._mirror, ids, deleted):
            self._mirror = None  # compact by reloading on next search

    def _apply_to(self, con: Connection, m: _Mirror, ids: set[int], deleted: AbstractSet[int] = frozenset()) -> bool:
        """Re-read these rows into m (gone ones removed; those in `deleted` are removed without a read);
        False when m holds so many removed rows that it should be loaded again (compacted)."""
        for rid in deleted:
            m.remove(rid)
        live = ids - deleted  # none of them when the write only deleted: nothing is read
        id_list = sorted(live)
        found: list[tuple] = []
        key = "m.id" if self.table == "memories" else "c.id"
        for i in range(0, len(id_list), 500):
            part = id_list[i : i + 500]
            q = _SOURCES[self.table] + f" WHERE {key} IN ({marks(part)})"
            found.extend(con.execute(q, padded(part)).fetchall())
        present = {r[0] for r in found}
        for rid in live - present:
            m.remove(rid)
        m.add(found)
        if self.table == "memories" and present:
            m.add_windows(read_windows(con, sorted(present)))
        return not (m.dead > 1024 and m.dead > (m.n + m.wn) // 4)

    def _current(self, con: Connection) -> _Mirror | None:
        """The mirror, if it is loaded and up to date (caught up with other processes' writes); call
        holding self._lock."""
        m = self._mirror
        if m is None:
            return None
        epoch = read_epoch(con)
        if epoch <= self._epoch:  # up to date, or ahead of a reader whose transaction began before a write
            return m
        return self._mirror if self._catch_up(con, epoch) else None

    def _view(self, con: Connection) -> _Mirror:
        """A consistent view of the up-to-date mirror (loaded first if need be) that a search can read
        without the lock: rows are only appended or tombstoned, so the first n rows of a view stay valid."""
        loaded = False
        with self._lock:
            m = self._current(con)
            if m is None:
                self._load_siblings()
                self._loading = True
                try:
                    m, self._epoch = self._load(con)
                finally:
                    self._loading = False
                self._mirror = m
                loaded = True
            view = copy.copy(m)
        buf = getattr(self._scratch, "buf", None)
        if buf is None:
            buf = self._scratch.buf = np.zeros((BLOCK_ROWS, self.dim), dtype=np.float32)
        view._buf = buf  # each thread its own scratch block
        if loaded:
            self._save_if_due()
        return view

    def preload(self) -> None:
        """Start loading the mirror on a thread (and connection) of its own, when it is kept in the store and
        not loaded or loading: a search of another table that loads its mirror starts this one's beside it
        (`_load_siblings`: reading the blocks is decryption, which the other core can do meanwhile)."""
        store = self.store
        if store is None or not self.use_mirror or self._mirror is not None or self._lock.locked():
            return
        con = store.con
        if not has_stored_mirror(con) or read_head(con, self.table) is None:
            return  # a small store (or one not stored yet) loads when searched

        def run() -> None:
            con = self._connect()  # its own: closing the store does not close it under the load
            try:
                self._view(con)
            except Stopped:
                pass
            except Exception:  # the search that needs it loads it (and says why it cannot)
                log.info("loading the %s vector mirror ahead failed", self.table, exc_info=True)
            finally:
                con.close()

        self._loader = threading.Thread(target=run, name=f"mirror-{self.table}", daemon=True)
        self._loader.start()

    def _connect(self) -> Connection:
        """A connection of this index's own to the store (a thread that reads in the background)."""
        assert self.store is not None
        return self.store.connect()

    def stop(self, timeout: float = 5.0) -> None:
        """The store is closing: a load in the background stops at its next block and is waited for, and a
        save under way is finished first (its transactions run on the store's writer, which closes next;
        each is short, a whole save of 1M rows took 4-7 s, and the blocks it leaves make the next open fast)."""
        self._stopping = True
        loader = self._loader
        if loader is not None and loader is not threading.current_thread():
            loader.join(timeout)
        saver = self._saver
        if saver is not None and saver is not threading.current_thread():
            saver.join(SAVE_WAIT_SECONDS)

    def _load_siblings(self) -> None:
        """The other tables' stored mirrors start loading beside this one (a recall searches both)."""
        for other in self.siblings:
            other.preload()

    # -- the mirror kept in the store ------------------------------------------------------------------

    def _save_if_due(self) -> None:
        """Start writing the mirror into the store in the background when it is big enough and what is
        stored is missing or REFRESH_EPOCHS writes behind."""
        m = self._mirror
        if self.store is None or m is None or m.n - m.dead < STORED_MIN_ROWS or self._stopping:
            return
        if self._saved is not None and self._epoch - self._saved < REFRESH_EPOCHS:
            return
        if time.monotonic() < self._retry_at or (self._saver is not None and self._saver.is_alive()):
            return

        def run() -> None:
            try:
                if not self.save():
                    self._retry_at = time.monotonic() + RETRY_SECONDS
            except Exception:
                self._retry_at = time.monotonic() + RETRY_SECONDS
                log.exception("writing the vector mirror of %s into the store failed", self.table)

        # not a daemon: a short-lived process (a CLI command) finishes the save before it exits, so the
        # next one loads from the blocks (each step is a short transaction of its own)
        self._saver = threading.Thread(target=run, name=f"mirror-save-{self.table}", daemon=False)
        self._saver.start()

    def wait_saved(self, timeout: float | None = None) -> None:
        """Wait for a background save to end (benchmarks, tests)."""
        saver = self._saver
        if saver is not None:
            saver.join(timeout)

    def save(self) -> bool:
        """Write the loaded mirror into the store: the blocks whose rows changed since it was last written
        (or every block, when nothing usable is stored), SAVE_BLOCKS blocks a transaction on a connection of
        its own, so a user's write waits at most one of those. Each block is written from the mirror as it
        is at that transaction (checked against the store's vector epoch, under the write lock); the last
        transaction rewrites what changed meanwhile and records the epoch every block is now up to date
        with. A crash leaves the previous state, which stays usable. False when it could not be done now
        (no mirror, no store, another program writing)."""
        store = self.store
        if store is None or not self.use_mirror:
            return False
        with self._save_lock:
            con = store.connect()
            try:
                maintenance.busy_timeout(con, SAVE_BUSY_MS)
                return self._save(con, store)
            except EngineError as e:  # busy, full, read-only: the next write tries again
                log.info("vector mirror of %s not stored now: %s", self.table, type(e).__name__)
                return False
            finally:
                con.close()

    def _save(self, con: Connection, store: Store) -> bool:
        if not has_stored_mirror(con):
            return False
        code = TABLE_CODES[self.table]
        with self._lock:
            m = self._current(con)
            if m is None:
                return False
            start = self._epoch
            index = (m, m.by_id())
            now_blocks = set(np.unique(index[1][2]).tolist())
        head = read_head(con, self.table)
        damaged = self._damaged  # a block failed to load: every block is written again
        changed = changes_since(con, self.table, head["epoch"], start) if self._fits(head) and not damaged else None
        if changed is None:  # nothing usable stored: every block
            todo = now_blocks
        else:
            erased = erased_blocks(con, self.table)
            todo = {i // STORED_IDS for i in changed} | erased
        order = sorted(todo)
        written, longest, began = 0, 0.0, time.perf_counter()
        while True:
            step, order = order[:SAVE_BLOCKS], order[SAVE_BLOCKS:]
            last = not order
            t0 = time.perf_counter()
            # on the writer, so its page cache survives (another connection's commit would empty it)
            with store.write(busy_ms=SAVE_BUSY_MS) as w:
                epoch = read_epoch(w)
                packed, gone = self._pack_current(w, step, start if last else None, epoch, index)
                if packed is None or gone is None:
                    return False  # nothing written in this transaction yet
                for block, rows, projects, meta, codes in packed:
                    w.execute("INSERT OR REPLACE INTO vector_mirror(tbl, block, epoch, rows, projects, meta, "
                              "codes) VALUES (?, ?, ?, ?, ?, ?, ?)",
                              (code, block, epoch, rows, projects, meta, codes))
                written += len(packed)
                if last:
                    w.executemany("DELETE FROM vector_mirror WHERE tbl = ? AND block = ?",
                                  [(code, b) for b in gone])
                    state_rows.put(w, HEAD_KEY + self.table, json.dumps(
                        {"format": STORED_FORMAT, "dim": self.dim, "ids": STORED_IDS, "scale": m.scale,
                         "vmax": m.vmax, "epoch": epoch}))
            longest = max(longest, time.perf_counter() - t0)
            if last:
                break
        self._saved, self._damaged = epoch, False
        self.last_save = {"blocks": written, "seconds": time.perf_counter() - began, "longest_write": longest}
        log.info("vector mirror %s stored: %d blocks written, up to date with epoch %d", self.table, written, epoch)
        return True

    def _pack_current(self, con: Connection, blocks: list[int], since: int | None, epoch: int,
                      index: tuple[_Mirror, tuple]) -> tuple[list[tuple], list[int]] | tuple[None, None]:
        """Inside the save's write transaction (nothing else can commit): the packed blocks from the mirror
        caught up to `epoch`, and, for the last step (since = the epoch the save started at), also the
        blocks of rows changed meanwhile, and the stored blocks that hold no row any more."""
        if not self._lock.acquire(timeout=0.5):  # a search is loading the mirror: another time
            return None, None
        try:
            m = self._current(con)
            if m is None or self._epoch != epoch:
                return None, None
            gone: list[int] = []
            if since is not None:
                meanwhile = changes_since(con, self.table, since, epoch)
                if meanwhile is None:
                    return None, None
                blocks = sorted(set(blocks) | {i // STORED_IDS for i in meanwhile})
            names = {c: p for p, c in m.projects.items()}
            positions = m.block_positions(blocks, index[1] if index[0] is m else None)
            code = TABLE_CODES[self.table]
            # belt and braces (the mirror follows deletes, this does not depend on it): a block whose vector
            # changed, or with rows whose vectors went, is written with only the rows whose vector is there
            erased = erased_blocks(con, self.table)
            for b in erased & set(blocks):
                lo = b * STORED_IDS
                there = np.array([r[0] for r in con.execute(
                    f"SELECT id FROM vec_{self.table}_f32 WHERE id >= ? AND id < ?", (lo, lo + STORED_IDS))],
                    dtype=np.int64)
                p = positions[b]
                positions[b] = p[np.isin(m.ids[p], there)]
            for b, went in gone_rows(con, self.table, sorted(set(blocks) - erased)).items():
                p = positions[b]
                positions[b] = p[~np.isin(m.ids[p], went)]
            packed = [(b, *m.pack(positions[b], names)) for b in blocks if len(positions[b])]
            empty = [b for b in blocks if not len(positions[b])]
            if since is not None:
                live = np.flatnonzero(m.alive[: m.n])
                now_blocks = set(np.unique(m.ids[live] // STORED_IDS).tolist())
                stored = {r[0] for r in con.execute("SELECT block FROM vector_mirror WHERE tbl = ?",
                                                    (TABLE_CODES[self.table],))}
                gone = sorted((stored | set(empty)) - now_blocks)
            else:
                gone = []
        finally:
            self._lock.release()
        if since is None and empty:
            # blocks left without rows are deleted now (their old content must not stay)
            con.executemany("DELETE FROM vector_mirror WHERE tbl = ? AND block = ?", [(code, b) for b in empty])
        return packed, gone

    def warm(self, con: Connection) -> None:
        """Load the mirror now (in the background after a store opens), so the first search finds it; for
        memories, then build the near-duplicate buckets (in a thread of their own)."""
        if self.use_mirror:
            self._view(con)
            if self.table == "memories":  # and the near-duplicate buckets, so remember does not scan
                self._start_near()

    def cosines(self, con: Connection, ids: list[int], q: np.ndarray) -> dict[int, float]:
        """Exact cosine to q for these rows (those without a vector are left out), from the float copy; a
        memory with windows gets the best of its own and its windows'."""
        return self.cosines_later(con, ids)(q)

    def cosines_later(self, con: Connection, ids: list[int]) -> Callable[[np.ndarray], dict[int, float]]:
        """`cosines` in two steps: the rows' vectors are read now, their cosines computed once q is known."""
        vecs = read_vectors(con, self.table, ids)
        windows = read_windows(con, list(vecs)) if vecs and self.table == "memories" else {}

        def to(q: np.ndarray) -> dict[int, float]:
            q = np.asarray(q, dtype=np.float32)
            return {rid: with_windows(float(v @ q), windows.get(rid), q) for rid, v in vecs.items()}

        return to

    def best_window(self, con: Connection, rid: int, q: np.ndarray) -> tuple[int, int] | None:
        """(start, end) in memory rid's text of its window that matches q better than the whole text, if any."""
        q = np.asarray(q, dtype=np.float32)
        whole = read_vectors(con, self.table, [rid]).get(rid)
        if whole is None:
            return None
        wins = read_windows(con, [rid]).get(rid)
        if wins is None or len(wins) == 0:
            return None
        scores = wins @ q
        best = int(np.argmax(scores))
        if float(scores[best]) <= float(whole @ q):
            return None
        span = con.execute("SELECT start, end FROM memory_windows WHERE memory_id = ? ORDER BY id LIMIT 1 OFFSET ?",
                           (rid, best)).fetchone()
        return (int(span[0]), int(span[1])) if span else None

    def near(self, con: Connection, q: np.ndarray, threshold: float, f: Filter) -> list[tuple[int, float]]:
        """[(row id, cosine)] of the rows at least `threshold` close to q, whole texts only, best first: the
        near-duplicate check. With the mirror, through its buckets (engine/lsh.py: a few hundred rows read
        instead of all, once built; the first check starts building them in the background)."""
        q = np.asarray(q, dtype=np.float32)
        if not self.use_mirror or self.table != "memories":
            return [(i, c) for i, c in self.search(con, q, 2, f, windows=False) if c >= threshold]
        if (hits := self._from_blocks(lambda: self._near_streamed(con, q, threshold, f))) is not None:
            return hits
        view = self._view(con)
        if view.near is None:
            self._start_near()
        return view.near_rows(q, threshold, f, lambda ids: read_vectors(con, self.table, ids))

    def near_complete(self) -> bool:
        """Whether the near-duplicate buckets cover every row of the loaded mirror (benchmarks, tests)."""
        m = self._mirror
        return m is not None and m.near is not None and m.near_n >= m.n

    def _start_near(self) -> None:
        with self._lock:
            m = self._mirror
            if m is None or m.near is not None:
                return
            m.near = lsh.Buckets()
        threading.Thread(target=self._build_near, args=(m,), name="near-duplicate-buckets", daemon=True).start()

    def _build_near(self, m: _Mirror) -> None:
        """Give every row of mirror m its keys, NEAR_STEP rows at a time. The keys are computed outside the
        lock (rows below n never change: a mirror only appends and tombstones), which is held only to read
        where the build is and to store a step's keys: a search or a write waits for a copy, not for the
        arithmetic. Holding it through each step starved them: the build took it back before a waiting
        thread woke, so the first recall after the mirror loaded waited for the whole build (0.4-0.9 s at
        1M memories and chunks, docs/performance.md)."""
        planes = lsh.hyperplanes(self.dim)
        try:
            while True:
                with self._lock:
                    if self._mirror is not m or m.near is None or m.near_n >= m.n:
                        return
                    s, e = m.near_n, min(m.n, m.near_n + NEAR_STEP)
                    codes = m.codes[s:e]  # a view: a later _grow copies the array, this one stays as it is
                # the codes' signs are the vectors' (scale > 0): keys from the int8 rows
                keys = lsh.keys(codes.astype(np.float32), planes)
                with self._lock:
                    if self._mirror is m and m.near is not None and m.near_n == s:
                        m.near.set(s, keys)
                        m.near_n = e
        except Exception:  # the buckets only speed the check up: without them it scans
            log.exception("near-duplicate buckets could not be built")

    def search(self, con: Connection, q: np.ndarray, k: int, f: Filter, *,
               windows: bool = True) -> list[tuple[int, float]]:
        """[(row id, cosine)] best first, exactly the top k under the filter. windows=False compares whole
        texts only (duplicates, contradictions: a passage of a long note is not the note)."""
        if not self.use_mirror:
            return self._search_vec0(con, q, k, f, windows)
        q = np.asarray(q, dtype=np.float32)
        if (hits := self._from_blocks(lambda: self._search_streamed(con, q, k, f, windows))) is not None:
            return hits
        view = self._view(con)
        return view.search(q, k, f,
                           lambda ids: read_vectors(con, self.table, ids), windows)

    def _search_vec0(self, con: Connection, q: np.ndarray, k: int, f: Filter,
                     windows: bool = True) -> list[tuple[int, float]]:
        """vec0's own KNN, widened until k rows pass the filter (slower). Exact for rows without windows;
        a memory with windows is a candidate when its whole-text vector or one of its windows is near."""
        total = con.execute(f"SELECT count(*) FROM vec_{self.table}").fetchone()[0]
        blob = np.asarray(q, dtype=np.float32).tobytes()
        want = k
        while True:
            want = min(max(want, k), total)
            if want == 0:
                return []
            rows = con.execute(
                f"SELECT rowid, distance FROM vec_{self.table} WHERE embedding MATCH ? AND k = ? ORDER BY distance",
                (blob, want),
            ).fetchall()
            ids = [r[0] for r in rows]
            if self.table == "memories" and windows:
                near = [r[0] for r in con.execute(
                    "SELECT w.memory_id FROM (SELECT rowid, distance FROM vec_memory_windows WHERE embedding MATCH ? "
                    "AND k = ?) v JOIN memory_windows w ON w.id = v.rowid ORDER BY v.distance", (blob, want)
                ).fetchall()]
                ids += [i for i in dict.fromkeys(near) if i not in set(ids)]
            m = _Mirror(self.dim)
            meta = {}
            key = "m.id" if self.table == "memories" else "c.id"
            for i in range(0, len(ids), 500):
                part = ids[i : i + 500]
                sql = _SOURCES[self.table] + f" WHERE {key} IN ({marks(part)})"
                for r in con.execute(sql, padded(part)).fetchall():
                    meta[r[0]] = r
            m.add([meta[i] for i in ids if i in meta])
            if self.table == "memories" and windows:
                m.add_windows(read_windows(con, [i for i in ids if i in meta]))
            hits = m.search(np.asarray(q, dtype=np.float32), k, f,
                            lambda found: read_vectors(con, self.table, found), windows)
            if len(hits) >= k or want >= total:
                return hits
            want *= 4
