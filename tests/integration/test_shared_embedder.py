"""The server's shared embedding model (engine/shared_embedder.py), with the real bundled model: interactive
encodes from many threads share model calls, get exactly their own vectors and never wait for bulk work; bulk
encodes run in slices on threads of the lowest priority (Linux), taken in turn, and still move on when those
threads get no CPU; a model that cannot load fails in the caller."""

from __future__ import annotations

import os
import random
import sys
import threading
import time

import numpy as np
import pytest

from engine.embeddings import SMALL_BATCH, EmbeddingUnavailable
from engine.minilm import BATCH_TOKENS
from engine.shared_embedder import BULK_NICE, SharedEmbedder, lower_priority

LINUX = sys.platform.startswith("linux")


@pytest.fixture(scope="module")
def shared():
    e = SharedEmbedder(gather=0.01)
    e.load()
    yield e
    e.close()


def nice_of(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


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


def test_bulk_encodes_run_in_slices_on_threads_of_the_lowest_priority(shared, embedder):
    texts = [f"passage {i} of a long document about the allotment rules" for i in range(64)]
    requests, calls, run = shared.requests, shared.calls, shared.slices_run
    vecs = shared.encode(texts)
    assert (shared.requests, shared.calls) == (requests, calls)  # not through the interactive queue
    assert shared.slices_run > run
    assert np.allclose(vecs, embedder.encode(texts), atol=1e-5)
    if LINUX:  # the kernel serves every other thread of the server first
        assert BULK_NICE == 19 and shared.bulk_lowered == (nice_of(0) < BULK_NICE)
        assert shared._bulk_threads and all(nice_of(t.native_id) == max(BULK_NICE, nice_of(0))
                                            for t in shared._bulk_threads)
    else:
        assert shared.bulk_lowered is False


@pytest.mark.skipif(not LINUX, reason="a thread's own priority is Linux's")
def test_the_threads_a_bulk_thread_starts_inherit_its_priority(embedder):
    """ONNX Runtime makes a session's intra-op threads when it makes the session: made from a bulk thread (as
    the bulk session with more than one thread is, on a bigger machine), they run at its priority too."""
    from engine.onnx_minilm import OnnxMiniLM

    runtime = embedder._fast
    assert isinstance(runtime, OnnxMiniLM)
    tasks = set(os.listdir("/proc/self/task"))
    made: list[object] = []

    def bulk() -> None:
        assert lower_priority(BULK_NICE)
        made.append(runtime._session_for(3))  # a session of three threads: two threads of ONNX Runtime's own

    t = threading.Thread(target=bulk)
    t.start()
    t.join()
    new = [int(x) for x in set(os.listdir("/proc/self/task")) - tasks]
    try:
        assert len(new) >= 2 and all(nice_of(tid) == max(BULK_NICE, nice_of(0)) for tid in new)
        assert nice_of(threading.get_native_id()) == nice_of(0)  # this thread, and the process, untouched
    finally:
        runtime._sessions.pop(3, None)


def test_interactive_encodes_need_nothing_of_the_bulk_lane(embedder):
    """With a bulk encode queued and its lane held still (its lock taken here: no slice can start or end),
    queries, a memory's vector and a long memory's windows are all encoded: an interactive encode never waits
    behind bulk work, whatever is queued."""
    e = SharedEmbedder(gather=0.001, slice_tokens=64)
    e.load()
    try:
        rng = random.Random(7)
        words = "harbour budget council lighthouse winter ledger orchard festival ferry meteor".split()
        bulk_texts = [" ".join(rng.choice(words) for _ in range(30)) for _ in range(120)]
        got: list[np.ndarray] = []
        job = threading.Thread(target=lambda: got.append(e.encode(bulk_texts)))
        job.start()
        deadline = time.monotonic() + 600
        while not (e.slices_run and e._jobs) and time.monotonic() < deadline:  # a slice done, the rest queued
            time.sleep(0.001)
        long_note = "The council met at the harbour to agree the winter budget for the lighthouse. " * 60
        with e._bulk:  # the bulk lane stands still
            run = e.slices_run
            queries = [e.encode_one(q) for q in ("when did the council meet?", "winter budget", "lighthouse")]
            windows = e.encode_windows([long_note], small=True)[0]
            assert windows is not None and len(windows.spans) > SMALL_BATCH  # more than one gathered call holds
            assert e.slices_run == run and job.is_alive() and e._jobs  # nothing of the bulk encode moved
        job.join(300)
        assert not job.is_alive()
        assert np.allclose(np.stack(queries), embedder.encode(["when did the council meet?", "winter budget",
                                                               "lighthouse"]), atol=1e-5)
        assert np.allclose(windows.vectors, embedder.encode_windows([long_note], small=True)[0].vectors, atol=1e-5)
        assert np.allclose(got[0], embedder.encode(bulk_texts), atol=1e-5)
    finally:
        e.close()


def test_a_bulk_encode_queued_beside_a_big_one_waits_for_one_slice_of_it(embedder):
    """Bulk encodes take turns, a new one first: a document uploaded beside a big import is not queued behind
    all of the import."""
    e = SharedEmbedder(slice_tokens=64)
    e.load()
    try:
        big = [f"Imported note {i}: the ferry timetable changes for the winter months at the harbour." for i in range(400)]
        small = [f"chunk {i} of a short document about the orchard" for i in range(12)]
        first = threading.Thread(target=e.encode, args=(big,))
        first.start()
        while e.slices_run == 0:
            time.sleep(0.001)
        before, rescued = e.slices_run, e.slices_rescued
        vecs = e.encode(small)
        # the slice in hand (one per bulk thread), then this encode's own slices, then no other; but a slice
        # that a caller ran itself, its bulk threads starved of CPU by a loaded machine, is not one of those turns
        assert e.slices_run - before <= 2 * len(e._bulk_threads) + 2 + (e.slices_rescued - rescued)
        assert first.is_alive()
        first.join(300)
        assert np.allclose(vecs, embedder.encode(small), atol=1e-5)
    finally:
        e.close()


def test_a_bulk_encode_moves_on_when_its_threads_get_no_cpu(embedder):
    """Its caller runs its slices itself once none has started for `starved` seconds (here: at once), so an
    import never waits for threads the kernel keeps off the cores; every slice lands in its place."""
    e = SharedEmbedder(slice_tokens=64, starved=0.0)
    try:
        rng = random.Random(11)
        words = "glacier pottery compass lantern orchard meteor saddle walnut quarry tundra".split()
        texts = [" ".join(rng.choice(words) for _ in range(rng.choice((4, 20, 60)))) for _ in range(80)]
        vecs = e.encode(texts)
        assert e.slices_rescued > 0 and e.slices_run > e.slices_rescued
        assert np.allclose(vecs, embedder.encode(texts), atol=1e-5)
    finally:
        e.close()


def test_a_big_encode_of_mixed_lengths_is_cut_into_calls_and_keeps_its_order(shared, embedder):
    rng = random.Random(5)
    words = "harbour budget council lighthouse winter ledger orchard festival".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.choice((3, 40, 300)))) for _ in range(70)]
    assert sum(min(len(t), 1024) for t in texts) > 2 * BATCH_TOKENS * 4  # more than two model calls' worth
    assert np.allclose(shared.encode(texts), embedder.encode(texts), atol=1e-5)


