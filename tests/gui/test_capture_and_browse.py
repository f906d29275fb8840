"""Quick capture stores a fact at once; the browser shows it, searches it, edits it and deletes it."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, QPointF, Qt
from PySide6.QtGui import QDropEvent

from .conftest import engine_of, wait_idle


def capture(qtbot, desktop, text: str, project: str = "") -> None:
    box = desktop.capture
    box.open_box()
    assert box.isVisible()
    box.project.setCurrentText(project or "No project")
    qtbot.keyClicks(box.input, text)
    qtbot.keyClick(box.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: box.status.text() == "Saved ✓", timeout=10_000)


def test_capture_box_stores_a_fact_that_shows_in_the_browser(qtbot, desktop):
    capture(qtbot, desktop, "My sister Alice lives in Lisbon", project="family")
    browser = desktop.window.memories
    qtbot.waitUntil(lambda: len(browser.visible_ids()) == 1, timeout=10_000)
    uid = browser.visible_ids()[0]
    assert browser.model.index(0, 0).data() == "My sister Alice lives in Lisbon"
    assert browser.model.index(0, 2).data() == "family"
    memory = engine_of(desktop).get(uid)
    assert memory.text == "My sister Alice lives in Lisbon" and memory.project == "family"
    qtbot.waitUntil(lambda: not desktop.capture.isVisible(), timeout=3000)  # the box gets out of the way


def test_enter_in_the_project_field_saves_and_a_name_too_long_is_said_plainly(qtbot, desktop):
    box = desktop.capture
    box.open_box()
    qtbot.keyClicks(box.input, "The gas meter reading is 4411")
    line = box.project.lineEdit()
    line.clear()
    qtbot.keyClicks(line, "x" * 201)
    with qtbot.assertNotEmitted(box.capture_submitted, wait=100):  # refused before it is sent
        qtbot.keyClick(line, Qt.Key.Key_Return)  # typed a project, then Enter where the cursor is
    qtbot.waitUntil(lambda: "at most 200" in box.status.text(), timeout=10_000)
    assert box.input.text() == "The gas meter reading is 4411" and box.input.isEnabled()  # nothing lost
    assert engine_of(desktop).stats().memories == 0
    qtbot.waitUntil(line.hasFocus, timeout=3000)  # the box checks the name itself (no round trip to the engine)
    assert line.selectedText() == "x" * 201  # what to fix, ready to be typed over
    box.set_projects(["garden"])  # the list of projects arriving late (it is read when the engine opens)
    assert line.selectedText() == "x" * 201 and box.project.currentText() == "x" * 201
    qtbot.keyClicks(line, "house")
    qtbot.keyClick(line, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: box.status.text() == "Saved ✓", timeout=10_000)
    [memory] = engine_of(desktop).list_memories()
    assert memory.text == "The gas meter reading is 4411" and memory.project == "house"


def test_capture_is_lexically_searchable_at_once(qtbot, desktop):
    capture(qtbot, desktop, "The wifi password at the cabin is hunter2")
    capture(qtbot, desktop, "Bob prefers tea over coffee")
    browser = desktop.window.memories
    qtbot.waitUntil(lambda: len(browser.visible_ids()) == 2, timeout=10_000)
    qtbot.keyClicks(browser.search, "cabin wifi")
    qtbot.waitUntil(lambda: len(browser.visible_ids()) == 1, timeout=10_000)
    assert "hunter2" in browser.model.index(0, 0).data()
    browser.search.clear()
    qtbot.keyClicks(browser.search, "zeppelin")
    qtbot.waitUntil(lambda: browser.list_stack.currentWidget() is browser.empty, timeout=10_000)
    assert "No memories match" in browser.empty.title.text()


def test_escape_closes_capture_without_storing_and_keeps_the_draft(qtbot, desktop):
    box = desktop.capture
    box.open_box()
    qtbot.keyClicks(box.input, "the plumber's number is")
    qtbot.keyClick(box.input, Qt.Key.Key_Escape)
    assert not box.isVisible()
    wait_idle(qtbot, desktop)
    assert engine_of(desktop).list_memories() == []
    box.open_box()  # next time: the half-typed draft is still there, to finish
    assert box.input.text() == "the plumber's number is"
    assert "draft is kept" in box.status.text()
    qtbot.keyClicks(box.input, " 0161 496 0000")
    qtbot.keyClick(box.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: box.status.text() == "Saved ✓", timeout=10_000)
    assert [m.text for m in engine_of(desktop).list_memories()] == ["the plumber's number is 0161 496 0000"]


def test_text_dropped_on_the_capture_box_becomes_a_memory(qtbot, desktop):
    box = desktop.capture
    box.open_box()
    mime = QMimeData()
    mime.setText("Dropped: the dentist is on Friday")
    event = QDropEvent(QPointF(20, 20), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    box.dropEvent(event)
    qtbot.waitUntil(lambda: box.status.text() == "Saved ✓", timeout=10_000)
    assert [m.text for m in engine_of(desktop).list_memories()] == ["Dropped: the dentist is on Friday"]


def test_empty_store_shows_a_helpful_line(qtbot, desktop):
    browser = desktop.window.memories
    # while the store opens the same panel says "Opening your memory…"; then it explains how to start
    qtbot.waitUntil(lambda: browser.list_stack.currentWidget() is browser.empty
                    and browser.empty.title.text() == "Nothing remembered yet.", timeout=10_000)
    assert "Ctrl+Shift+Space" in browser.empty.hint.text()


def test_editing_a_memory_saves_it_in_the_store(qtbot, desktop):
    capture(qtbot, desktop, "Meeting room is B12")
    browser = desktop.window.memories
    qtbot.waitUntil(lambda: len(browser.visible_ids()) == 1, timeout=10_000)
    uid = browser.visible_ids()[0]
    assert browser.select(uid)
    browser.editor.text.setPlainText("Meeting room is C7")
    browser.editor.save.click()
    qtbot.waitUntil(lambda: browser.editor.feedback.text() == "Saved ✓", timeout=10_000)
    assert engine_of(desktop).get(uid).text == "Meeting room is C7"
    qtbot.waitUntil(lambda: browser.model.rowCount() == 1
                    and browser.model.index(0, 0).data() == "Meeting room is C7", timeout=10_000)


def test_archived_and_conflicting_memories_are_visible_with_a_badge(qtbot, desktop):
    capture(qtbot, desktop, "Old phone number is 555-0100")
    browser = desktop.window.memories
    qtbot.waitUntil(lambda: len(browser.visible_ids()) == 1, timeout=10_000)
    uid = browser.visible_ids()[0]
    engine_of(desktop).update(uid, archived=True)  # as consolidation would
    qtbot.waitUntil(lambda: browser.visible_ids() == [], timeout=10_000)  # active view hides it
    browser.show_filter.setCurrentIndex(browser.show_filter.findData("archived"))
    qtbot.waitUntil(lambda: browser.visible_ids() == [uid], timeout=10_000)
    assert browser.model.index(0, 1).data() == "Archived"


def test_a_page_chosen_in_the_sidebar_takes_the_keyboard(qtbot, desktop):
    """Click Ask and type: the words land in the question, not in the sidebar's type-ahead."""
    window = desktop.window
    window.show()
    window.activateWindow()
    qtbot.waitExposed(window)
    sidebar = window.sidebar
    ask_item = sidebar.item(1)
    qtbot.mouseClick(sidebar.viewport(), Qt.MouseButton.LeftButton, pos=sidebar.visualItemRect(ask_item).center())
    qtbot.waitUntil(lambda: window.pages.currentWidget() is window.ask, timeout=3000)
    qtbot.waitUntil(lambda: window.ask.question.hasFocus(), timeout=3000)
    qtbot.keyClicks(window.focusWidget(), "where is my passport")
    assert window.ask.question.text() == "where is my passport"
    qtbot.keyClick(window, Qt.Key.Key_1, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: window.memories.search.hasFocus(), timeout=3000)
    assert window.pages.currentWidget() is window.memories


def test_the_project_list_arriving_while_a_name_is_typed_leaves_the_cursor_where_it_is(qtbot, desktop):
    box = desktop.capture
    box.open_box()
    line = box.project.lineEdit()
    line.clear()
    qtbot.keyClicks(line, "hose")
    line.setCursorPosition(2)
    box.set_projects(["garden", "house"])
    assert box.project.currentText() == "hose" and line.cursorPosition() == 2
    qtbot.keyClicks(line, "u")  # the typing goes on where it was
    assert box.project.currentText() == "house"


def test_the_capture_boxs_projects_follow_the_store(qtbot, desktop):
    box = desktop.capture
    engine_of(desktop).remember("The shed key is under the pot", project="outdoors", embed="none")  # after opening
    qtbot.waitUntil(lambda: box.project.findText("outdoors") >= 0, timeout=5000)
    box.open_box()
    assert box.project.findText("outdoors") >= 0 and box.project.currentText() == "No project"
