"""Vectors: stored in sqlite-vec `vec0` tables inside the encrypted file, searched exactly.

The vec0 table is the durable copy (a derived index: it can always be rebuilt from the rows). Search runs
over an in-process mirror of those vectors (a float32 matrix plus the few columns filters need), because
a brute-force scan in numpy is ~8x faster than vec0's over the encrypted pages and gives the same, exact
answer. The mirror follows writes made in this process row by row, and reloads when the store's vector
epoch shows another process wrote. With the mirror off (settings.vector_cache = false) vec0 answers
directly.

A memory longer than the model's window also has **window vectors** (overlapping passages of it, see
`embeddings.Embedder.encode_windows`) in `vec_memory_windows`, owned through `memory_windows`. Its cosine
to a query is then the best of its whole-text cosine and its windows': the whole text's vector only sees
the first 256 word-pieces and blurs several topics into one, a window finds the part that matches (as a
document's best chunk does).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import numpy as np

from .db import Connection
from .embeddings import Windows

log = logging.getLogger(__name__)

KIND_CODES = {"fact": 0, "episodic": 1, "procedural": 2, "chunk": 3, "activity": 4}
# The app's own events ("Ingested X"): episodic memories with this source, kept out of content searches.
ACTIVITY_SOURCE = "activity"
EPOCH_KEY = "vector_epoch"

# table -> how to read its filter columns next to the vectors
_SOURCES = {
    "memories": (
        "SELECT m.id, CASE WHEN m.source = 'activity' THEN 'activity' ELSE m.kind END, m.project, m.archived, "
        "coalesce(m.event_at, m.created_at), v.embedding "
        "FROM vec_memories v JOIN memories m ON m.id = v.rowid"
    ),
    "chunks": (
        "SELECT c.id, 'chunk', d.project, 0, d.created_at, v.embedding "
        "FROM vec_chunks v JOIN chunks c ON c.id = v.rowid JOIN documents d ON d.id = c.document_id AND d.status = 'ready'"
    ),
}


# memory windows: (owner memory id, vector), by owner
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


def create_tables(con: Connection, dim: int) -> None:
    """vec0 tables for memories, their windows and chunks, and triggers so a deleted row never keeps a
    vector. All of it is a derived index: dropped and rebuilt from the rows when the embedding space changes."""
    for table in ("memories", "memory_windows", "chunks"):
        con.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS vec_{table} USING vec0(embedding float[{dim}] distance_metric=cosine)"
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
    con.execute(
        "CREATE TRIGGER IF NOT EXISTS memories_windows_ad AFTER DELETE ON memories BEGIN "
        "DELETE FROM vec_memory_windows WHERE rowid IN (SELECT id FROM memory_windows WHERE memory_id = old.id); "
        "DELETE FROM memory_windows WHERE memory_id = old.id; END"
    )


def drop_tables(con: Connection) -> None:
    con.execute("DROP TRIGGER IF EXISTS memories_windows_ad")
    for table in ("memories", "chunks"):
        con.execute(f"DROP TRIGGER IF EXISTS {table}_vec_ad")
    for table in ("memories", "memory_windows", "chunks"):
        con.execute(f"DROP TABLE IF EXISTS vec_{table}")
    con.execute("DROP TABLE IF EXISTS memory_windows")


def put(con: Connection, table: str, ids: list[int], vecs: np.ndarray,
        windows: list[Windows | None] | None = None) -> None:
    """Store (replace) the vectors of these rows; for memories, also their window vectors (None: none)."""
    delete(con, table, ids)
    con.executemany(
        f"INSERT INTO vec_{table}(rowid, embedding) VALUES (?, ?)",
        [(i, np.asarray(v, dtype=np.float32).tobytes()) for i, v in zip(ids, vecs, strict=True)],
    )
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
    if table == "memories" and has_windows(con):
        con.executemany(
            "DELETE FROM vec_memory_windows WHERE rowid IN (SELECT id FROM memory_windows WHERE memory_id = ?)",
            [(i,) for i in ids],
        )
        con.executemany("DELETE FROM memory_windows WHERE memory_id = ?", [(i,) for i in ids])


def read_windows(con: Connection, ids: list[int] | None = None) -> dict[int, np.ndarray]:
    """Window vectors of these memories (None: of all), only those that have any: id -> (n, dim) matrix."""
    out: dict[int, list[np.ndarray]] = {}
    parts = [None] if ids is None else [ids[p : p + 500] for p in range(0, len(ids), 500)]
    for part in parts:
        where = "" if part is None else f" WHERE w.memory_id IN ({','.join('?' * len(part))})"
        for rid, blob in con.execute(_WINDOWS + where + " ORDER BY w.memory_id, w.id", part or ()).fetchall():
            out.setdefault(rid, []).append(np.frombuffer(blob, dtype=np.float32))
    return {rid: np.stack(v) for rid, v in out.items()}


def with_windows(cosine: float, windows: np.ndarray | None, q: np.ndarray) -> float:
    """A memory's cosine to q: the best of its whole-text cosine and its windows'."""
    if windows is None or len(windows) == 0:
        return cosine
    return max(cosine, float((windows @ q).max()))


@dataclass
class Filter:
    """What a search may return. `projects`: None = any project; else these (None inside = unscoped)."""

    projects: set[str | None] | None = None
    kinds: set[str] | None = None
    include_archived: bool = False
    since: float | None = None
    until: float | None = None
    activity: bool = False  # also the app's own events (ACTIVITY_SOURCE), as episodic memories


class _Mirror:
    """A growable float32 matrix of one table's vectors plus filter columns; deleted rows are tombstoned."""

    def __init__(self, dim: int):
        self.dim = dim
        self.n = 0
        self.ids = np.zeros(0, dtype=np.int64)
        self.mat = np.zeros((0, dim), dtype=np.float32)
        self.kind = np.zeros(0, dtype=np.int8)
        self.proj = np.zeros(0, dtype=np.int32)  # code into self.projects; 0 = no project
        self.archived = np.zeros(0, dtype=bool)
        self.t = np.zeros(0, dtype=np.float64)
        self.alive = np.zeros(0, dtype=bool)
        self.pos: dict[int, int] = {}
        self.projects: dict[str | None, int] = {None: 0}
        self.dead = 0
        # window vectors of long memories: row i of wmat belongs to the row at position wpos[i]
        self.wn = 0
        self.wmat = np.zeros((0, dim), dtype=np.float32)
        self.wpos = np.zeros(0, dtype=np.int64)
        self.walive = np.zeros(0, dtype=bool)
        self.wrows: dict[int, list[int]] = {}  # owner id -> its rows in wmat

    def _grow(self, need: int) -> None:
        cap = len(self.ids)
        if self.n + need <= cap:
            return
        new = max(1024, cap * 2, self.n + need)
        for name in ("ids", "kind", "proj", "archived", "t", "alive"):
            old = getattr(self, name)
            arr = np.zeros(new, dtype=old.dtype)
            arr[: self.n] = old[: self.n]
            setattr(self, name, arr)
        mat = np.zeros((new, self.dim), dtype=np.float32)
        mat[: self.n] = self.mat[: self.n]
        self.mat = mat

    def remove(self, rid: int) -> None:
        p = self.pos.pop(rid, None)
        if p is not None:
            self.alive[p] = False
            self.dead += 1
        rows = self.wrows.pop(rid, None)
        if rows:
            self.walive[rows] = False
            self.dead += len(rows)

    def add_windows(self, windows: dict[int, np.ndarray]) -> None:
        """Window vectors for rows already added (add() drops a row's old windows)."""
        for rid, mat in windows.items():
            p = self.pos.get(rid)
            if p is None or len(mat) == 0:
                continue
            need = self.wn + len(mat)
            if need > len(self.wpos):
                new = max(256, 2 * len(self.wpos), need)
                wmat = np.zeros((new, self.dim), dtype=np.float32)
                wmat[: self.wn] = self.wmat[: self.wn]
                wpos = np.zeros(new, dtype=np.int64)
                wpos[: self.wn] = self.wpos[: self.wn]
                walive = np.zeros(new, dtype=bool)
                walive[: self.wn] = self.walive[: self.wn]
                self.wmat, self.wpos, self.walive = wmat, wpos, walive
            rows = list(range(self.wn, need))
            self.wmat[rows] = mat
            self.wpos[rows] = p
            self.walive[rows] = True
            self.wrows[rid] = rows
            self.wn = need

    def scores(self, q: np.ndarray, windows: bool = True) -> np.ndarray:
        """Cosine of every row to q; a row with windows gets the best of its own and its windows'."""
        scores = self.mat[: self.n] @ q
        if windows and self.wrows:
            live = np.flatnonzero(self.walive[: self.wn])
            np.maximum.at(scores, self.wpos[live], self.wmat[live] @ q)
        return scores

    def add(self, rows: list[tuple]) -> None:
        for r in rows:
            self.remove(r[0])
        self._grow(len(rows))
        for rid, kind, project, archived, t, blob in rows:
            p = self.n
            self.ids[p] = rid
            self.mat[p] = np.frombuffer(blob, dtype=np.float32)
            self.kind[p] = KIND_CODES[kind]
            self.proj[p] = self.projects.setdefault(project, len(self.projects))
            self.archived[p] = bool(archived)
            self.t[p] = t or 0.0
            self.alive[p] = True
            self.pos[rid] = p
            self.n += 1

    def search(self, q: np.ndarray, k: int, f: Filter, windows: bool = True) -> list[tuple[int, float]]:
        n = self.n
        if n == 0 or k <= 0:
            return []
        scores = self.scores(q, windows)
        mask = self.alive[:n].copy()
        if f.projects is not None:
            codes = [self.projects[p] for p in f.projects if p in self.projects]
            mask &= np.isin(self.proj[:n], codes)
        if f.kinds is not None:
            codes = [KIND_CODES[x] for x in f.kinds]
            if f.activity and "episodic" in f.kinds:
                codes.append(KIND_CODES["activity"])
            mask &= np.isin(self.kind[:n], codes)
        elif not f.activity:
            mask &= self.kind[:n] != KIND_CODES["activity"]
        if not f.include_archived:
            mask &= ~self.archived[:n]
        if f.since is not None:
            mask &= self.t[:n] >= f.since
        if f.until is not None:
            mask &= self.t[:n] <= f.until
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            return []
        s = scores[idx]
        if idx.size > k:
            top = np.argpartition(-s, k - 1)[:k]
        else:
            top = np.arange(idx.size)
        top = top[np.lexsort((self.ids[idx[top]], -s[top]))]  # by score, ties by id: deterministic
        return [(int(self.ids[idx[i]]), float(s[i])) for i in top]


