"""The full-text indexes are kept in few segments (engine/fts_merge.py): an index that writes left in many
large segments is merged into one in the background, on a real store, without changing what lexical
search finds, and a forget after it still leaves none of the row's words in any page or log frame."""

from __future__ import annotations

import random
from pathlib import Path

from engine import Engine, fts_merge
from engine.embeddings import NoEmbedder
from engine.store.sqlite import memories as memory_rows
from engine.store.sqlite import retrieval
from engine.store.sqlite.maintenance import fts_segments
from engine.store.sqlite.vectors import Filter
from tests.forensics import find
from tests.integration.test_safety import data_key

WORDS = ("garden tomato fence shed compost hedge path rain spade soil harbour lantern ferry kettle "
         "violin parcel meadow ladder").split()


def _write(eng: Engine, batches: int, rows: int, rng: random.Random) -> None:
    """`batches` write transactions of `rows` memories each: one segment each, of similar sizes."""
    n = eng.con.execute("SELECT count(*) FROM memories").fetchone()[0]
    for _ in range(batches):
        with eng.store.write() as con:
            for _ in range(rows):
                text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16))) + f" item{n}"
                memory_rows.insert(con, uid=f"mem_f{n}", kind="fact", text=text, chash=f"h{n}", importance=0.5,
                                   now=1000.0 + n, event_at=None, project=None, source="user", meta=None,
                                   conversation_id=None, document_id=None, done=True, dedup_pending=False)
                n += 1


def test_an_index_left_in_large_segments_is_merged_and_searches_the_same(profile_home: Path, monkeypatch):
    monkeypatch.setattr(fts_merge, "BIG_PAGES", 1)  # every segment counts as large here
    monkeypatch.setattr(fts_merge, "CHECK_WRITES", 1_000_000)  # the merge starts when the test says
    rng = random.Random(3)
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        _write(eng, 3, 600, rng)  # a segment or more each
        shape = fts_segments(eng.con, "memories_fts")
        assert len(shape) > fts_merge.BIG_MAX + 1 and fts_merge.needs_merge(shape), shape
        queries = [["harbour"], ["lantern", "ferry"], ["item17"], ["violin", "kettle", "meadow"]]
        before = [retrieval.lexical_memories(eng.con, q, 25, Filter()) for q in queries]
        assert all(before)
        assert eng.fts.check()  # due: merging on a thread of its own
        assert eng.fts.wait(60)
        assert len(fts_segments(eng.con, "memories_fts")) == 1
        assert [retrieval.lexical_memories(eng.con, q, 25, Filter()) for q in queries] == before
        eng.con.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")  # raises if not
        assert not eng.fts.check()  # one segment: nothing to do
        # a forget after the merge still takes every word of the row out of every page and log frame
        target = eng.remember("The zanzibarquux key hangs by the ferry timetable.").id
        key, db = data_key(profile_home), profile_home / "memory.db"
        assert find(db, key, b"zanzibarquux")
        eng.forget(target)
        assert find(db, key, b"zanzibarquux") == []


def test_writes_start_the_merge_and_a_small_index_is_left_alone(profile_home: Path, monkeypatch):
    monkeypatch.setattr(fts_merge, "BIG_PAGES", 2)
    monkeypatch.setattr(fts_merge, "CHECK_WRITES", 4)
    rng = random.Random(5)
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        for i in range(6):
            eng.remember(f"A short note number {i} about the shed.")
        assert eng.fts.merges == 0 and fts_merge.needs_merge(fts_segments(eng.con, "memories_fts")) is False
        _write(eng, 3, 600, rng)
        for i in range(4):  # at least four write transactions since the last look: it looks again
            eng.remember(f"Another note {i} about the fence.")
        assert eng.fts.wait(60) and eng.fts.merges >= 1
        # the large segments became one (a remember that committed after the merge adds a small one)
        segments = fts_segments(eng.con, "memories_fts")
        assert sum(1 for pages in segments if pages >= fts_merge.BIG_PAGES) == 1, segments
        assert not fts_merge.needs_merge(segments)
        assert eng.stats().memories == 10 + 1800


def test_small_segments_are_merged_among_themselves_and_the_large_one_stays(profile_home: Path, monkeypatch):
    monkeypatch.setattr(fts_merge, "BIG_PAGES", 8)
    monkeypatch.setattr(fts_merge, "CHECK_WRITES", 1_000_000)  # the tidying starts when the test says
    rng = random.Random(9)
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        _write(eng, 1, 2000, rng)  # one large segment
        # small segments beside it, as a big store was found with: FTS5's automerge off makes them here (its
        # crisis merge, at 16 segments a level, still runs)
        eng.con.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('automerge', 0)")
        notes = [eng.remember(f"Note {i}: the {rng.choice(WORDS)} by the {rng.choice(WORDS)} item{i}x.").id
                 for i in range(10)]  # a small segment each
        shape = fts_segments(eng.con, "memories_fts")
        large = [p for p in shape if p >= fts_merge.BIG_PAGES]
        assert len(large) == 1 and fts_merge.needs_tidy(shape) and not fts_merge.needs_merge(shape), shape
        queries = [["harbour"], ["lantern", "ferry"], ["item3x"], ["violin", "kettle", "meadow"]]
        before = [retrieval.lexical_memories(eng.con, q, 25, Filter()) for q in queries]
        assert eng.fts.check() and eng.fts.wait(60)
        after = fts_segments(eng.con, "memories_fts")
        assert eng.fts.tidies == 1 and eng.fts.merges == 0
        assert not fts_merge.needs_tidy(after) and len(after) < len(shape), (shape, after)
        assert [p for p in after if p >= fts_merge.BIG_PAGES] == large  # the large one was not merged
        assert [retrieval.lexical_memories(eng.con, q, 25, Filter()) for q in queries] == before
        eng.con.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")
        eng.forget(notes[3])
        assert retrieval.lexical_memories(eng.con, ["item3x"], 25, Filter()) == []
