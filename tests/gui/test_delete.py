"""Delete of one memory offers undo (several at once are asked first), disappears at once, can be undone for a moment, and then is gone from the store."""

from __future__ import annotations

import pytest

from engine.errors import NotFound

from .conftest import engine_of, wait_idle


def stored(qtbot, desktop, *texts: str) -> list[str]:
    eng = engine_of(desktop)
    uids = [eng.remember(t).id for t in texts]
    browser = desktop.window.memories
    qtbot.waitUntil(lambda: sorted(browser.visible_ids()) == sorted(uids), timeout=10_000)
    return uids


def test_delete_removes_from_the_view_and_the_store(qtbot, desktop, monkeypatch):
    keep, gone = stored(qtbot, desktop, "Keep this fact", "Forget this fact")
    browser = desktop.window.memories
    asked: list[str] = []
    monkeypatch.setattr(browser, "confirm", lambda title, question, detail: asked.append(question) or True)
    browser.select(gone)
    browser.delete_selected()
    assert asked == []  # one memory: no question, Undo instead
    assert browser.visible_ids() == [keep]  # gone from view at once
    assert browser.undo_bar.isVisible()
    qtbot.waitUntil(lambda: gone not in browser.pending, timeout=5000)  # the undo window closes
    wait_idle(qtbot, desktop)
    with pytest.raises(NotFound):
        engine_of(desktop).get(gone)
    assert [h.id for h in engine_of(desktop).recall("Forget this fact")] == [keep] or all(
        h.id != gone for h in engine_of(desktop).recall("Forget this fact"))
    qtbot.wait(300)
    assert browser.visible_ids() == [keep]


def test_cancelled_confirmation_of_several_deletes_nothing(qtbot, desktop, monkeypatch):
    uids = stored(qtbot, desktop, "Precious fact", "Another precious fact")
    browser = desktop.window.memories
    asked: list[str] = []
    monkeypatch.setattr(browser, "confirm", lambda title, question, detail: asked.append(question) and False)
    browser.tree.selectAll()
    browser.delete_selected()
    assert asked == ["Delete 2 memories?"]
    assert sorted(browser.visible_ids()) == sorted(uids)
    assert engine_of(desktop).get(uids[0]).text == "Precious fact"


def test_undo_brings_the_memory_back_unchanged(qtbot, desktop, monkeypatch):
    (uid,) = stored(qtbot, desktop, "Undo me please")
    browser = desktop.window.memories
    monkeypatch.setattr(browser, "confirm", lambda *a: True)
    browser.select(uid)
    browser.delete_selected()
    assert browser.visible_ids() == []
    browser.undo_bar.undo.click()
    qtbot.waitUntil(lambda: browser.visible_ids() == [uid], timeout=10_000)  # same id: nothing was lost
    qtbot.wait(600)  # past the undo window
    wait_idle(qtbot, desktop)
    assert engine_of(desktop).get(uid).text == "Undo me please"


def test_quit_during_the_undo_window_carries_the_delete_out(qtbot, qasync_loop, profile_home, lexical_embedder):
    from engine import Engine

    from .conftest import make_desktop

    app = make_desktop(qtbot, profile_home, lexical_embedder, undo_seconds=60)
    (uid,) = stored(qtbot, app, "Delete me then quit")
    browser = app.window.memories
    browser.delete_now([uid])
    app.quit()
    with Engine.open(profile_home, embedder=lexical_embedder) as eng:
        with pytest.raises(NotFound):
            eng.get(uid)