class VectorIndex:
    """Exact cosine search over one table (memories or chunks) with filters."""

    def __init__(self, table: str, dim: int, *, mirror: bool = True):
        self.table = table
        self.dim = dim
        self.use_mirror = mirror
        self._mirror: _Mirror | None = None
        self._epoch = -1
        self._lock = threading.Lock()

    def invalidate(self) -> None:
        with self._lock:
            self._mirror = None
            self._epoch = -1

    def _load(self, con: Connection) -> _Mirror:
        m = _Mirror(self.dim)
        rows = con.execute(_SOURCES[self.table]).fetchall()
        m.add(rows)
        if self.table == "memories":
            m.add_windows(read_windows(con))
        log.info("vector mirror %s loaded: %d rows, %d windows", self.table, len(rows), m.wn)
        return m

    def after_write(self, con: Connection, epoch_before: int, epoch_after: int, ids: set[int]) -> None:
        """Apply this process's committed write to the mirror, or drop it if another process wrote too."""
        with self._lock:
            if self._mirror is None:
                return
            if self._epoch != epoch_before:
                self._mirror = None
                return
            self._apply(con, ids)
            self._epoch = epoch_after

    def _apply(self, con: Connection, ids: set[int]) -> None:
        m = self._mirror
        assert m is not None
        if not ids:
            return
        id_list = sorted(ids)
        found: list[tuple] = []
        key = "m.id" if self.table == "memories" else "c.id"
        for i in range(0, len(id_list), 500):
            part = id_list[i : i + 500]
            q = _SOURCES[self.table] + f" WHERE {key} IN ({','.join('?' * len(part))})"
            found.extend(con.execute(q, part).fetchall())
        present = {r[0] for r in found}
        for rid in ids - present:
            m.remove(rid)
        m.add(found)
        if self.table == "memories" and present:
            m.add_windows(read_windows(con, sorted(present)))
        if m.dead > 1024 and m.dead > (m.n + m.wn) // 4:
            self._mirror = None  # compact by reloading on next search

    def _current(self, con: Connection) -> _Mirror | None:
        """The mirror, if it is loaded and no other process wrote since (call holding self._lock)."""
        m = self._mirror
        return m if m is not None and self._epoch == read_epoch(con) else None

    def cosines(self, con: Connection, ids: list[int], q: np.ndarray) -> dict[int, float]:
        """Cosine to q for these rows (those without a vector are left out): from the mirror when it is
        current, else one vec0 read per 500 rows (a vec0 rowid lookup costs ~0.5 ms a row at 100k rows)."""
        out: dict[int, float] = {}
        q = np.asarray(q, dtype=np.float32)
        rest = ids
        if self.use_mirror:
            with self._lock:
                m = self._current(con)
                if m is not None:
                    found = [(i, m.pos[i]) for i in ids if i in m.pos]
                    if found:
                        scores = m.mat[[p for _, p in found]] @ q
                        for (i, _), v in zip(found, scores, strict=True):
                            rows = m.wrows.get(i)
                            out[i] = with_windows(float(v), m.wmat[rows] if rows else None, q)
                    rest = [i for i in ids if i not in m.pos]
        windows = read_windows(con, rest) if rest and self.table == "memories" else {}
        for p in range(0, len(rest), 500):
            part = rest[p : p + 500]
            for rid, blob in con.execute(
                f"SELECT rowid, embedding FROM vec_{self.table} WHERE rowid IN ({','.join('?' * len(part))})", part
            ).fetchall():
                out[rid] = with_windows(float(np.frombuffer(blob, dtype=np.float32) @ q), windows.get(rid), q)
        return out

    def best_window(self, con: Connection, rid: int, q: np.ndarray) -> tuple[int, int] | None:
        """(start, end) in memory rid's text of its window that matches q better than the whole text, if any."""
        q = np.asarray(q, dtype=np.float32)
        wins = whole = None
        if self.use_mirror:
            with self._lock:
                m = self._current(con)
                if m is not None and rid in m.pos:
                    rows = m.wrows.get(rid)
                    wins = m.wmat[rows] if rows else np.zeros((0, self.dim), dtype=np.float32)
                    whole = m.mat[m.pos[rid]]
        if whole is None:
            row = con.execute(f"SELECT embedding FROM vec_{self.table} WHERE rowid = ?", (rid,)).fetchone()
            if row is None:
                return None
            whole = np.frombuffer(row[0], dtype=np.float32)
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

    def search(self, con: Connection, q: np.ndarray, k: int, f: Filter, *,
               windows: bool = True) -> list[tuple[int, float]]:
        """[(row id, cosine)] best first, exactly the top k under the filter. windows=False compares whole
        texts only (duplicates, contradictions: a passage of a long note is not the note)."""
        if not self.use_mirror:
            return self._search_vec0(con, q, k, f, windows)
        epoch = read_epoch(con)
        with self._lock:
            if self._mirror is None or self._epoch != epoch:
                self._mirror = self._load(con)
                self._epoch = epoch
            return self._mirror.search(np.asarray(q, dtype=np.float32), k, f, windows)

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
                sql = _SOURCES[self.table] + f" WHERE {key} IN ({','.join('?' * len(part))})"
                for r in con.execute(sql, part).fetchall():
                    meta[r[0]] = r
            m.add([meta[i] for i in ids if i in meta])
            if self.table == "memories" and windows:
                m.add_windows(read_windows(con, [i for i in ids if i in meta]))
            hits = m.search(np.asarray(q, dtype=np.float32), k, f)
            if len(hits) >= k or want >= total:
                return hits
            want *= 4
