"""Mistakes the Settings page must not keep: turning the mouse wheel to scroll down the page must not change
the choice boxes that pass under the pointer (the search model became "None — match words only" that way,
and Save kept it; a box takes the wheel once it was clicked or tabbed to), and a language model server that
is no address is refused when saved."""

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