def test_where_priorities_cannot_be_lowered_a_slice_waits_for_the_interactive_encodes(embedder, monkeypatch):
    """macOS and Windows: the bulk threads keep the server's priority, and each slice starts once no
    interactive encode waits or runs (within YIELD seconds)."""
    monkeypatch.setattr(sys, "platform", "darwin")
    mine = nice_of(threading.get_native_id()) if LINUX else None
    e = SharedEmbedder()
    try:
        texts = [f"Paragraph {i}: " + "the council met at the harbour to agree the winter budget. " * 12
                 for i in range(48)]
        done = threading.Event()
        asked: list[np.ndarray] = []

        def queries() -> None:
            while not done.is_set():
                asked.append(e.encode_one("when did the council meet?"))

        users = [threading.Thread(target=queries) for _ in range(3)]
        for t in users:
            t.start()
        try:
            big = e.encode(texts)
        finally:
            done.set()
            for t in users:
                t.join()
        assert e.bulk_lowered is False and e.yields > 0 and asked
        if LINUX:
            assert all(nice_of(t.native_id) == mine for t in e._bulk_threads)
        assert np.allclose(big, embedder.encode(texts), atol=1e-5)
    finally:
        e.close()


def test_a_model_that_cannot_load_fails_in_the_caller():
    def broken(*args, **kwargs):
        raise EmbeddingUnavailable("no model here")

    e = SharedEmbedder(runtime=broken)
    with pytest.raises(EmbeddingUnavailable):
        e.encode_one("anything")
    with pytest.raises(EmbeddingUnavailable):
        e.encode([f"text {i}" for i in range(40)])
    assert e.requests == 0 and e.slices_run == 0
    e.close()
