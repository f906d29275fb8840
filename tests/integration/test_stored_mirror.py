"""The int8 vector mirror kept in the store (engine/store/sqlite/vectors.py, table vector_mirror): a real encrypted store
whose mirror is written, reopened and searched exactly; writes made after it by another connection or
another process are caught up; a missing, stale, damaged or foreign one is passed over for the rows; and a forgotten memory's
code leaves the stored blocks at once and is never returned nor written back."""

from __future__ import annotations

import mmap
import threading
from pathlib import Path

import numpy as np
import pytest

from engine import Engine
from engine.embeddings import NoEmbedder
from engine.store.sqlite import memories as memory_rows
from engine.store.sqlite import migrations, mirror_layout, vectors
from tests.forensics import find
from tests.integration.test_safety import data_key

DIM = 32
ROWS = 3000  # twelve stored blocks of 256 ids


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _insert(con, i: int, *, project: str | None = None, kind: str = "fact") -> int:
    return memory_rows.insert(con, uid=f"mem_s{i}", kind=kind, text=f"note {i}", chash=f"h{i}", importance=0.5,
                              now=float(i), event_at=None, project=project, source="user", meta=None,
                              conversation_id=None, document_id=None, done=True, dedup_pending=False)


def _fill(eng: Engine, dim: int = DIM, rows: int = ROWS, seed: int = 5):
    """ROWS memories with vectors: half random, half crowded around one direction (the int8 codes cannot
    order those, so the error bounds must be right after a reload too); three projects, three kinds."""
    rng = np.random.default_rng(seed)
    with eng.store.write() as con:
        vectors.create_tables(con, dim)
        ids = [_insert(con, i, project=(None, "p", "q")[i % 3], kind=("fact", "episodic", "procedural")[i % 3 - 1])
               for i in range(rows)]
        base = rng.standard_normal(dim)
        mat = _unit(np.vstack([rng.standard_normal((rows // 2, dim)),
                               base + 0.05 * rng.standard_normal((rows - rows // 2, dim))]))
        vectors.put(con, "memories", ids, mat)
        vectors.bump_epoch(con)
    return np.array(ids), mat, _unit(base[None, :])[0]


def _wire(eng: Engine, dim: int = DIM) -> vectors.VectorIndex:
    """The engine's own memories index, for a store filled through the storage layer."""
    eng.space.index = {"memories": vectors.VectorIndex("memories", dim, store=eng.store)}
    eng.space._checked = True
    return eng.space.index["memories"]


def _stored(eng):
    """A filled store whose mirror loaded from the rows and was then stored: (ids, mat, crowded, index)."""
    ids, mat, crowded = _fill(eng)
    index = _wire(eng)
    index.search(eng.con, crowded, 5, vectors.Filter())
    assert index.save()
    return ids, mat, crowded, index


def _exact(con, q: np.ndarray, k: int, f: vectors.Filter) -> list[int]:
    """The exact top k under the filter, from the float copy and the rows (nothing of the mirror)."""
    rows = con.execute("SELECT v.id, v.embedding, m.project, m.kind, m.archived, coalesce(m.event_at, m.created_at) "
                       "FROM vec_memories_f32 v JOIN memories m ON m.id = v.id").fetchall()
    keep = [(rid, float(np.frombuffer(blob, np.float32) @ q)) for rid, blob, project, kind, archived, t in rows
            if (f.projects is None or project in f.projects) and (f.kinds is None or kind in f.kinds)
            and (f.include_archived or not archived) and (f.since is None or t >= f.since)]
    keep.sort(key=lambda x: (-x[1], x[0]))
    return [rid for rid, _ in keep[:k]]


FILTERS = [vectors.Filter(), vectors.Filter(projects={"p"}), vectors.Filter(kinds={"episodic"}),
           vectors.Filter(projects={None, "q"}, since=1000.0), vectors.Filter(include_archived=True)]


def _probes(mat: np.ndarray, crowded: np.ndarray) -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    return [crowded, *_unit(rng.standard_normal((6, mat.shape[1]))), *_unit(mat[rng.integers(0, len(mat), 4)] + 0.01)]


def _first_then_loaded(index: vectors.VectorIndex, con, q: np.ndarray, k: int, f: vectors.Filter):
    """A fresh index's first search reads the stored blocks as it goes (no mirror is loaded); the second
    loads the mirror; both answer the same, which is returned."""
    first = index.search(con, q, k, f)
    assert index._mirror is None and index._streams == 1
    second = index.search(con, q, k, f)
    assert index._mirror is not None and second == first
    return second


def _assert_exact(index: vectors.VectorIndex, con, probes) -> None:
    for q in probes:
        for f in FILTERS:
            for k in (1, 10, 40):
                assert [i for i, _ in index.search(con, q, k, f)] == _exact(con, q, k, f)


def test_the_stored_mirror_reopens_and_answers_exactly(profile_home, monkeypatch):
    monkeypatch.setattr(vectors, "POPULATE_MIN_BYTES", 0)  # the arrays of a loading mirror mapped at once
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids, mat, crowded = _fill(eng)
        first = _wire(eng)
        first.search(eng.con, crowded, 5, vectors.Filter())
        assert first.loaded_from == "rows"
        assert first.save()
        blocks = eng.con.execute("SELECT block, rows, length(codes) FROM vector_mirror WHERE tbl = 0 ORDER BY block"
                                 ).fetchall()
        assert [b for b, _, _ in blocks] == sorted({int(i) // vectors.STORED_IDS for i in ids})
        assert sum(r for _, r, _ in blocks) == ROWS and all(n == r * DIM for _, r, n in blocks)
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:  # reopened: new connections, new process state
        index = _wire(eng)
        _assert_exact(index, eng.con, _probes(mat, crowded))
        assert index.loaded_from == "stored"
        assert index.resident_bytes(vectors_only=True) <= 0.25 * mat.nbytes  # the codes alone
        if hasattr(mmap, "MAP_POPULATE"):
            base = index._mirror.codes
            while isinstance(base, np.ndarray):
                base = base.base
            assert isinstance(base.obj if isinstance(base, memoryview) else base, mmap.mmap)
        # rows written after the load grow those arrays like any other
        with eng.store.write() as con:
            new = _insert(con, ROWS + 10)
            vectors.put(con, "memories", [new], crowded[None, :])
            e = vectors.bump_epoch(con)
            vectors.log_changes(con, e, {new}, set())
        assert index.search(eng.con, crowded, 1, vectors.Filter())[0][0] == new
        _assert_exact(index, eng.con, _probes(mat, crowded)[:3])


def test_writes_after_the_stored_mirror_are_caught_up(profile_home):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids, mat, crowded, index = _stored(eng)
        # another open store (its own connections) writes through the engine's write path: a new row, a
        # re-embedded row, a row whose vector goes, an archived row and a row moved to another project
        with Engine.open(profile_home, embedder=NoEmbedder()) as other:
            _wire(other)
            with other.space.mutation() as (con, touched):
                new = _insert(con, 99_999, project="p")
                vectors.put(con, "memories", [new], crowded[None, :])
                vectors.put(con, "memories", [int(ids[1])], -crowded[None, :])
                vectors.delete(con, "memories", [int(ids[2])])
                con.execute("UPDATE memories SET archived = 1 WHERE id = ?", (int(ids[-1]),))
                con.execute("UPDATE memories SET project = 'r' WHERE id = ?", (int(ids[-2]),))
                touched.memories.update({new, int(ids[1]), int(ids[2]), int(ids[-1]), int(ids[-2])})
        fresh = _wire(eng)
        got = _first_then_loaded(fresh, eng.con, crowded, 3, vectors.Filter())
        assert fresh.loaded_from == "stored"
        assert got[0][0] == new and got[0][1] == pytest.approx(1.0, abs=1e-5)
        assert int(ids[2]) not in fresh._mirror.pos
        assert [i for i, _ in fresh.search(eng.con, crowded, 2, vectors.Filter(projects={"r"}))] == [int(ids[-2])]
        assert int(ids[-1]) not in [i for i, _ in fresh.search(eng.con, crowded, ROWS, vectors.Filter())]
        _assert_exact(fresh, eng.con, _probes(mat, crowded))
        # brought up to date, the stored blocks alone (nothing to catch up) answer the same
        assert fresh.save()
        again = _wire(eng)
        _assert_exact(again, eng.con, _probes(mat, crowded))
        assert again.loaded_from == "stored"


def test_a_missing_stale_damaged_or_foreign_stored_mirror_is_passed_over(profile_home):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids, mat, crowded = _fill(eng)
        probes = _probes(mat, crowded)[:3]
        index = _wire(eng)
        index.search(eng.con, crowded, 5, vectors.Filter())

        def reload() -> str | None:
            """A fresh index (as a reopened store has) answers exactly; it is the one that saves next, as the
            engine's own index does (a damaged block it found makes it write every block)."""
            nonlocal index
            index = _wire(eng)
            _assert_exact(index, eng.con, probes)
            return index.loaded_from

        assert index.save() and reload() == "stored"
        with eng.store.write() as con:  # missing
            vectors.drop_stored(con)
        assert reload() == "rows"

        assert index.save() and reload() == "stored"
        with eng.store.write() as con:  # a block of the wrong size
            con.execute("UPDATE vector_mirror SET codes = zeroblob(7) WHERE block = 1")
        assert reload() == "rows"

        assert index.save() and reload() == "stored"
        with eng.store.write() as con:  # ids out of their block
            meta = bytearray(con.execute("SELECT meta FROM vector_mirror WHERE block = 0").fetchone()[0])
            meta[:8] = (5_000_000).to_bytes(8, "little")
            con.execute("UPDATE vector_mirror SET meta = ? WHERE block = 0", (bytes(meta),))
        assert reload() == "rows"

        assert index.save() and reload() == "stored"
        with eng.store.write() as con:  # a head that does not parse, then one of another dimension
            con.execute("UPDATE state SET value = '{not json' WHERE key = 'vector_mirror:memories'")
        assert reload() == "rows"
        assert index.save() and reload() == "stored"
        with eng.store.write() as con:
            con.execute("UPDATE state SET value = json_set(value, '$.dim', 384) WHERE key = 'vector_mirror:memories'")
        assert reload() == "rows"

        assert index.save() and reload() == "stored"
        with eng.store.write() as con:  # writes the vector log does not cover: older than the log reaches
            vectors.bump_epoch(con)
        assert reload() == "rows"

        assert index.save() and reload() == "stored"
        with eng.store.write() as con:  # another embedding space: the vector tables start over
            from engine.store.sqlite import space as space_rows

            space_rows.restamp(con, ("test", "other", DIM, "1"))
        assert eng.con.execute("SELECT count(*) FROM vector_mirror").fetchone()[0] == 0
        assert vectors.read_head(eng.con, "memories") is None


def test_forget_erases_the_stored_code_and_it_never_comes_back(profile_home):
    dim = 384  # the codes of one row are long enough to look for in the file's pages
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids, mat, crowded = _fill(eng, dim=dim, rows=2500)
        index = _wire(eng, dim)
        index.search(eng.con, crowded, 5, vectors.Filter())
        assert index.save()
        victim = int(ids[1800])
        block = victim // vectors.STORED_IDS
        m = index._mirror
        code = m.codes[m.pos.get(victim)].tobytes()
        key, db = data_key(profile_home), profile_home / "memory.db"
        assert find(db, key, code[:64])  # the check can see it while it is stored
        uid = eng.con.execute("SELECT uid FROM memories WHERE id = ?", (victim,)).fetchone()[0]
        before = _block(eng.con, block)
        eng.forget(uid)
        # forgotten in its block in the forget's own transaction: its codes are zeros, it is flagged gone,
        # every other row of the block is as it was
        after = _block(eng.con, block)
        at = list(before["ids"]).index(victim)
        assert list(after["ids"]) == list(before["ids"])
        assert after["flags"][at] == mirror_layout.GONE and not after["codes"][at].any()
        assert after["t"][at] == 0 and after["kind"][at] == 0 and after["archived"][at] == 0
        others = np.arange(len(before["ids"])) != at
        for name in ("codes", "t", "proj", "kind", "archived", "flags"):
            assert np.array_equal(after[name][others], before[name][others]), name
        assert find(db, key, code[:64]) == []  # no page or log frame keeps its codes
        fresh = _wire(eng, dim)
        hits = _first_then_loaded(fresh, eng.con, mat[1800], 10, vectors.Filter(include_archived=True))
        assert victim not in [i for i, _ in hits] and fresh.loaded_from == "stored"
        assert victim not in fresh._mirror.pos
        # written again (the other rows of the block come back, not the forgotten one)
        assert fresh.save()
        rows = eng.con.execute("SELECT rows FROM vector_mirror WHERE tbl = 0 AND block = ?", (block,)).fetchone()[0]
        assert rows == int(np.sum(ids // vectors.STORED_IDS == block)) - 1
        again = _wire(eng, dim)
        assert victim not in [i for i, _ in again.search(eng.con, mat[1800], 10, vectors.Filter())]
        eng.compact()
        assert find(db, key, code[:64]) == []


def _block(con, block: int, tbl: int = 0) -> dict[str, np.ndarray]:
    """A stored block's arrays, as its bytes say (engine/store/sqlite/mirror_layout.py)."""
    rows, meta, codes = con.execute("SELECT rows, meta, codes FROM vector_mirror WHERE tbl = ? AND block = ?",
                                    (tbl, block)).fetchone()
    out = mirror_layout.arrays(meta, rows)
    out["flags"] = out.pop("exception")
    out["codes"] = np.frombuffer(codes, dtype=np.int8).reshape(rows, -1)
    return out


def _gone(con, block: int) -> list[int]:
    return [int(i) for i in mirror_layout.flagged(
        con.execute("SELECT meta FROM vector_mirror WHERE tbl = 0 AND block = ?", (block,)).fetchone()[0],
        mirror_layout.GONE)]


def test_blocks_stored_at_another_size_go_when_the_store_opens_and_forget_erases_the_new_ones(profile_home,
                                                                                           monkeypatch):
    """A store whose blocks (and erasing triggers) were made for another block size, as earlier versions
    made them: opening drops them in the same transaction as it replaces the triggers, so no stored code
    is left that a forget would not erase; the mirror is stored again at the current size."""
    current = vectors.STORED_IDS
    monkeypatch.setattr(vectors, "STORED_IDS", 1024)
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids, mat, crowded, _ = _stored(eng)
        assert eng.con.execute("SELECT count(*) FROM vector_mirror").fetchone()[0] == 3
    monkeypatch.setattr(vectors, "STORED_IDS", current)
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        with eng.store.write() as con:
            vectors.create_tables(con, DIM)  # as opening the store does
        assert eng.con.execute("SELECT count(*) FROM vector_mirror").fetchone()[0] == 0
        assert vectors.read_head(eng.con, "memories") is None
        index = _wire(eng)
        _assert_exact(index, eng.con, _probes(mat, crowded)[:3])
        assert index.loaded_from == "rows" and index.save()
        blocks = {b for (b,) in eng.con.execute("SELECT block FROM vector_mirror WHERE tbl = 0")}
        assert blocks == {int(i) // current for i in ids}
        victim = int(ids[700])
        eng.forget(eng.con.execute("SELECT uid FROM memories WHERE id = ?", (victim,)).fetchone()[0])
        assert _gone(eng.con, victim // current) == [victim]


def test_a_mirror_that_missed_a_delete_does_not_write_the_row_back(profile_home):
    """Belt and braces: a vector deleted behind the mirror's back (no epoch, no log) is flagged gone in its
    block by trigger, a mirror loaded from the blocks passes over it, and writing that block again from a
    mirror that still holds it keeps only rows whose vector is still there."""
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids, mat, crowded, index = _stored(eng)
        victim = int(ids[10])
        with eng.store.write() as con:
            con.execute("DELETE FROM memories WHERE id = ?", (victim,))  # the mirror is not told
        assert victim in index._mirror.pos
        assert _gone(eng.con, victim // vectors.STORED_IDS) == [victim]
        fresh = _wire(eng)
        hits = _first_then_loaded(fresh, eng.con, mat[10], 5, vectors.Filter(include_archived=True))
        assert fresh.loaded_from == "stored" and victim not in fresh._mirror.pos
        assert victim not in [i for i, _ in hits] and int(ids[11]) in fresh._mirror.pos
        with eng.store.write() as con:  # an ordinary logged write, so the save has something to do
            con.execute("UPDATE memories SET archived = 1 WHERE id = ?", (int(ids[20]),))
            e = vectors.bump_epoch(con)
            vectors.log_changes(con, e, {int(ids[20])}, set())
        assert index.save()
        meta = eng.con.execute("SELECT meta, rows FROM vector_mirror WHERE tbl = 0 AND block = ?",
                               (victim // vectors.STORED_IDS,)).fetchone()
        stored_ids = np.frombuffer(meta[0], dtype=np.int64, count=meta[1])
        assert victim not in stored_ids and int(ids[11]) in stored_ids


def test_a_vector_changed_in_place_erases_its_block_and_an_older_trigger_is_replaced(profile_home):
    """A vector row rewritten in place (not the engine's way: `put` deletes and inserts) erases its whole
    block, which a fresh mirror then reads from the rows. A store made by an earlier version, whose delete
    trigger erased whole blocks, gets the trigger that flags the row when the store opens, its blocks kept."""
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids, mat, crowded, _ = _stored(eng)
        changed = int(ids[30])
        with eng.store.write() as con:
            con.execute("UPDATE vec_memories_f32 SET embedding = ? WHERE id = ?", (crowded.tobytes(), changed))
            e = vectors.bump_epoch(con)
            vectors.log_changes(con, e, {changed}, set())
        assert vectors.erased_blocks(eng.con, "memories") == {changed // vectors.STORED_IDS}
        fresh = _wire(eng)
        assert _first_then_loaded(fresh, eng.con, crowded, 1, vectors.Filter())[0][0] == changed
        assert fresh.loaded_from == "stored"

        old = vectors._mirror_trigger_sql("memories", 0, "UPDATE").replace("_u AFTER UPDATE", "_d AFTER DELETE")

        def trigger() -> str:
            return eng.con.execute("SELECT sql FROM sqlite_master WHERE name = 'memories_f32_mirror_d'").fetchone()[0]

        for upgrade in (migrations.m010_mirror_forget_in_place, lambda con: vectors.create_tables(con, DIM)):
            with eng.store.write() as con:
                con.execute("DROP TRIGGER memories_f32_mirror_d")
                con.execute(old)
            with eng.store.write() as con:
                upgrade(con)  # the migration, or opening the store
            assert trigger() == vectors._mirror_trigger_sql("memories", 0, "DELETE")
        schema = eng.con.execute("PRAGMA schema_version").fetchone()[0]
        with eng.store.write() as con:
            vectors.create_tables(con, DIM)  # up to date: nothing is dropped and made again
        assert eng.con.execute("PRAGMA schema_version").fetchone()[0] == schema
        blocks = eng.con.execute("SELECT count(*) FROM vector_mirror WHERE tbl = 0 AND codes IS NOT NULL").fetchone()[0]
        assert blocks == len({int(i) // vectors.STORED_IDS for i in ids}) - 1
        victim = int(ids[700])
        eng.forget(eng.con.execute("SELECT uid FROM memories WHERE id = ?", (victim,)).fetchone()[0])
        assert _gone(eng.con, victim // vectors.STORED_IDS) == [victim]


def test_the_mirror_is_stored_in_the_background_and_kept_up_to_date(profile_home, monkeypatch):
    """Through the engine's own write path: a big enough mirror loaded from the rows is stored without being
    asked, and REFRESH_EPOCHS writes later the changed blocks are written again (the others stay)."""
    monkeypatch.setattr(vectors, "STORED_MIN_ROWS", 1000)
    monkeypatch.setattr(vectors, "REFRESH_EPOCHS", 3)
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids, mat, crowded = _fill(eng)
        index = _wire(eng)
        index.search(eng.con, crowded, 5, vectors.Filter())  # loads from the rows, then stores
        index.wait_saved(60)
        head = vectors.read_head(eng.con, "memories")
        assert head is not None and head["epoch"] == vectors.read_epoch(eng.con)
        first = dict(eng.con.execute("SELECT block, epoch FROM vector_mirror WHERE tbl = 0").fetchall())
        for n in range(3):
            with eng.space.mutation() as (con, touched):
                con.execute("UPDATE memories SET archived = 1 WHERE id = ?", (int(ids[n]),))
                touched.memories.add(int(ids[n]))
        index.wait_saved(60)
        head = vectors.read_head(eng.con, "memories")
        assert head is not None and head["epoch"] == vectors.read_epoch(eng.con)
        now = dict(eng.con.execute("SELECT block, epoch FROM vector_mirror WHERE tbl = 0").fetchall())
        assert now[0] > first[0] and all(now[b] == first[b] for b in first if b != 0)  # only block 0 changed
        fresh = _wire(eng)
        hits = _first_then_loaded(fresh, eng.con, crowded, ROWS, vectors.Filter())
        assert not {int(i) for i in ids[:3]} & {i for i, _ in hits} and fresh.loaded_from == "stored"


def test_a_stored_mirror_loads_ahead_of_the_first_search(profile_home):
    """preload (a search that loads one table's mirror calls it for the others): a stored mirror loads on a
    thread of its own; a store with nothing stored is left to load when searched."""
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids, mat, crowded = _fill(eng)
        index = _wire(eng)
        index.preload()
        assert index._mirror is None and not index._lock.locked()  # nothing stored: nothing started
        index.search(eng.con, crowded, 5, vectors.Filter())
        assert index.save()
        fresh = _wire(eng)
        fresh.preload()
        for _ in range(600):
            if fresh._mirror is not None:
                break
            threading.Event().wait(0.05)
        assert fresh._mirror is not None and fresh.loaded_from == "stored"
        _assert_exact(fresh, eng.con, _probes(mat, crowded)[:2])


OTHER_PROCESS = """
import sys
import numpy as np
from engine import Engine
from engine.store.sqlite import vectors
from engine.embeddings import NoEmbedder
from engine.store.sqlite import memories as memory_rows

dim, gone = int(sys.argv[1]), int(sys.argv[2])
q = np.frombuffer(bytes.fromhex(sys.argv[3]), dtype=np.float32)
with Engine.open(embedder=NoEmbedder()) as eng:
    eng.space.index = {"memories": vectors.VectorIndex("memories", dim, store=eng.store)}
    eng.space._checked = True
    with eng.space.mutation() as (con, touched):
        rid = memory_rows.insert(con, uid="mem_elsewhere", kind="fact", text="from another process", chash="x",
                                 importance=0.5, now=1.0, event_at=None, project=None, source="user", meta=None,
                                 conversation_id=None, document_id=None, done=True, dedup_pending=False)
        vectors.put(con, "memories", [rid], q[None, :])
        con.execute("DELETE FROM memories WHERE id = ?", (gone,))
        touched.memories.update({rid, gone})
    print(rid)
"""


def test_another_process_writing_after_the_stored_mirror_is_caught_up(profile_home):
    import subprocess
    import sys

    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids, mat, crowded, index = _stored(eng)
        gone = int(ids[5])
        out = subprocess.run([sys.executable, "-c", OTHER_PROCESS, str(DIM), str(gone), crowded.tobytes().hex()],
                             capture_output=True, text=True, timeout=120, check=True,
                             cwd=Path(__file__).resolve().parents[2])
        rid = int(out.stdout.strip())
        assert _gone(eng.con, gone // vectors.STORED_IDS) == [gone]  # forgotten in its block over there too
        fresh = _wire(eng)
        got = _first_then_loaded(fresh, eng.con, crowded, 1, vectors.Filter())
        assert fresh.loaded_from == "stored" and got[0][0] == rid
        assert gone not in fresh._mirror.pos
        _assert_exact(fresh, eng.con, _probes(mat, crowded)[:3])


SHORT_LIVED = """
import time

from engine import Engine
from engine.store.sqlite import vectors
from engine.embeddings import NoEmbedder
from tests.integration.test_stored_mirror import _fill, _wire

vectors.STORED_MIN_ROWS = 1000
vectors.SAVE_BLOCKS = 1
slow = vectors.VectorIndex._pack_current


def slowly(*args, **kwargs):  # a big store's save takes a while: the process must still finish it
    time.sleep(0.4)
    return slow(*args, **kwargs)


vectors.VectorIndex._pack_current = slowly
with Engine.open(embedder=NoEmbedder()) as eng:
    ids, mat, crowded = _fill(eng)
    _wire(eng).search(eng.con, crowded, 5, vectors.Filter())  # loads from the rows, starts storing
print("exiting")
"""


def test_a_short_lived_process_finishes_storing_before_it_exits(profile_home):
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", SHORT_LIVED], capture_output=True, text=True, timeout=120, check=True,
                   cwd=Path(__file__).resolve().parents[2])
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        head = vectors.read_head(eng.con, "memories")
        assert head is not None and head["epoch"] == vectors.read_epoch(eng.con)
        assert eng.con.execute("SELECT sum(rows) FROM vector_mirror WHERE tbl = 0").fetchone()[0] == ROWS


def test_a_vector_the_codes_cannot_hold_is_kept_exact_through_a_reopen(profile_home, monkeypatch):
    """The codes share one scale, made for a unit vector's components; a vector with a component beyond
    their range (a spike) errs by more than the one bound, so it is an exception: kept in float32, scored
    exactly, flagged in its stored block and read from the float copy when the blocks load again."""
    monkeypatch.setattr(vectors, "CODE_LIMIT", 4.5)  # at 32 dimensions: 0.8 maps to 127 (a spike is 0.98)
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids, mat, crowded = _fill(eng)
        rng = np.random.default_rng(3)
        spikes = 0.2 * _unit(rng.standard_normal((5, DIM)))
        spikes[np.arange(5), np.arange(5)] += 0.95
        spikes = _unit(spikes)
        with eng.store.write() as con:
            spiked = [_insert(con, ROWS + i) for i in range(5)]
            vectors.put(con, "memories", spiked, spikes)
            vectors.bump_epoch(con)
        index = _wire(eng)
        index.search(eng.con, crowded, 5, vectors.Filter())
        m = index._mirror
        assert sorted(int(i) for i in m.ids[m.exceptions()[0]]) == spiked  # only those
        assert index.resident_bytes(vectors_only=True) == 0.25 * (ROWS + 5) * DIM * 4 + 5 * (DIM * 4 + 9)
        assert index.save()
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        index = _wire(eng)
        probes = [*_unit(spikes + 0.05 * rng.standard_normal((5, DIM))), *_probes(mat, crowded)[:3]]
        for q in probes:  # the first search reads the blocks as it goes, the second loads them
            for k in (1, 10):
                assert [i for i, _ in _first_then_loaded(index, eng.con, q, k, vectors.Filter())] == \
                    _exact(eng.con, q, k, vectors.Filter())
                index._mirror, index._streams = None, 0
        _first_then_loaded(index, eng.con, crowded, 5, vectors.Filter())
        assert index.loaded_from == "stored"
        m = index._mirror
        assert sorted(int(i) for i in m.ids[m.exceptions()[0]]) == spiked
        top = index.search(eng.con, spikes[0], 1, vectors.Filter())
        assert top[0][0] == spiked[0] and top[0][1] == pytest.approx(1.0, abs=1e-6)  # exact, not from codes
        eng.forget(f"mem_s{ROWS}")
        assert spiked[0] not in {int(i) for i in m.ids[m.exceptions()[0]]}
        assert index.search(eng.con, spikes[0], 1, vectors.Filter())[0][0] != spiked[0]


def test_the_bound_of_the_codes_norms_comes_with_the_blocks_or_is_computed(profile_home):
    """The simsimd scan quantizes the query too, so its error bound needs the largest ||scale * code||:
    stored with the blocks' head, or computed from the codes for a head written without it."""
    import json

    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids, mat, crowded, index = _stored(eng)
        stored = vectors.read_head(eng.con, "memories")
        assert stored is not None and stored["vmax"] >= index._mirror.code_norm_max() * 0.999
        fresh = _wire(eng)
        _assert_exact(fresh, eng.con, _probes(mat, crowded)[:4])
        assert fresh.loaded_from == "stored" and fresh._mirror.vmax == stored["vmax"]
        with eng.store.write() as con:  # a head from before the bound was kept
            del stored["vmax"]
            con.execute("UPDATE state SET value = ? WHERE key = ?", (json.dumps(stored), vectors.HEAD_KEY + "memories"))
        older = _wire(eng)
        _assert_exact(older, eng.con, _probes(mat, crowded)[:4])
        assert older.loaded_from == "stored"
        assert abs(older._mirror.vmax - older._mirror.code_norm_max()) < 1e-6 and older._mirror.vmax > 0.9


def _exact_windows(con, q: np.ndarray, k: int, f: vectors.Filter) -> list[int]:
    """_exact with each memory's score the best of its own cosine and its windows'."""
    wins: dict[int, float] = {}
    for rid, blob in con.execute(vectors._WINDOWS):
        wins[rid] = max(wins.get(rid, -np.inf), float(np.frombuffer(blob, np.float32) @ q))
    rows = con.execute("SELECT v.id, v.embedding, m.project, m.kind, m.archived, coalesce(m.event_at, m.created_at) "
                       "FROM vec_memories_f32 v JOIN memories m ON m.id = v.id").fetchall()
    keep = [(rid, max(float(np.frombuffer(blob, np.float32) @ q), wins.get(rid, -np.inf)))
            for rid, blob, project, kind, archived, t in rows
            if (f.projects is None or project in f.projects) and (f.kinds is None or kind in f.kinds)
            and (f.include_archived or not archived) and (f.since is None or t >= f.since)]
    keep.sort(key=lambda x: (-x[1], x[0]))
    return [rid for rid, _ in keep[:k]]


def test_a_first_search_reads_the_stored_blocks_as_it_goes_and_answers_exactly(profile_home, monkeypatch):
    """With no mirror loaded, a process's first search of a table scans the stored blocks group by group (here
    on two threads, many groups) and holds no mirror; with rows written since the blocks (through the
    engine's write path), rows gone from their blocks, windows and filters it answers as an exact scan does,
    and the same as the mirror the next search loads. Stored blocks due to be written again are loaded."""
    from engine.embeddings import Windows

    monkeypatch.setattr(vectors, "STREAM_ROWS", 300)  # ten groups of blocks
    monkeypatch.setattr(vectors, "STREAM_SPLIT_BLOCKS", 2)  # and a helper thread for the second half
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        ids, mat, crowded, _ = _stored(eng)
        rng = np.random.default_rng(3)
        with eng.space.mutation() as (con, touched):
            new = _insert(con, 50_000, project="p")
            vectors.put(con, "memories", [new], crowded[None, :])  # after the blocks
            vectors.put(con, "memories", [int(ids[1])], -crowded[None, :])  # re-embedded
            vectors.delete(con, "memories", [int(ids[2])])  # flagged gone in its block
            con.execute("UPDATE memories SET archived = 1 WHERE id = ?", (int(ids[-1]),))
            # a long memory: its windows match a probe better than its own vector
            long_id = int(ids[2600])
            vectors.put(con, "memories", [long_id], mat[2600][None, :],
                        [Windows(_unit(rng.standard_normal((3, DIM))), [(0, 5), (5, 9), (9, 12)])])
            touched.memories.update({new, int(ids[1]), int(ids[2]), int(ids[-1]), long_id})
        window = np.frombuffer(eng.con.execute(vectors._WINDOWS + " WHERE w.memory_id = ?", (long_id,))
                               .fetchone()[1], np.float32)
        probes = [*_probes(mat, crowded)[:5], window]
        for q in probes:
            for f in FILTERS:
                for k in (1, 10, 40):
                    fresh = _wire(eng)
                    got = fresh.search(eng.con, q, k, f)
                    assert fresh._mirror is None and fresh.resident_bytes() == 0  # nothing loaded
                    assert [i for i, _ in got] == _exact_windows(eng.con, q, k, f)
        fresh = _wire(eng)
        assert fresh.search(eng.con, window, 1, vectors.Filter())[0][0] == long_id
        assert fresh.search(eng.con, window, 1, vectors.Filter(), windows=False)[0][0] != long_id  # loaded now
        assert fresh._mirror is not None and fresh.loaded_from == "stored"
        for q in probes:  # the loaded mirror answers the same
            assert [i for i, _ in fresh.search(eng.con, q, 10, FILTERS[1])] == _exact_windows(eng.con, q, 10, FILTERS[1])

        # the near-duplicate check of a fresh index reads the blocks too, and finds what a scan finds
        near = _wire(eng)
        q = _unit(mat[100][None, :] + 0.02 * rng.standard_normal((1, DIM)))[0]
        got = near.near(eng.con, q, 0.9, vectors.Filter())
        assert near._mirror is None
        scan = sorted((rid, float(np.frombuffer(b, np.float32) @ q)) for rid, b in
                      eng.con.execute("SELECT id, embedding FROM vec_memories_f32"))
        assert sorted(r for r, _ in got) == sorted(r for r, c in scan if c >= 0.9) and int(ids[100]) in {r for r, _ in got}

        # blocks due to be written again: the first search loads the mirror (which then stores them)
        monkeypatch.setattr(vectors, "STREAM_MAX_CHANGED", 0)
        due = _wire(eng)
        assert [i for i, _ in due.search(eng.con, crowded, 10, vectors.Filter())] == \
            _exact_windows(eng.con, crowded, 10, vectors.Filter())
        assert due._mirror is not None and due.loaded_from == "stored"


CLOSE_WHILE_LOADING = """
import time

from engine import Engine
from engine.store.sqlite import vectors
from engine.embeddings import NoEmbedder
from tests.integration.test_stored_mirror import _stored, _wire

add = vectors._Mirror.add_stored


def slowly(*args, **kwargs):  # a big store's load takes a while
    time.sleep(0.05)
    return add(*args, **kwargs)


with Engine.open(embedder=NoEmbedder()) as eng:
    _stored(eng)
vectors._Mirror.add_stored = slowly
eng = Engine.open(embedder=NoEmbedder())
index = _wire(eng)
index.preload()
time.sleep(0.2)
assert index._loading
t0 = time.monotonic()
eng.close()  # while the mirror loads in the background
assert not index._loader.is_alive() and index._mirror is None
print("closed in", round(time.monotonic() - t0, 2))
"""


def test_closing_the_store_while_a_mirror_loads_in_the_background(profile_home):
    """The background load stops at its next block and is waited for: no crash (a connection closed under
    a running statement used to end the process), nothing left running."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", CLOSE_WHILE_LOADING], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("closed in") and float(out.stdout.split()[-1]) < 1.0
