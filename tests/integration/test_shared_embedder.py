"""The server's shared embedding model (engine/shared_embedder.py), with the real bundled model: small encodes
from many threads share model calls and get exactly their own vectors; big ones run on their own, at the
server's priority, and their model calls wait for the small encodes in hand; a model that cannot load fails in
the caller."""

from __future__ import annotations

import os
import random
import sys
import threading

import numpy as np
import pytest

from engine.embeddings import EmbeddingUnavailable
from engine.minilm import BATCH_TOKENS
from engine.shared_embedder import BULK_NICE, SharedEmbedder


@pytest.fixture(scope="module")
def shared():
    e = SharedEmbedder(gather=0.01)
    e.load()
    yield e
    e.close()


def test_concurrent_small_encodes_share_model_calls_and_get_their_own_vectors(shared, embedder):
    rng = random.Random(3)
    words = "boiler key garden shed dentist invoice train Lisbon sister recipe bicycle piano tuner".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 40))) for _ in range(96)]
    got: dict[int, np.ndarray] = {}
    start = threading.Barrier(4)

    def user(u: int) -> None:
        start.wait()
        for i in range(u, len(texts), 4):
            got[i] = shared.encode_one(texts[i]) if i % 3 else shared.encode([texts[i]])[0]

    requests, calls = shared.requests, shared.calls
    threads = [threading.Thread(target=user, args=(u,)) for u in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert shared.requests - requests == len(texts)
    assert shared.calls - calls < len(texts) / 2, (shared.requests - requests, shared.calls - calls)
    alone = np.stack([embedder.encode_one(t) for t in texts])
    together = np.stack([got[i] for i in range(len(texts))])
    assert np.allclose(together, alone, atol=1e-5)  # padding to the batch's longest changes nothing


def test_big_encodes_run_on_their_own(shared, embedder):
    texts = [f"passage {i} of a long document about the allotment rules" for i in range(64)]
    requests, calls = shared.requests, shared.calls
    vecs = shared.encode(texts)
    assert (shared.requests, shared.calls) == (requests, calls)
    assert np.allclose(vecs, embedder.encode(texts), atol=1e-5)
    if sys.platform.startswith("linux"):  # not below the rest of the machine: a busy one starved them
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        bulk = shared._bulk.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result()
        assert BULK_NICE == 0 and bulk == mine


def test_a_big_encode_of_mixed_lengths_is_cut_into_calls_and_keeps_its_order(shared, embedder):
    rng = random.Random(5)
    words = "harbour budget council lighthouse winter ledger orchard festival".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.choice((3, 40, 300)))) for _ in range(70)]
    assert sum(min(len(t), 1024) for t in texts) > 2 * BATCH_TOKENS * 4  # more than two model calls' worth
    assert np.allclose(shared.encode(texts), embedder.encode(texts), atol=1e-5)


def test_a_big_encode_waits_for_the_small_encodes_in_hand(shared, embedder):
    """Queries asked all through a big encode: its model calls wait for them (within YIELD seconds each)."""
    texts = [f"Paragraph {i}: " + "the council met at the harbour to agree the winter budget. " * 12
             for i in range(48)]
    done = threading.Event()
    asked: list[np.ndarray] = []

    def queries() -> None:
        while not done.is_set():
            asked.append(shared.encode_one("when did the council meet?"))

    before = shared.yields
    users = [threading.Thread(target=queries) for _ in range(3)]
    for t in users:
        t.start()
    try:
        big = shared.encode(texts)
    finally:
        done.set()
        for t in users:
            t.join()
    assert shared.yields > before and asked
    assert np.allclose(big, embedder.encode(texts), atol=1e-5)


def test_a_model_that_cannot_load_fails_in_the_caller():
    def broken(*args, **kwargs):
        raise EmbeddingUnavailable("no model here")

    e = SharedEmbedder(runtime=broken)
    with pytest.raises(EmbeddingUnavailable):
        e.encode_one("anything")
    assert e.requests == 0
    e.close()
