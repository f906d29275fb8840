"""Long memories are searched by meaning in all their parts, not only in the first 256 word-pieces."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine import Engine
from engine.config import Settings
from engine.embeddings import WINDOW_STRIDE, WINDOW_TOKENS
from engine.store.sqlite.vectors import Filter, VectorIndex

# ~420 word-pieces of house notes; the one line about passports comes last, far past the model's window.
HOUSE_NOTES = " ".join([
    "House notes for the autumn.",
    "The boiler was serviced in September and the engineer said the pressure should sit between one and",
    "one and a half bar; top it up with the filling loop under the sink if it drops.",
    "The gutters on the north side overflow when leaves collect, so clear them after the big storms.",
    "The smoke alarms take nine-volt batteries and chirp when they are low; spares are in the hall drawer.",
    "The garden tap must be drained before the first frost, otherwise the pipe behind the wall splits.",
    "The washing machine filter clogs with coins, so empty pockets and clean the filter every month.",
    "Recycling goes out on Tuesday evenings, glass on the first Friday of the month.",
    "The fence panel by the shed is loose and needs two new posts before winter winds arrive.",
    "The loft hatch sticks in damp weather; lift it from the left corner rather than the middle.",
    "The radiator in the small bedroom needs bleeding every October, the key hangs by the meter.",
    "The window seals in the kitchen were replaced last year and the guarantee lasts ten years.",
    "The chimney was swept in May and should be swept again before the log burner is used a lot.",
    "Mice came in through the air brick behind the cooker, which now has a steel mesh cover.",
    "The porch light is on a timer that drifts, so reset it when the clocks change.",
    "Paint for the hallway is Antique Cream, two tins are left in the garage on the top shelf.",
    "The dishwasher salt runs out every six weeks and the light on the front panel shows it.",
    "The stopcock is under the stairs behind the vacuum cleaner, turn it clockwise to close.",
    "The passports for the whole family are kept in the green folder on the bookshelf in the study.",
])
OTHERS = [
    "The car keys hang on the hook by the front door.",
    "Grandma's birthday is on the third of March.",
    "The Wi-Fi password is printed under the router.",
    "Our dentist appointment is on Thursday at nine.",
]
QUESTION = "Where is my passport?"


def test_windows_cover_a_long_text_and_skip_a_short_one(embedder):
    assert embedder.windows("A short note about tea.") == []
    wins = embedder.windows(HOUSE_NOTES)
    tok = embedder._tokenizer_for_windows()
    n = len(tok.encode(HOUSE_NOTES, add_special_tokens=False).ids)
    assert n > 256  # longer than the model reads in one pass
    assert len(wins) == -(-(n - WINDOW_TOKENS) // WINDOW_STRIDE) + 1
    assert HOUSE_NOTES.startswith(wins[0]) and HOUSE_NOTES.endswith(wins[-1])
    assert all(len(tok.encode(w, add_special_tokens=False).ids) <= WINDOW_TOKENS for w in wins)
    assert "passports" in wins[-1]
    for w in wins:  # windows begin and end on whole words
        i = HOUSE_NOTES.index(w)
        assert (i == 0 or not HOUSE_NOTES[i - 1].isalnum()) and not HOUSE_NOTES[i + len(w) :][:1].isalnum()
    cjk = embedder.windows("東京都の天気" * 100)  # every CJK character is a word of its own
    assert len(cjk) > 3 and all(len(w) == WINDOW_TOKENS for w in cjk[:-1])


def test_a_fact_deep_inside_a_long_memory_is_found_by_meaning(eng: Engine, embedder):
    notes = eng.remember(HOUSE_NOTES, embed="sync").id
    for t in OTHERS:
        eng.remember(t, embed="sync")
    hits = eng.recall(QUESTION, k=5)
    assert hits and hits[0].id == notes
    q = embedder.encode_one(QUESTION)
    whole = float(embedder.encode_one(HOUSE_NOTES) @ q)
    assert whole < 0.1 < 0.3 < hits[0].cosine  # the whole-text vector alone barely sees the last line


def test_windows_follow_edits_and_forgets_and_both_search_paths_agree(profile_home: Path, embedder):
    with Engine.open(profile_home, embedder=embedder) as eng:
        notes = eng.remember(HOUSE_NOTES, embed="sync").id
        others = [eng.remember(t, embed="sync").id for t in OTHERS]
        con = eng.con
        n_windows = len(embedder.windows(HOUSE_NOTES))
        assert con.execute("SELECT count(*) FROM memory_windows").fetchone()[0] == n_windows
        assert con.execute("SELECT count(*) FROM vec_memory_windows").fetchone()[0] == n_windows

        q = embedder.encode_one(QUESTION)
        mirror = eng.space.index["memories"].search(con, q, 3, Filter())
        direct = VectorIndex("memories", 384, mirror=False).search(con, q, 3, Filter())
        assert [i for i, _ in mirror] == [i for i, _ in direct]
        assert np.allclose([s for _, s in mirror], [s for _, s in direct], atol=1e-5)
        notes_row = con.execute("SELECT id FROM memories WHERE uid = ?", (notes,)).fetchone()[0]
        assert mirror[0][0] == notes_row
        assert eng.space.index["memories"].cosines(con, [notes_row], q)[notes_row] == mirror[0][1]

        eng.update(notes, text="The boiler was serviced in September.")
        assert con.execute("SELECT count(*) FROM memory_windows").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM vec_memory_windows").fetchone()[0] == 0
        eng.update(notes, text=HOUSE_NOTES)
        assert con.execute("SELECT count(*) FROM memory_windows").fetchone()[0] == n_windows
        assert eng.recall(QUESTION, k=1)[0].id == notes

        eng.forget(notes)
        assert con.execute("SELECT count(*) FROM memory_windows").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM vec_memory_windows").fetchone()[0] == 0
        assert all(h.id != notes for h in eng.recall(QUESTION, k=10))
        assert {h.id for h in eng.recall("car keys hook", k=5)} <= set(others)

    # another process's view (no mirror): the same answers from vec0
    with Engine.open(profile_home, embedder=embedder, settings=Settings(vector_cache=False)) as eng:
        again = eng.remember(HOUSE_NOTES, embed="sync").id
        assert eng.recall(QUESTION, k=1)[0].id == again


def test_windows_are_rebuilt_when_backfilled(profile_home: Path, embedder):
    from engine.embeddings import NoEmbedder

    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        notes = eng.remember(HOUSE_NOTES).id
    with Engine.open(profile_home, embedder=embedder) as eng:
        for t in OTHERS:
            eng.remember(t, embed="sync")
        assert eng.embed_pending() == 1
        assert eng.con.execute("SELECT count(*) FROM memory_windows").fetchone()[0] == len(embedder.windows(HOUSE_NOTES))
        assert eng.recall(QUESTION, k=1)[0].id == notes


def test_a_passage_of_a_long_memory_is_not_its_duplicate(eng: Engine, embedder):
    notes = eng.remember(HOUSE_NOTES, embed="sync")
    passage = embedder.windows(HOUSE_NOTES)[-1]  # a window vector identical to this text's own vector
    r = eng.remember(passage, embed="sync")
    assert not r.merged and r.id != notes.id
    assert len(eng.list_memories()) == 2
    # recall still sees both: the passage itself and the note that holds it
    assert {h.id for h in eng.recall(QUESTION, k=2)} == {notes.id, r.id}
