"""What keeps the engine flat and steady as the store grows, as behaviour (speed is in bench/scale.py and
bench/api_load.py): the int8 vector mirror answers exactly what exact search answers, another process's
writes are caught up without a reload, readers get answers while a write is open, a batch of turns is
stored once each, and the tallies behind `stats` match the rows."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engine import Engine, Remembered, heap
from engine.embeddings import NoEmbedder
from engine.store.sqlite import memories as memory_rows
from engine.store.sqlite import vectors
from engine.store.sqlite.db import connect

DIM = 16


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def store_with_vectors(profile_home):
    """A real store with 600 memories and vectors of DIM dimensions: half random, half crowded around one
    direction (cosines that differ by less than the int8 codes can tell apart)."""
    rng = np.random.default_rng(5)
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        with eng.store.write() as con:
            vectors.create_tables(con, DIM)
            ids = [memory_rows.insert(con, uid=f"mem_t{i}", kind="fact", text=f"note {i}", chash=f"h{i}",
                                      importance=0.5, now=float(i), event_at=None,
                                      project="p" if i % 2 else None, source="user", meta=None,
                                      conversation_id=None, document_id=None, done=True, dedup_pending=False)
                   for i in range(600)]
            base = rng.standard_normal(DIM)
            crowd = base + 0.05 * rng.standard_normal((300, DIM))
            mat = _unit(np.vstack([rng.standard_normal((300, DIM)), crowd]))
            vectors.put(con, "memories", ids, mat)
            vectors.bump_epoch(con)
        yield eng, np.array(ids), mat, _unit(base[None, :])[0]


def exact_top(mat, ids, q, k, keep=None):
    s = mat @ q
    order = [i for i in np.lexsort((ids, -s)) if keep is None or keep[i]]
    return [int(ids[i]) for i in order[:k]], [float(s[i]) for i in order[:k]]


def test_a_search_does_not_wait_while_the_near_duplicate_buckets_are_built(store_with_vectors, monkeypatch):
    """Once a mirror loads, its near-duplicate buckets are built in the background, step by step; a search
    (or a write) that comes meanwhile waits at most for a step's keys to be stored, not for them to be
    computed (before, the first recall after the app opened a 1M store waited for the whole build)."""
    from engine import lsh

    eng, ids, mat, crowded = store_with_vectors
    monkeypatch.setattr(vectors, "NEAR_STEP", 100)
    index = vectors.VectorIndex("memories", DIM)
    index.search(eng.con, crowded, 5, vectors.Filter())  # loads the mirror
    computing, go_on = threading.Event(), threading.Event()
    real_keys = lsh.keys

    def slow_keys(vecs, planes):
        if len(vecs) > 1:  # a step of the build (a query's own keys are one row)
            computing.set()
            go_on.wait(10)
        return real_keys(vecs, planes)

    monkeypatch.setattr(lsh, "keys", slow_keys)
    timer = threading.Timer(5.0, go_on.set)  # so that a search the build blocks fails here instead of hanging
    timer.start()
    try:
        index._start_near()
        assert computing.wait(10)  # the build is in the middle of a step
        got = index.search(eng.con, crowded, 10, vectors.Filter())
        assert not go_on.is_set()  # answered while the step's keys were being computed
    finally:
        go_on.set()
        timer.cancel()
    assert [i for i, _ in got] == exact_top(mat, ids, crowded, 10)[0]
    deadline = time.monotonic() + 30
    while not index.near_complete() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert index.near_complete()  # and the build went on to the end
    assert [i for i, _ in index.near(eng.con, mat[7], 0.99, vectors.Filter())][:1] == [int(ids[7])]


@pytest.mark.parametrize("simd", [True, False], ids=["simsimd", "numpy"])
def test_the_int8_mirror_returns_the_exact_top_k(store_with_vectors, simd, monkeypatch):
    monkeypatch.setattr(vectors, "USE_SIMD", simd)
    eng, ids, mat, crowded = store_with_vectors
    index = vectors.VectorIndex("memories", DIM)
    rng = np.random.default_rng(9)
    probes = [crowded, *_unit(rng.standard_normal((20, DIM))), *_unit(mat[rng.integers(0, 600, 10)] + 0.01)]
    for q in probes:
        for k in (1, 10, 50):
            got = index.search(eng.con, q, k, vectors.Filter())
            want_ids, want_s = exact_top(mat, ids, q, k)
            assert [i for i, _ in got] == want_ids
            assert np.allclose([s for _, s in got], want_s, atol=1e-5)
    # with a filter: only the project's rows, still exact
    keep = np.array([i % 2 == 1 for i in range(600)])
    got = index.search(eng.con, crowded, 20, vectors.Filter(projects={"p"}))
    assert [i for i, _ in got] == exact_top(mat, ids, crowded, 20, keep)[0]
    # the codes are a quarter of float32: one scale and one error bound serve every row
    assert index.resident_bytes(vectors_only=True) == 0.25 * mat.nbytes


@pytest.mark.parametrize("simd", [True, False], ids=["simsimd", "numpy"])
def test_crowded_vectors_need_the_bound_and_get_it(store_with_vectors, simd, monkeypatch):
    """Around one direction the int8 cosines cannot order the rows: the first candidates alone would miss
    some of the exact top k; rows whose bound reaches the k-th exact cosine are rescored, so none is missed.
    Both scans: simsimd's (the query quantized too: its error adds to the bound) and numpy's."""
    monkeypatch.setattr(vectors, "USE_SIMD", simd)
    eng, ids, mat, crowded = store_with_vectors
    m, _ = vectors.VectorIndex("memories", DIM)._load(eng.con)
    approx, extra = m.approximate(crowded)
    assert (extra > 0) is (simd and vectors._simd is not None)
    exact = np.array([float(mat[list(ids).index(int(i))] @ crowded) for i in m.ids[: m.n]])
    slack = np.full(m.n, m.bound * float(np.linalg.norm(crowded)) + extra)
    assert np.all(np.abs(approx - exact) <= slack)  # the bound holds
    assert np.abs(approx - exact).max() > 0.5 * slack.min()  # and is not loose by orders of magnitude
    first = {int(m.ids[i]) for i in np.argsort(-approx)[:26]}  # what max(2k, k+16) candidates would be
    want = set(exact_top(mat, ids, crowded, 10)[0])
    assert want - first, "the fixture should crowd the vectors beyond what the int8 codes can order"
    got = vectors.VectorIndex("memories", DIM).search(eng.con, crowded, 10, vectors.Filter())
    assert {i for i, _ in got} == want


@pytest.mark.parametrize("simd", [True, False], ids=["simsimd", "numpy"])
def test_a_vector_beyond_the_codes_range_is_scored_exactly(simd, monkeypatch):
    """A spike (one component far beyond what the shared scale maps to 127) is clipped in its codes, so its
    int8 cosine is far too low: left to the codes it would lose to rows that only look close. It is an
    exception, scored from its float32 vector, and wins; the other rows stay codes alone."""
    monkeypatch.setattr(vectors, "USE_SIMD", simd)
    dim, rng = 256, np.random.default_rng(4)
    limit = vectors.code_scale(dim) * 127  # 0.41 at 256 dimensions
    rest = _unit(rng.standard_normal((1, dim - 1)))[0]
    spike = np.concatenate([[0.98], 0.2 * rest]).astype(np.float32)
    # rows that share the spike's direction everywhere else, and as much of it as the codes hold
    near = np.hstack([np.full((40, 1), limit - 0.01), 0.9 * rest + 0.01 * rng.standard_normal((40, dim - 1))])
    mat = _unit(np.vstack([rng.standard_normal((200, dim)), near, spike[None, :]]))  # ids in one stored block
    m = vectors._Mirror(dim)
    m.add([(i + 1, "fact", None, 0, 0.0, mat[i].tobytes()) for i in range(len(mat))])
    assert [int(i) for i in m.ids[m.exceptions()[0]]] == [len(mat)]
    q = mat[-1]
    approx, _ = m._from_codes(q)
    assert approx[-1] < np.sort(approx)[-20]  # the codes alone rank it below the near rows
    got = m.search(q, 1, vectors.Filter(), lambda ids: {i: mat[i - 1] for i in ids})
    assert got[0][0] == len(mat) and got[0][1] == pytest.approx(1.0, abs=1e-5)
    # stored and loaded again: the block says which rows are exceptions
    rows, projects, meta, codes = m.pack(np.arange(m.n), {0: None})
    again = vectors._Mirror(dim)
    exceptions = again.add_stored(0, rows, json.loads(projects), meta, codes)
    assert exceptions.tolist() == [m.n - 1]


def test_another_process_write_is_caught_up_from_the_log(store_with_vectors, profile_home):
    eng, ids, mat, crowded = store_with_vectors
    index = vectors.VectorIndex("memories", DIM)
    index.search(eng.con, crowded, 5, vectors.Filter())
    loaded = index._mirror
    with Engine.open(profile_home, embedder=NoEmbedder()) as other:  # another open store: its own connections
        other.space.index = {"memories": vectors.VectorIndex("memories", DIM)}
        other.space._checked = True
        with other.space.mutation() as (con, touched):
            rid = memory_rows.insert(con, uid="mem_new", kind="fact", text="new", chash="hn", importance=0.5,
                                     now=1.0, event_at=None, project=None, source="user", meta=None,
                                     conversation_id=None, document_id=None, done=True, dedup_pending=False)
            vectors.put(con, "memories", [rid], crowded[None, :])
            vectors.delete(con, "memories", [int(ids[0])])
            touched.memories.update({rid, int(ids[0])})
        assert other.space.index["memories"]._mirror is None  # it had none loaded
    got = index.search(eng.con, crowded, 1, vectors.Filter())
    assert got[0][0] == rid and got[0][1] == pytest.approx(1.0, abs=1e-5)
    assert index._mirror is loaded  # caught up, not reloaded
    assert int(ids[0]) not in index._mirror.pos


def test_readers_get_answers_while_a_write_is_open(profile_home):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        first = eng.remember("The spare key is under the blue flowerpot.").id
        inside, readers_done, answers = threading.Event(), threading.Event(), {}

        def writer():
            with eng.store.write() as con:
                memory_rows.insert(con, uid="mem_uncommitted", kind="fact", text="The spare key moved.",
                                   chash="x", importance=0.5, now=0.0, event_at=None, project=None, source="user",
                                   meta=None, conversation_id=None, document_id=None, done=True,
                                   dedup_pending=False)
                inside.set()
                answers["readers finished first"] = readers_done.wait(60)

        def reader():
            inside.wait(60)
            answers["recall"] = [h.id for h in eng.recall("where is the spare key?")]
            answers["get"] = eng.get(first).id
            answers["list"] = [m.id for m in eng.list_memories()]
            answers["stats"] = eng.stats().memories
            readers_done.set()

        threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert answers["readers finished first"]
        assert answers["recall"] == [first] and answers["get"] == first
        assert answers["list"] == [first] and answers["stats"] == 1  # the open write is not seen


def test_a_batch_of_turns_is_stored_once_each(profile_home):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        turns = [Remembered(f"Turn {i}: we talked about the {('garden', 'budget', 'trip')[i % 3]}.", kind="episodic",
                            project="talk", at=1_700_000_000 + i) for i in range(30)]
        turns.append(Remembered("Turn 0: we talked about the garden.", kind="episodic", project="talk",
                                at=1_700_000_000))  # the same turn sent twice: one memory
        turns.append(Remembered("The boiler is serviced every May.", project="talk"))
        turns.append(Remembered("the boiler is serviced every may", project="talk"))  # same words: merged
        results = eng.remember_many(turns)
        assert len(results) == 33
        assert [r.merged for r in results].count(True) == 2
        assert results[30].id == results[0].id and results[32].id == results[31].id
        stored = eng.list_memories(project="talk", limit=100)
        assert len(stored) == 31 == len({m.id for m in stored})
        assert eng.stats().memories == 31
        assert {m.text for m in stored} == {t.text for t in turns[:30]} | {"The boiler is serviced every May."}


def test_new_ids_sort_in_the_order_they_are_made(profile_home):
    """Ids are made in order (so the unique index on uid takes new rows at its end, a page in the cache), and
    stay unique when threads make them at once."""
    import re

    from engine.memory_rules import new_uid

    made: list[list[str]] = [[] for _ in range(4)]

    def make(out: list[str]) -> None:
        out.extend(new_uid("chk") for _ in range(3000))

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    every = [u for out in made for u in out]
    assert len(set(every)) == len(every) == 12_000
    assert all(out == sorted(out) for out in made)
    assert all(re.fullmatch(r"chk_[0-9a-hjkmnp-tv-z]{16}", u) for u in every)
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids = [eng.remember(f"Fact number {i} about the {('shed', 'lake', 'attic')[i % 3]}.").id for i in range(6)]
        ids += [r.id for r in eng.remember_many([Remembered(f"Batch fact {i} on the harbour.") for i in range(6)])]
        assert ids == sorted(ids)
        by_row = [r[0] for r in eng.con.execute("SELECT uid FROM memories ORDER BY id")]
        assert by_row == sorted(by_row) == ids


def test_a_refused_item_stores_nothing_of_its_batch(profile_home):
    from engine import UserError

    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        with pytest.raises(UserError):
            eng.remember_many([Remembered("A good turn."), Remembered("   ")])
        assert eng.stats().memories == 0


def test_the_tallies_match_the_rows(profile_home):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids = [eng.remember(f"Fact number {i} about the shed.").id for i in range(6)]
        eng.remember("We met at the cafe.", kind="episodic")
        eng.update(ids[0], archived=True)
        eng.update(ids[1], kind="procedural")
        eng.forget(ids[2])
        eng.ingest_text("First part about roses.\n\nSecond part about tulips.", "Flowers")
        gone = eng.ingest_text("A note about the hedge.", "Hedge")
        eng.ingest_text("A note about the pond.", "Pond")
        eng.forget(gone.document_id)
        with eng.store.write() as con:  # one given up (as a watcher does after its last attempt)
            con.execute("UPDATE documents SET status = 'failed' WHERE title = 'Pond'")
        s = eng.stats()
        con = eng.con
        count = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
        assert s.memories == count("SELECT count(*) FROM memories WHERE archived = 0 AND source IS NOT 'activity'")
        assert s.archived == count("SELECT count(*) FROM memories WHERE archived = 1") == 1
        assert s.activity == count("SELECT count(*) FROM memories WHERE archived = 0 AND source = 'activity'")
        assert s.by_kind["procedural"] == 1 and s.by_kind["episodic"] == 1 and s.by_kind["fact"] == 3
        assert s.documents == count("SELECT count(*) FROM documents WHERE status = 'ready'") == 1
        assert s.documents_failed == count("SELECT count(*) FROM documents WHERE status = 'failed'") == 1
        assert s.chunks == count("SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id "
                                 "WHERE d.status = 'ready'") > 0
        # rows waiting for a vector (none has one: no embedder), but not a given-up document's chunks: nothing
        # embeds those, so they would be "waiting" for good
        assert s.pending_embeddings == count("SELECT count(*) FROM memories WHERE embedded_hash IS NULL") + count(
            "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id "
            "WHERE d.status != 'failed' AND c.embedded_hash IS NULL")
        assert count("SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id "
                     "WHERE d.status = 'failed'") > 0
        assert s.pending_rollup == count(
            "SELECT count(*) FROM memories WHERE kind = 'episodic' AND processed = 0 AND archived = 0")
        assert s.pending_extraction == count("SELECT count(*) FROM memories WHERE extracted = 0 AND archived = 0") \
            + count("SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id "
                    "WHERE d.status = 'ready' AND c.extracted = 0")  # a given-up document's chunks wait for nothing
        assert any("1 document could not be ingested" in n for n in s.notes), s.notes
        seen: list[str] = []
        con.set_trace_callback(seen.append)
        again = eng.stats()
        con.set_trace_callback(None)
        assert again == s
        # the tallies read once, and two counts beside them, in one snapshot (22 statements before, the tallies
        # read nine times over: more work per call, and calls that could disagree with each other)
        assert [q for q in seen if q not in ("BEGIN", "COMMIT")][0].startswith("SELECT name, n FROM tallies")
        assert len([q for q in seen if q not in ("BEGIN", "COMMIT")]) <= 4, seen


def test_a_reader_in_an_older_transaction_does_not_reload_the_mirror(store_with_vectors, profile_home):
    """A recall reads inside one transaction; a write committed meanwhile has already moved the mirror on:
    the reader's older epoch is not a reason to load it all again."""
    eng, ids, mat, crowded = store_with_vectors
    index = vectors.VectorIndex("memories", DIM)
    eng.space.index = {"memories": index}
    eng.space._checked = True
    index.search(eng.con, crowded, 5, vectors.Filter())
    loaded = index._mirror
    reader = connect(eng.store.path, eng.store._key_pragma)
    try:
        reader.execute("BEGIN")
        before = vectors.read_epoch(reader)
        with eng.space.mutation() as (con, touched):
            vectors.delete(con, "memories", [int(ids[0])])
            touched.memories.add(int(ids[0]))
        assert vectors.read_epoch(reader) == before < vectors.read_epoch(eng.con)
        index.search(reader, crowded, 5, vectors.Filter())
        assert index._mirror is loaded
        reader.execute("COMMIT")
    finally:
        reader.close()


