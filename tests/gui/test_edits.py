"""An edit is never thrown away: leaving a memory with unsaved changes saves them; a refresh keeps them."""

from __future__ import annotations

from PySide6.QtCore import Qt

from desktop.formatting import natural_date

from .conftest import engine_of, wait_idle


def stored(qtbot, desktop, *texts: str) -> list[str]:
    eng = engine_of(desktop)
    uids = [eng.remember(t, embed="none").id for t in texts]
    qtbot.waitUntil(lambda: sorted(desktop.window.memories.visible_ids()) == sorted(uids), timeout=5000)
    return uids


def test_clicking_another_row_saves_the_edit(qtbot, desktop):
    first, second = stored(qtbot, desktop, "The gate code is 1234", "Bins go out on Monday")
    browser = desktop.window.memories
    browser.select(first)
    editor = browser.editor
    assert editor.row.id == first and not editor.is_dirty()
    editor.text.selectAll()
    qtbot.keyClicks(editor.text, "The gate code is 9876")
    assert editor.is_dirty()
    rect = browser.tree.visualRect(browser.model.index(browser.visible_ids().index(second), 0))
    qtbot.mouseClick(browser.tree.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert editor.row.id == second and editor.text.toPlainText() == "Bins go out on Monday"
    wait_idle(qtbot, desktop)
    assert engine_of(desktop).get(first).text == "The gate code is 9876"
    qtbot.waitUntil(lambda: "9876" in browser.model.index(browser.visible_ids().index(first), 0).data(),
                    timeout=5000)


def test_a_refresh_while_typing_keeps_the_typing(qtbot, desktop):
    (uid,) = stored(qtbot, desktop, "The Wi-Fi password is on the router")
    browser = desktop.window.memories
    browser.select(uid)
    qtbot.keyClicks(browser.editor.text, " - and it is")
    browser.refresh()  # what another program's write, or a search, triggers
    wait_idle(qtbot, desktop)
    assert browser.editor.text.toPlainText() == " - and it isThe Wi-Fi password is on the router"
    assert browser.editor.is_dirty()


def test_natural_dates_are_accepted_in_when(qtbot, desktop):
    (uid,) = stored(qtbot, desktop, "Dentist appointment")
    browser = desktop.window.memories
    browser.select(uid)
    editor = browser.editor
    editor.at.setText("next tuesday")
    editor.save.click()
    wait_idle(qtbot, desktop)
    assert engine_of(desktop).get(uid).at.startswith(natural_date("next tuesday"))
    assert editor.feedback.text() == "Saved ✓"
    editor.at.setText("when pigs fly")
    editor.save.click()
    assert "not a date" in editor.feedback.toolTip()  # said beside Save, not in a modal


def test_one_delete_offers_undo_without_asking(qtbot, desktop, monkeypatch):
    (uid,) = stored(qtbot, desktop, "Delete me")
    browser = desktop.window.memories
    monkeypatch.setattr(browser, "confirm", lambda *a: (_ for _ in ()).throw(AssertionError("asked")))
    browser.select(uid)
    browser.editor.delete.click()
    assert browser.visible_ids() == [] and browser.undo_bar.isVisible()


def test_another_programs_write_while_a_project_is_typed_keeps_the_cursor(qtbot, desktop):
    (uid,) = stored(qtbot, desktop, "The boiler is serviced every May")
    browser = desktop.window.memories
    browser.select(uid)
    line = browser.editor.project.lineEdit()
    qtbot.keyClicks(line, "hose")
    line.setCursorPosition(2)
    engine_of(desktop).remember("The shed key is under the pot", project="garden", embed="none")  # reloads the projects
    qtbot.waitUntil(lambda: browser.editor.project.findText("garden") >= 0, timeout=5000)
    assert browser.editor.project.currentText() == "hose" and line.cursorPosition() == 2
    qtbot.keyClicks(line, "u")
    assert browser.editor.project.currentText() == "house" and browser.editor.is_dirty()


def test_quitting_saves_the_edit_under_way(qtbot, desktop, profile_home, lexical_embedder):
    (uid,) = stored(qtbot, desktop, "The water main shutoff is in the cellar")
    browser = desktop.window.memories
    browser.select(uid)
    browser.editor.text.selectAll()
    qtbot.keyClicks(browser.editor.text, "The water main shutoff is behind the boiler")
    assert browser.editor.is_dirty()
    with qtbot.waitSignal(desktop.quitted, timeout=20_000):
        desktop.quit()  # the tray's Quit, or closing the window where there is no tray
    from engine import Engine

    with Engine.open(profile_home, embedder=lexical_embedder) as eng:
        assert eng.get(uid).text == "The water main shutoff is behind the boiler"
