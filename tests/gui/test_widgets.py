"""Shared widgets lay out as they should: a banner is as tall as its text at the width it is given."""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QFormLayout, QLineEdit, QWidget

from desktop.widgets import Banner


def _settle(qtbot) -> None:
    qtbot.wait(50)


def test_a_banner_in_a_form_is_as_tall_as_its_text(qtbot):
    page = QWidget()
    form = QFormLayout(page)
    form.addRow("Global shortcut", QLineEdit())
    banner = Banner()
    form.addRow("", banner)
    form.addRow("", QCheckBox("Start in the tray"))
    qtbot.addWidget(page)
    page.resize(800, 400)
    page.show()
    qtbot.waitExposed(page)

    banner.set("Press Ctrl+Shift+Space anywhere to capture a memory.", "ok")
    _settle(qtbot)
    one_line = banner.label.fontMetrics().lineSpacing()
    assert banner.label.height() < 2 * one_line  # not a four-line box around one line

    banner.set("This shortcut is taken by another program; choose another one above. " * 4, "warn")
    for width in (800, 360, 1200):
        page.resize(width, 400)
        _settle(qtbot)
        needed = banner.label.heightForWidth(banner.label.width())
        assert banner.label.height() >= needed  # never clipped
        assert banner.label.height() < needed + one_line  # nor padded
