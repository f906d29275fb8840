"""Buckets of near neighbours (random-hyperplane LSH), so that finding a near-duplicate does not scan
every vector.

`remember` asks one question of the vectors: is there a memory at least NEAR_DUPLICATE_COSINE (0.95)
close to this one? Answered by a scan of the whole int8 mirror, its cost grows with the store (~200 ms
at a million rows on a loaded machine). Here each vector gets TABLES keys of BITS sign bits (which side
of BITS fixed random hyperplanes it lies); two vectors at angle theta agree on a bit with probability
1 - theta/pi, so on a whole key with (1 - theta/pi)^BITS, and share at least one of the TABLES keys with

    P(theta) = 1 - (1 - (1 - theta/pi)^BITS)^TABLES

For cosine 0.95 (18.2 degrees) that is 0.983, for 0.97 0.998, for 0.99 (8 degrees) 1 - 1e-9; for two
unrelated vectors (90 degrees) 16 * 2^-14 = 0.001. So a lookup reads the few rows sharing a key with
the query (about n / 1000 for unrelated data) instead of all n, and the caller checks them exactly: the
answer is never a false duplicate, and misses one with the probabilities above (the exact content check
runs first, and a duplicate missed is a second memory, not a loss).

Layout: for each table, positions sorted by key with offsets per key (CSR, rebuilt with a radix sort in
O(n)); rows added since are a tail scanned by comparing keys. Positions are the caller's (the mirror's
row numbers); dead positions are filtered by the caller.
"""

from __future__ import annotations

import functools

import numpy as np

TABLES = 16
BITS = 14
SEED = 20261202  # the hyperplanes are fixed: keys stay valid across processes and restarts
TAIL_SHARE = 8  # the tail is folded into the sorted part once it exceeds 1/TAIL_SHARE of the rows ...
TAIL_MIN = 4096  # ... and this many


@functools.cache
def hyperplanes(dim: int) -> np.ndarray:
    """(dim, TABLES * BITS) float32 normals, the same for every process (made once, read-only)."""
    rng = np.random.default_rng(SEED + dim)
    planes = rng.standard_normal((dim, TABLES * BITS)).astype(np.float32)
    planes.flags.writeable = False
    return planes


_EMPTY: tuple[np.ndarray, np.ndarray, int] = (np.zeros((TABLES, 0), dtype=np.int32),
                                              np.zeros((TABLES, (1 << BITS) + 1), dtype=np.int64), 0)
_WEIGHTS = (1 << np.arange(BITS, dtype=np.uint32)).astype(np.uint32)


def keys(vecs: np.ndarray, planes: np.ndarray) -> np.ndarray:
    """(n, TABLES) uint16 keys of float vectors (any scale: only the signs of the projections count)."""
    vecs = np.atleast_2d(np.asarray(vecs, dtype=np.float32))
    bits = (vecs @ planes > 0).reshape(len(vecs), TABLES, BITS)
    return (bits.astype(np.uint32) @ _WEIGHTS).astype(np.uint16)


class Buckets:
    """Positions by key in each table; append-only (positions are never reused by the caller)."""

    def __init__(self) -> None:
        self.keys = np.zeros((0, TABLES), dtype=np.uint16)  # by position; capacity grows by doubling
        self.n = 0
        # (positions sorted by key per table, offsets per key, how many positions they cover): replaced whole,
        # so a lookup on another thread sees one consistent version
        self._csr: tuple[np.ndarray, np.ndarray, int] = _EMPTY

    def resident_bytes(self) -> int:
        order, offsets, _ = self._csr
        return int(self.n * self.keys.itemsize * TABLES + order.nbytes + offsets.nbytes)

    def set(self, start: int, ks: np.ndarray) -> None:
        """Keys of positions start, start+1, ... (start <= n: positions past the tail extend it)."""
        end = start + len(ks)
        if end > len(self.keys):
            grown = np.zeros((max(1024, 2 * len(self.keys), end), TABLES), dtype=np.uint16)
            grown[: self.n] = self.keys[: self.n]
            self.keys = grown
        if start < self._csr[2]:  # a position already sorted changed: sort again at the next lookup
            self._csr = _EMPTY
        self.keys[start:end] = ks
        self.n = max(self.n, end)

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def _fold(self) -> None:
        n = self.n
        order = np.empty((TABLES, n), dtype=np.int32)
        offsets = np.empty((TABLES, (1 << BITS) + 1), dtype=np.int64)
        for t in range(TABLES):
            col = self.keys[:n, t]
            order[t] = np.argsort(col, kind="stable")  # a radix sort for 16-bit keys: O(n)
            offsets[t, 0] = 0
            np.cumsum(np.bincount(col, minlength=1 << BITS), out=offsets[t, 1:])
        self._csr = (order, offsets, n)

    def lookup(self, qkeys: np.ndarray) -> np.ndarray:
        """Positions sharing at least one key with the query's (TABLES,) keys, without repeats."""
        n, keys = self.n, self.keys
        if n - self._csr[2] > max(TAIL_MIN, n // TAIL_SHARE):
            self._fold()
        order, offsets, done = self._csr
        parts = []
        for t in range(TABLES):
            k = int(qkeys[t])
            a, b = offsets[t, k], offsets[t, k + 1]
            if b > a:
                parts.append(order[t, a:b])
        if n > done:
            hit = (keys[done:n] == qkeys[None, :]).any(axis=1)
            parts.append(np.flatnonzero(hit).astype(np.int32) + done)
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.concatenate(parts)).astype(np.int64)
