"""The Memories counter agrees with the rows: during a delete's undo window, after Undo, after the forget;
and the undo window is long enough to reach Undo on a busy machine."""

from __future__ import annotations

from desktop.pending_deletes import UNDO_SECONDS

from .conftest import engine_of, make_desktop, wait_idle


def test_the_count_follows_a_delete_its_undo_and_the_forget(qtbot, qasync_loop, profile_home, lexical_embedder):
    assert UNDO_SECONDS >= 10
    app = make_desktop(qtbot, profile_home, lexical_embedder, undo_seconds=2)
    try:
        eng = engine_of(app)
        uids = [eng.remember(t, embed="none").id for t in ("The gate code is 1234", "Bins go out on Monday",
                                                            "The boiler is serviced in October")]
        browser = app.window.memories
        app.window.show_page("memories")
        qtbot.waitUntil(lambda: len(browser.visible_ids()) == 3, timeout=10_000)
        assert browser.count.text() == "3 memories"
        browser.select(uids[0])
        browser.delete_selected()
        assert len(browser.visible_ids()) == 2 and browser.count.text() == "2 memories"
        browser.refresh()  # another program's write during the undo window
        wait_idle(qtbot, app)
        assert len(browser.visible_ids()) == 2 and browser.count.text() == "2 memories"
        browser.undo_delete()
        qtbot.waitUntil(lambda: browser.count.text() == "3 memories" and len(browser.visible_ids()) == 3,
                        timeout=5000)
        browser.select(uids[1])
        browser.delete_selected()
        assert browser.count.text() == "2 memories"
        qtbot.waitUntil(lambda: len(eng.list_memories()) == 2, timeout=10_000)  # forgotten when the window closed
        wait_idle(qtbot, app)
        qtbot.waitUntil(lambda: browser.count.text() == "2 memories" and len(browser.visible_ids()) == 2,
                        timeout=5000)
    finally:
        app.quit()


def test_a_search_never_counts_the_listing_as_its_matches(qtbot, desktop):
    """Between a search's results and its count, the counter said "100 of 150 matches": the listing's total
    (150 memories), not what the search found; it now says what it found until the count comes."""
    eng = engine_of(desktop)
    for i in range(150):  # 120 hold "allotment"
        eng.remember(f"Seed note {i} for the allotment" if i < 120 else f"The gate code {i} is in the drawer",
                     embed="none")
    browser = desktop.window.memories
    browser.refresh()
    qtbot.waitUntil(lambda: browser.count.text() == "150 memories", timeout=20_000)
    shown: list[str] = []
    original = browser.count.setText
    browser.count.setText = lambda text: (shown.append(text), original(text))  # type: ignore[method-assign]
    browser.search.setText("allotment")
    qtbot.waitUntil(lambda: browser.count.text() == "100 of 120 matches", timeout=10_000)
    assert "100 of 150 matches" not in shown, shown
