"""The near-duplicate check through the mirror's buckets (engine/lsh.py, vectors.VectorIndex.near): the same
rows as an exact scan, before the buckets exist, while they are built and after, with writes, deletes
and filters; and remember merges a near-duplicate through it."""

from __future__ import annotations

import time

import numpy as np
import pytest

from engine import Engine
from engine.embeddings import NoEmbedder
from engine.store.sqlite import memories as memory_rows
from engine.store.sqlite import vectors

DIM = 384
N = 6000
THRESHOLD = 0.95


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _near(rng, x, cos):
    r = rng.standard_normal(x.shape).astype(np.float32)
    r -= (r @ x) * x
    return (cos * x + np.sqrt(1 - cos * cos) * r / np.linalg.norm(r)).astype(np.float32)


def _insert(con, start, mat):
    ids = [memory_rows.insert(con, uid=f"mem_n{start + i}", kind="fact", text=f"note {start + i}",
                              chash=f"h{start + i}", importance=0.5, now=float(i), event_at=None,
                              project="p" if (start + i) % 3 == 0 else None, source="user", meta=None,
                              conversation_id=None, document_id=None, done=True, dedup_pending=False)
           for i in range(len(mat))]
    vectors.put(con, "memories", ids, mat)
    return ids


@pytest.fixture
def store(profile_home):
    rng = np.random.default_rng(11)
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        mat = _unit(rng.standard_normal((N, DIM)))
        mat[N // 2 : N // 2 + 50] = _unit(mat[0] + 0.15 * rng.standard_normal((50, DIM)))  # a crowd near row 0
        with eng.store.write() as con:
            vectors.create_tables(con, DIM)
            ids = _insert(con, 0, mat)
            vectors.bump_epoch(con)
        yield eng, np.array(ids), mat, rng


def exact(mat, ids, projects, q):
    s = mat @ q
    keep = [i for i in np.flatnonzero(s >= THRESHOLD) if projects is None or ("p" if i % 3 == 0 else None) in projects]
    return sorted(int(ids[i]) for i in keep)


def wait_built(index, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = index._mirror
        if m is not None and m.near is not None and m.near_n >= m.n:
            return m
        time.sleep(0.02)
    raise AssertionError("the near-duplicate buckets were not built")


def test_near_finds_what_an_exact_scan_finds_before_and_after_the_buckets(store):
    eng, ids, mat, rng = store
    index = vectors.VectorIndex("memories", DIM)
    con = eng.con
    queries = [_near(rng, mat[i], c) for i, c in ((5, 0.99), (17, 0.97), (0, 0.96))] + [mat[N // 2 + 3]]
    queries += list(_unit(rng.standard_normal((5, DIM))))
    for q in queries:  # the first call scans (and starts the buckets in the background)
        got = index.near(con, q, THRESHOLD, vectors.Filter())
        assert sorted(i for i, _ in got) == exact(mat, ids, None, q)
        assert all(c >= THRESHOLD for _, c in got) and [c for _, c in got] == sorted((c for _, c in got), reverse=True)
    m = wait_built(index)
    assert m.near is not None and m.near.n == N
    misses = 0
    for i in range(0, N, 60):  # 100 rows, each looked for from a vector at cosine 0.99 (P(miss) = 1e-9)
        q = _near(rng, mat[i], 0.99)
        got = sorted(r for r, _ in index.near(con, q, THRESHOLD, vectors.Filter()))
        misses += int(ids[i]) not in got
        assert set(got) <= set(exact(mat, ids, None, q))  # never a row below the threshold
    assert misses == 0
    for q in queries:
        for projects in (None, {"p"}, {None}):
            got = index.near(con, q, THRESHOLD, vectors.Filter(projects=projects))
            want = exact(mat, ids, projects, q)
            assert set(i for i, _ in got) <= set(want) and len(got) >= len(want) - 1  # the crowd: P(miss) ~2%


def test_rows_written_or_deleted_after_the_buckets_are_seen(store):
    eng, ids, mat, rng = store
    index = eng.space.index["memories"] if "memories" in eng.space.index else vectors.VectorIndex("memories", DIM)
    con = eng.con
    index.near(con, mat[1], THRESHOLD, vectors.Filter())
    wait_built(index)
    fresh = _unit(rng.standard_normal((3, DIM)))
    with eng.store.write() as w:
        before = vectors.read_epoch(w)
        new_ids = _insert(w, N, fresh)
        after = vectors.bump_epoch(w)
    index.after_write(con, before, after, set(new_ids))
    for rid, v in zip(new_ids, fresh, strict=True):
        assert [i for i, _ in index.near(con, _near(rng, v, 0.99), THRESHOLD, vectors.Filter())] == [rid]
    gone = int(ids[7])
    with eng.store.write() as w:
        before = vectors.read_epoch(w)
        vectors.delete(w, "memories", [gone])
        memory_rows.delete(w, [gone])
        after = vectors.bump_epoch(w)
    index.after_write(con, before, after, {gone})
    assert index.near(con, mat[7], THRESHOLD, vectors.Filter()) == []
