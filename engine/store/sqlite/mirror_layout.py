"""The bytes of a stored vector-mirror block (table `vector_mirror`, see engine/store/sqlite/vectors.py), and the two SQL
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

No engine imports: engine/store/sqlite/db.py registers the functions on every connection it opens.
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

__all__ = ["EXACT", "EXCEPTION", "GONE", "META_BYTES", "META_LAYOUT", "arrays", "flagged", "forget_codes",
           "forget_meta", "meta_bytes", "register", "slot"]

# what a forgotten row's meta keeps of itself: nothing but its id (and its flag, GONE)
_FORGOTTEN = ("t", "proj", "kind", "archived")


def offsets(rows: int) -> dict[str, int]:
    """Where each META_LAYOUT array of a block of `rows` rows starts in its meta blob."""
    out, off = {}, 0
    for name, dt in META_LAYOUT:
        out[name] = off
        off += rows * np.dtype(dt).itemsize
    return out


def arrays(meta: bytes, rows: int, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """The META_LAYOUT arrays of a meta blob of `rows` rows, by name (read-only views of the blob): all of
    them, or only `names` (a delete trigger looks up one row's slot by the ids alone)."""
    at = offsets(rows)
    return {name: np.frombuffer(meta, dtype=dt, count=rows, offset=at[name]) for name, dt in META_LAYOUT
            if names is None or name in names}


def meta_bytes(parts: dict[str, np.ndarray]) -> bytes:
    """The meta blob of these arrays (one per META_LAYOUT name, of one length), in the layout's order."""
    return b"".join(np.asarray(parts[name]).astype(dt, copy=False).tobytes() for name, dt in META_LAYOUT)


def _rows(meta: Any) -> int | None:
    """How many rows this meta blob holds; None when it is not a block's meta (erased: NULL)."""
    if not isinstance(meta, bytes) or not meta or len(meta) % META_BYTES:
        return None
    return len(meta) // META_BYTES


def slot(meta: Any, rid: int) -> tuple[int, int] | None:
    """(rows, position) of row id `rid` in this meta blob; None when the blob is not a block's meta or
    does not hold the row."""
    rows = _rows(meta)
    if rows is None:
        return None
    ids = arrays(meta, rows, ("ids",))["ids"]
    i = int(np.searchsorted(ids, rid))
    if i >= rows or int(ids[i]) != rid:
        return None
    return rows, i


def flagged(meta: Any, flag: int) -> np.ndarray:
    """The ids of the rows of this meta blob with this flag (none when it is not a block's meta)."""
    rows = _rows(meta)
    if rows is None:
        return np.zeros(0, dtype=np.int64)
    parts = arrays(meta, rows, ("ids", "exception"))
    return parts["ids"][parts["exception"] == flag]


def forget_meta(meta: Any, rid: Any) -> Any:
    """The meta blob with row `rid`'s time, project, kind and archived flag zeroed and its flag GONE (the
    blob as it is when it does not hold the row)."""
    where = slot(meta, int(rid)) if isinstance(rid, int) else None
    if where is None:
        return meta
    rows, i = where
    parts = {name: a.copy() for name, a in arrays(meta, rows).items()}
    for name in _FORGOTTEN:
        parts[name][i] = 0
    parts["exception"][i] = GONE
    return meta_bytes(parts)


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
