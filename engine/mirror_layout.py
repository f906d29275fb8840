"""The bytes of a stored vector-mirror block (table `vector_mirror`, see engine/vectors.py), and the two SQL
functions with which a deleted vector leaves its block in place.

A block holds the rows of STORED_IDS consecutive ids: `meta` is the META_LAYOUT arrays of `rows` items
each, one after the other, and `codes` the rows' int8 codes (`rows` x dimension). When a vector row goes,
its trigger (`vectors.create_tables`) rewrites its block with `forget_meta` and `forget_codes`: the row's
codes, time, project, kind and archived flag become zeros and its flag GONE, so the loader passes over
it. Only the row's id is left, which the audit log keeps anyway.

The values keep their sizes, so SQLite overwrites the record in place and writes only the pages whose
bytes changed (one or two of a block's ~14): erasing the whole block (the codes set to NULL) freed and
zeroed every page of it, ~17 pages written for a forget, which made forgetting an old memory at a
million items twice as slow as at a thousand (docs/performance.md).

No engine imports: engine/db.py registers the functions on every connection it opens.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# a stored block's meta blob: these arrays of `rows` items each, one after the other
META_LAYOUT = (("ids", np.int64), ("t", np.float64), ("proj", np.int32), ("kind", np.int8),
               ("archived", np.uint8), ("exception", np.uint8))
META_BYTES = sum(np.dtype(dt).itemsize for _, dt in META_LAYOUT)
# the `exception` flag's values
EXACT, EXCEPTION, GONE = 0, 1, 2

__all__ = ["EXACT", "EXCEPTION", "GONE", "META_BYTES", "META_LAYOUT", "flagged", "forget_codes", "forget_meta",
           "offsets", "register", "slot"]


def offsets(rows: int) -> dict[str, int]:
    """Where each META_LAYOUT array of a block of `rows` rows starts in its meta blob."""
    out, off = {}, 0
    for name, dt in META_LAYOUT:
        out[name] = off
        off += rows * np.dtype(dt).itemsize
    return out


def slot(meta: Any, rid: int) -> tuple[int, int] | None:
    """(rows, position) of row id `rid` in this meta blob; None when the blob is not a block's meta or
    does not hold the row."""
    if not isinstance(meta, bytes) or not meta or len(meta) % META_BYTES:
        return None
    rows = len(meta) // META_BYTES
    ids = np.frombuffer(meta, dtype=np.int64, count=rows)
    i = int(np.searchsorted(ids, rid))
    if i >= rows or int(ids[i]) != rid:
        return None
    return rows, i


def flagged(meta: Any, flag: int) -> np.ndarray:
    """The ids of the rows of this meta blob with this flag (none when it is not a block's meta)."""
    if not isinstance(meta, bytes) or not meta or len(meta) % META_BYTES:
        return np.zeros(0, dtype=np.int64)
    rows = len(meta) // META_BYTES
    flags = np.frombuffer(meta, dtype=np.uint8, count=rows, offset=offsets(rows)["exception"])
    return np.frombuffer(meta, dtype=np.int64, count=rows)[flags == flag]


def forget_meta(meta: Any, rid: Any) -> Any:
    """The meta blob with row `rid`'s time, project, kind and archived flag zeroed and its flag GONE (the
    blob as it is when it does not hold the row)."""
    where = slot(meta, int(rid)) if isinstance(rid, int) else None
    if where is None:
        return meta
    rows, i = where
    out = bytearray(meta)
    at = offsets(rows)
    for name, dt in META_LAYOUT[1:-1]:
        size = np.dtype(dt).itemsize
        out[at[name] + i * size : at[name] + (i + 1) * size] = bytes(size)
    out[at["exception"] + i] = GONE
    return bytes(out)


def forget_codes(codes: Any, meta: Any, rid: Any) -> Any:
    """The codes blob with row `rid`'s codes zeroed (the blob as it is when the block does not hold it)."""
    where = slot(meta, int(rid)) if isinstance(rid, int) else None
    if where is None or not isinstance(codes, bytes) or len(codes) % where[0]:
        return codes
    rows, i = where
    dim = len(codes) // rows
    out = bytearray(codes)
    out[i * dim : (i + 1) * dim] = bytes(dim)
    return bytes(out)


def register(con: Any) -> None:
    """Make the two functions callable from SQL (the mirror's delete triggers) on this connection."""
    con.create_function("mirror_forget_meta", 2, forget_meta, deterministic=True)
    con.create_function("mirror_forget_codes", 3, forget_codes, deterministic=True)
