"""With the real embedding model: a captured fact is found by meaning moments later, and the status bar says
when the model is ready."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from .conftest import engine_of


@pytest.mark.slow
def test_a_captured_fact_is_found_by_meaning_after_background_embedding(qtbot, semantic_app):
    app = semantic_app
    assert "Semantic search ready" in app.window.status.model.text()
    box = app.capture
    box.open_box()
    qtbot.keyClicks(box.input, "My sister Alice lives in Lisbon")
    box.submit()
    qtbot.waitUntil(lambda: box.status.text() == "Saved ✓", timeout=10_000)
    eng = engine_of(app)
    qtbot.waitUntil(lambda: all(m.embedded for m in eng.list_memories()), timeout=30_000)
    browser = app.window.memories
    qtbot.keyClicks(browser.search, "Which city is my sibling based in?")
    qtbot.waitUntil(lambda: browser.visible_ids() != [] and
                    "Lisbon" in browser.model.index(0, 0).data(), timeout=15_000)


@pytest.mark.slow
def test_a_search_hit_on_a_long_note_shows_the_passage_that_matched(qtbot, semantic_app):
    from tests.integration.test_long_memories import HOUSE_NOTES

    eng = engine_of(semantic_app)
    eng.remember(HOUSE_NOTES, embed="sync")
    eng.remember("The car keys hang on the hook by the front door.", embed="sync")
    browser = semantic_app.window.memories
    qtbot.keyClicks(browser.search, "Where is my passport?")
    qtbot.waitUntil(lambda: browser.visible_ids() != [] and
                    browser.model.index(0, 0).data().startswith("…"), timeout=15_000)
    tip = browser.model.index(0, 0).data(Qt.ItemDataRole.ToolTipRole)
    assert "passports" in tip and "House notes" not in tip


def test_a_search_while_the_model_loads_answers_by_words_and_says_so(qtbot, qasync_loop, profile_home):
    """The app's first search beside a backlog waited for the model's load (5-20 s); it answers by words at
    once, and the page says those results are by words only, until meaning is there for them too."""
    import threading

    from engine.embeddings import Embedder
    from engine.onnx_minilm import load_runtime

    from .conftest import make_desktop

    gate = threading.Event()

    def held(path, **given):
        gate.wait(90)  # the real model's load, held: a slow first start
        return load_runtime(path, **given)

    desktop = make_desktop(qtbot, profile_home, Embedder(runtime=held))
    try:
        eng = engine_of(desktop)
        for i in range(12):
            eng.remember(f"Seed note {i} for the allotment", embed="none")
        browser = desktop.window.memories
        qtbot.waitUntil(lambda: len(browser.visible_ids()) == 12, timeout=10_000)
        browser.search.setText("allotment")
        qtbot.waitUntil(lambda: browser.words_only.isVisibleTo(browser), timeout=15_000)
        assert browser.words_only.text() == "Found by words only for now: the embedding model is still loading."
        assert len(browser.visible_ids()) == 12 and browser.count.text() == "12 matches"
        gate.set()
        qtbot.waitUntil(lambda: eng.space.embedder.ready and eng.space.pending() == 0, timeout=120_000)
        browser.search.setText("allotment notes")
        qtbot.waitUntil(lambda: browser._searching == "allotment notes", timeout=15_000)
        qtbot.waitUntil(lambda: not browser.words_only.isVisibleTo(browser), timeout=5_000)
    finally:
        gate.set()
