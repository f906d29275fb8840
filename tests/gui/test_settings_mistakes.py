"""Mistakes the Settings page must not keep: turning the mouse wheel to scroll down the page must not change
the choice boxes that pass under the pointer (the search model became "None — match words only" that way,
and Save kept it; a box takes the wheel once it was clicked or tabbed to), and a language model server that
is no address is refused when saved. Changes the user made and did not save are kept when the page is left or
the app quits, as an edited memory is (a new shortcut was lost at the next start)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication


def wheel_down(widget) -> None:
    at = QPointF(widget.rect().center())
    event = QWheelEvent(at, QPointF(widget.mapToGlobal(at.toPoint())), QPoint(0, 0), QPoint(0, -120),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def test_the_wheel_scrolls_the_settings_page_past_a_choice_box_without_changing_it(qtbot, desktop):
    window = desktop.window
    window.resize(800, 600)
    window.show()
    window.show_page("settings")
    page = window.settings
    qtbot.waitUntil(lambda: page.isEnabled() and page.embedding_model.isVisible())
    box = page.embedding_model
    chosen = box.currentText()
    assert box.count() > 1 and box.currentIndex() < box.count() - 1  # a turn down would pick another one
    scroll = next(p for p in _ancestors(box) if hasattr(p, "verticalScrollBar") and p.verticalScrollBar().isVisible())
    before = scroll.verticalScrollBar().value()
    assert not box.hasFocus()
    for _ in range(3):
        wheel_down(box)
    assert box.currentText() == chosen
    assert scroll.verticalScrollBar().value() > before  # the page scrolled instead
    # clicked (focused) on purpose, the box takes the wheel as usual
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    box.setFocus(Qt.FocusReason.MouseFocusReason)
    qtbot.waitUntil(box.hasFocus)
    wheel_down(box)
    assert box.currentText() != chosen


def _ancestors(widget):
    w = widget.parentWidget()
    while w is not None:
        yield w
        w = w.parentWidget()


def test_a_server_that_is_no_address_is_refused_on_save_and_not_kept(qtbot, desktop, profile_home):
    import json

    window = desktop.window
    window.show_page("settings")
    page = window.settings
    qtbot.waitUntil(page.isEnabled)
    page.host.setText("not a url")
    page.save()
    qtbot.waitUntil(lambda: "not a server address" in page.test_result.text, timeout=10_000)
    assert page.feedback.text() != "Saved ✓"
    saved = json.loads((profile_home / "settings.json").read_text()) if (profile_home / "settings.json").exists() else {}
    assert saved.get("llm", {}).get("host") is None
    assert desktop.bridge.info.settings.llm.host is None
    page.host.setText("gpu-box.local:11434")  # a real address is saved
    page.save()
    qtbot.waitUntil(lambda: page.feedback.text() == "Saved ✓", timeout=10_000)
    assert json.loads((profile_home / "settings.json").read_text())["llm"]["host"] == "gpu-box.local:11434"


def _record_shortcut(qtbot, page) -> None:
    """Click the shortcut field and press Ctrl+Alt+M, as the user does."""
    qtbot.mouseClick(page.hotkey, Qt.MouseButton.LeftButton)
    qtbot.keyClick(page.hotkey, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier)
    assert page.hotkey.shortcut() == "Ctrl+Alt+M"


def _saved(profile_home) -> dict:
    import json

    path = profile_home / "settings.json"
    return json.loads(path.read_text()) if path.exists() else {}


def test_settings_changed_and_not_saved_are_saved_when_the_page_is_left(qtbot, desktop, profile_home):
    window = desktop.window
    window.show()
    window.show_page("settings")
    page = window.settings
    qtbot.waitUntil(page.isEnabled)
    _record_shortcut(qtbot, page)
    page.model.setCurrentText("qwen2.5:3b")
    with qtbot.waitSignal(page.hotkey_changed, timeout=10_000) as moved:
        qtbot.mouseClick(window.sidebar.viewport(), Qt.MouseButton.LeftButton,
                         pos=window.sidebar.visualItemRect(window.sidebar.item(0)).center())
    assert moved.args == ["Ctrl+Alt+M"]  # the global shortcut follows at once
    assert window.pages.currentWidget() is window.memories
    assert _saved(profile_home)["hotkey"] == "Ctrl+Alt+M"
    assert _saved(profile_home)["llm"]["model"] == "qwen2.5:3b"
    qtbot.waitUntil(lambda: "settings were saved" in window.status.currentMessage(), timeout=5_000)
    window.show_page("settings")  # nothing changed since: leaving again writes nothing and says nothing
    assert page.page_changes() == {}
    window.show_page("ask")
    assert not page.save_pending()


def test_a_settings_change_that_cannot_be_saved_says_so_when_the_page_is_left(qtbot, desktop, profile_home):
    window = desktop.window
    window.show_page("settings")
    page = window.settings
    qtbot.waitUntil(page.isEnabled)
    page.host.setText("not a url")
    window.show_page("memories")
    qtbot.waitUntil(lambda: "were not saved" in window.status.currentMessage(), timeout=10_000)
    assert "not a server address" in window.status.currentMessage()
    assert _saved(profile_home).get("llm", {}).get("host") is None
    assert page.host.text() == "not a url"  # still there to correct


def test_settings_changed_and_not_saved_are_saved_at_quit(qtbot, desktop, profile_home):
    window = desktop.window
    window.show_page("settings")
    page = window.settings
    qtbot.waitUntil(page.isEnabled)
    _record_shortcut(qtbot, page)
    desktop.quit()
    assert _saved(profile_home)["hotkey"] == "Ctrl+Alt+M"