def _bytes_read() -> int:
    """What this thread has read through read() calls so far (a page SQLite does not have cached is one; the
    background threads' reads, of modules imported or of their own connections, are theirs)."""
    line = next(x for x in Path("/proc/thread-self/io").read_text().splitlines() if x.startswith("rchar:"))
    return int(line.split()[1])


def test_every_write_of_a_process_runs_on_one_connection(profile_home):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        seen: list[object] = []

        def write() -> None:
            with eng.store.write() as con:
                seen.append(con)
                assert eng.store.con is con  # what this thread reads in its write sees what it wrote

        threads = [threading.Thread(target=write) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        write()
        assert len(seen) == 4 and all(c is eng.store.writer for c in seen)
        assert eng.store.con is not eng.store.writer  # outside a write: this thread's reader
        uid = eng.remember("The spare key is under the blue pot.").id
        assert eng.get(uid).text == "The spare key is under the blue pot."


@pytest.mark.skipif(not Path("/proc/thread-self/io").exists(), reason="/proc/thread-self/io (Linux) counts what a "
                    "thread reads")
def test_a_process_that_stays_open_keeps_the_duplicate_index_in_the_writers_cache(profile_home, monkeypatch):
    from engine import memories

    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        eng.remember_many([Remembered(f"Note {i} on the allotment rota, bed {i * 7}.") for i in range(3000)])
    monkeypatch.setattr(memories, "CACHED_INDEX_MIN_MEMORIES", 2000)  # "big" for this test
    rng = np.random.default_rng(11)
    hashes = [rng.bytes(32).hex() for _ in range(300)]  # new words: each lookup lands anywhere in the index

    def lookups(con) -> int:
        before = _bytes_read()
        for h in hashes:
            assert memory_rows.same_words(con, h, "fact", None) is None
        return _bytes_read() - before

    with Engine.open(profile_home, actor="cli", embedder=NoEmbedder()) as eng:
        eng.remember("One command, then the process ends.")
        assert eng.store.warm_rounds == 0  # the CLI does without
    with Engine.open(profile_home, actor="api", embedder=NoEmbedder()) as eng:
        eng.start_background()  # what the app, `serve` and MCP start
        store = eng.store

        def rounds(n: int) -> None:
            deadline = time.monotonic() + 30
            while store.warm_rounds < n and time.monotonic() < deadline:
                time.sleep(0.02)
            assert store.warm_rounds >= n
            eng.fts.wait(30)

        rounds(1)
        fresh = store.connect()
        try:
            assert lookups(fresh) >= 4096 * 3  # a connection without it reads the index's pages
        finally:
            fresh.close()
        with store.write_lock:
            assert lookups(store.writer) < 4096  # the writer has them all: not one page read
        other_thread = threading.Thread(target=eng.remember, args=("A write from another thread.",))
        other_thread.start()
        other_thread.join()
        with store.write_lock:
            assert lookups(store.writer) < 4096  # a write from any thread keeps the writer's cache

        other = connect(store.path, store._key_pragma, store.cipher)  # another program writes
        try:
            other.execute("INSERT INTO state(key, value) VALUES ('elsewhere', '1')")
        finally:
            other.close()
        eng.remember("The next write finds its cache emptied by the other program's commit.")
        rounds(2)
        with store.write_lock:
            assert lookups(store.writer) < 4096  # read again
        assert eng.remember("note 7 on the allotment rota, bed 49.").merged  # the lookup still finds words


def test_an_edit_the_vector_mirror_does_not_hold_leaves_it_as_it_is(profile_home):
    with Engine.open(profile_home) as eng:
        uid = eng.remember("The allotment gate code is 4417.", project="garden", embed="sync").id
        eng.recall("allotment gate code", project="garden")  # the mirror is loaded
        before = vectors.read_epoch(eng.con)
        eng.update(uid, importance=0.9)
        assert vectors.read_epoch(eng.con) == before  # nothing for any process's mirror to follow
        assert eng.get(uid).importance == 0.9
        eng.update(uid, project="home")  # a field the mirror filters on
        assert vectors.read_epoch(eng.con) > before
        assert [h.id for h in eng.recall("allotment gate code", project="home")] == [uid]
        assert not [h for h in eng.recall("allotment gate code", project="garden") if h.id == uid]


@pytest.mark.sqlite_only("the SQLite writer's heap and statement cache")
def test_the_background_gives_freed_heap_back_once_writes_have_stopped(eng: Engine):
    """An app left open after an ingest is light at rest: once a whole background pass has seen no new
    writes after some, the C heap's free memory goes back to the OS (engine/heap.py) — once, not on every
    pass of an idle app."""
    if not heap.trim():
        pytest.skip("this platform's C library cannot trim its heap (glibc can)")
    eng.start_background()
    backfill = eng.backfill

    def passes(n: int = 3) -> None:
        for _ in range(n):
            backfill.wake()
            time.sleep(0.3)

    def trims_reach(n: int) -> None:
        deadline = time.monotonic() + 60
        while backfill.trims < n and time.monotonic() < deadline:
            passes(1)
        assert backfill.trims >= n

    def quiet_passes_trim_nothing() -> None:
        trims, changes = backfill.trims, eng.store.changes
        passes()
        if eng.store.changes == changes:  # nothing written meanwhile (by this test or the background)
            assert backfill.trims == trims

    for i in range(5):
        eng.remember(f"The hedge along the lane was cut back on day {i}.")
    trims_reach(1)
    quiet_passes_trim_nothing()
    trims = backfill.trims
    eng.remember("The gate by the orchard now sticks in wet weather.")
    trims_reach(trims + 1)
    quiet_passes_trim_nothing()


def test_a_forget_drops_its_rows_from_the_mirror_without_reading_them_back(profile_home):
    """A deleted row's id is never used again, so the mirror drops it as it is told: reading it back (to find
    it gone) cost a forget at a million rows 0.3 ms, the reader's cache being empty after the commit. An edit
    is still read back."""
    with Engine.open(profile_home) as eng:
        keep = eng.remember("The allotment gate code is 4417.", embed="sync").id
        doomed = eng.remember("The allotment shed key hangs by the back door.", embed="sync").id
        doc = eng.ingest_text("The allotment rota: Sam waters on Mondays.", "Allotment rota").document_id
        assert {h.id for h in eng.recall("allotment")} >= {keep, doomed}
        assert any(h.document_id == doc for h in eng.recall("who waters the allotment on Mondays?"))
        seen: list[str] = []
        eng.con.set_trace_callback(seen.append)  # the reader the mirror follows writes on
        try:
            eng.forget(doomed)
            eng.forget(doc)
            read_back = [s for s in seen if "_f32" in s]
            assert read_back == []
            eng.update(keep, text="The allotment gate code is 5521.")
            assert any("vec_memories_f32" in s for s in seen[len(read_back):])  # an edit is read back
        finally:
            eng.con.set_trace_callback(None)
        hits = eng.recall("allotment")
        assert doomed not in {h.id for h in hits} and keep in {h.id for h in hits}
        assert not any(h.document_id == doc for h in eng.recall("who waters the allotment on Mondays?"))
        index = eng.space.index["memories"]
        assert index._mirror is not None and index._mirror.dead >= 1  # dropped from the loaded mirror, not reloaded


@pytest.mark.sqlite_only("the SQLite writer's heap and statement cache")
def test_the_statements_of_a_long_session_stay_a_set_the_statement_cache_holds(eng: Engine):
    """sqlcipher3's statement cache, once full, keeps a statement it had not seen for one run only: IN lists
    of every length filled it after a few recalls, and from then on `stats` (say) was prepared again on every
    call. IN lists now take a few lengths (engine.db.marks), so the texts a session runs stop growing well
    below the cache's size."""
    from engine.store.sqlite.db import CACHED_STATEMENTS

    words = ("garden", "harbour", "router", "key", "book", "meeting", "bike", "tax", "recipe", "flight")
    for i in range(120):
        eng.remember(f"Note {i}: the {words[i % 10]} and the {words[(i * 7) % 10]} matter on day {i}.")
    texts: set[str] = set()  # as run: the trace shows the values bound in place of the marks
    eng.con.set_trace_callback(texts.add)
    eng.store.writer.set_trace_callback(texts.add)
    try:
        for i in range(60):
            eng.recall(f"what about the {words[i % 10]} {words[(i * 3) % 10]}?", k=1 + i % 20)
            eng.stats()
        eng.forget(eng.list_memories(limit=1)[0].id)
    finally:
        eng.con.set_trace_callback(None)
        eng.store.writer.set_trace_callback(None)
    lists = [m.count(",") + 1 for t in texts for m in re.findall(r" IN \(([^()]*)\)", t) if m and "SELECT" not in m]
    assert len(lists) > 60 and all(n & (n - 1) == 0 for n in lists), sorted(set(lists))  # powers of two only
    forms = {re.sub(r"'[^']*'|\b\d+(\.\d+)?\b", "?", t) for t in texts}
    assert len(forms) < CACHED_STATEMENTS // 4, len(forms)
