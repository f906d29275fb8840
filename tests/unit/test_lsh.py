"""The near-duplicate buckets (engine/lsh.py): what shares a key is found, in the sorted part and the tail,
near vectors are found at the rates the design states, unrelated ones rarely come along."""

from __future__ import annotations

import numpy as np

from engine import lsh


def unit(rng, n, d=384):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def near(rng, x, cos):
    r = rng.standard_normal(x.shape).astype(np.float32)
    r -= (r @ x) * x
    r /= np.linalg.norm(r)
    return cos * x + np.sqrt(1 - cos * cos) * r


def test_keys_are_fixed_and_scale_free():
    rng = np.random.default_rng(1)
    x = unit(rng, 5)
    planes = lsh.hyperplanes(384)
    assert np.array_equal(planes, lsh.hyperplanes(384))  # the same hyperplanes in every process
    k = lsh.keys(x, planes)
    assert k.shape == (5, lsh.TABLES) and k.dtype == np.uint16
    assert np.array_equal(k, lsh.keys(3.5 * x, planes))
    assert not np.array_equal(k[0], k[1])


def test_lookup_finds_near_vectors_in_the_sorted_part_and_the_tail():
    rng = np.random.default_rng(2)
    planes = lsh.hyperplanes(384)
    x = unit(rng, 60_000)
    b = lsh.Buckets()
    b.set(0, lsh.keys(x[:50_000], planes))
    b.lookup(lsh.keys(x[0], planes)[0])  # sorts the first 50,000
    b.set(50_000, lsh.keys(x[50_000:], planes))  # a tail of 10,000, not sorted yet
    for i in (0, 49_999, 50_000, 59_999):
        assert i in b.lookup(lsh.keys(x[i], planes)[0])
    found = {0.99: 0, 0.95: 0}
    sizes = []
    for i in range(0, 60_000, 300):  # 200 rows, half of them in the tail
        for cos in found:
            hits = b.lookup(lsh.keys(near(rng, x[i], cos), planes)[0])
            found[cos] += i in hits
            sizes.append(len(hits))
    assert found[0.99] == 200  # P = 1 - 1e-9
    assert found[0.95] >= 185  # P = 0.983 per row: 196.6 expected
    assert np.median(sizes) < 60_000 / 200  # unrelated rows: ~60 expected (16 * 2^-14 of them)


def test_changing_a_sorted_position_is_seen():
    rng = np.random.default_rng(3)
    planes = lsh.hyperplanes(384)
    x = unit(rng, 5000)
    b = lsh.Buckets()
    b.set(0, lsh.keys(x, planes))
    assert 10 in b.lookup(lsh.keys(x[10], planes)[0])
    b.set(10, lsh.keys(x[11:12], planes))  # position 10 now holds another vector
    assert 10 in b.lookup(lsh.keys(x[11], planes)[0])
    old, new = lsh.keys(x[10], planes)[0], lsh.keys(x[11], planes)[0]
    # the old vector's keys reach position 10 only where they equal the new vector's (no stale entry)
    assert (10 in b.lookup(old)) == bool((old == new).any())
    assert not (old == new).all()
