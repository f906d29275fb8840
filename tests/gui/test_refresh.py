"""A memory open in the editor while other writes arrive: the refreshes never write it and never count as a
use of it; neither does leaving it when nothing was typed (its importance shown rounded is not an edit)."""

from __future__ import annotations

from .conftest import engine_of, wait_idle


def writes_to(eng, uid: str) -> list[str]:
    """The audit log's actions on `uid` (remember, update, use, …), oldest first."""
    return [e.action for e in reversed(eng.audit_log(limit=500)) if e.target == uid]


def test_refreshes_and_rounding_neither_write_nor_use_the_open_memory(qtbot, desktop):
    eng = engine_of(desktop)
    browser = desktop.window.memories
    posted: list[str] = []
    browser.status_posted.connect(posted.append)
    uid = eng.remember("The plumber's number is 0161 496 0000", importance=0.8549, embed="none").id
    other = eng.remember("The recycling goes out on Thursdays", embed="none").id
    qtbot.waitUntil(lambda: sorted(browser.visible_ids()) == sorted([uid, other]), timeout=5000)

    # opened for a moment (no use yet), then left without typing: the rounded 0.85 shown is not an edit
    browser.select(uid)
    assert browser.editor.row.id == uid and f"{browser.editor.importance.value():.2f}" == "0.85"
    assert not browser.editor.is_dirty()
    browser.select(other)
    wait_idle(qtbot, desktop)
    assert eng.get(uid).importance == 0.8549 and writes_to(eng, uid) == ["remember"]

    # opened and stayed on: one use
    browser.select(uid)
    qtbot.waitUntil(lambda: eng.get(uid).access_count == 1, timeout=5000)
    wait_idle(qtbot, desktop)
    used = eng.get(uid)
    # other writes arrive while it stays open; each one refreshes the list
    for i in range(4):
        eng.remember(f"Another note number {i} from another program", embed="none")
        qtbot.waitUntil(lambda n=i: len(browser.visible_ids()) == 3 + n, timeout=5000)
        qtbot.wait(1700)  # longer than it takes an open memory to count as used
    wait_idle(qtbot, desktop)
    assert browser.editor.row.id == uid and not browser.editor.is_dirty()
    now = eng.get(uid)
    assert now.access_count == 1 and now.importance == used.importance
    assert writes_to(eng, uid) == ["remember", "use"]
    # and leaving it now writes nothing either
    browser.select(other)
    wait_idle(qtbot, desktop)
    assert writes_to(eng, uid) == ["remember", "use"]
    assert not any("Saved your edit" in p for p in posted)
