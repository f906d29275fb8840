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
