"""The dialogs of Settings on a real store: Enter runs the main action (never another button), an error stays
in view, a new passphrase has a minimum, a restore asks first, and the fields keep their height once a
progress bar or an error appears (measured: every field at least as tall as it asks to be)."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractButton,
    QApplication,
    QDialog,
    QFileDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
)

from tests.gui.conftest import engine_of, wait_idle


def sections(desktop):
    desktop.window.show_page("settings")
    return desktop.window.settings.sections


def cut_fields(dialog: QDialog) -> list[str]:
    """Every visible field, bar, button or wrapped text of `dialog` shorter than it needs to be."""
    found = []
    for w in [*dialog.findChildren(QLineEdit), *dialog.findChildren(QProgressBar),
              *dialog.findChildren(QAbstractButton)]:
        if w.isVisible() and w.height() < w.sizeHint().height():
            found.append(f"{type(w).__name__} {w.objectName() or getattr(w, 'text', lambda: '')()!r}: "
                         f"{w.height()} px < {w.sizeHint().height()} px")
    for label in dialog.findChildren(QLabel):
        if label.isVisible() and label.wordWrap() and label.text() and \
                label.height() < label.heightForWidth(label.width()):
            found.append(f"text {label.text()[:30]!r}: {label.height()} px < {label.heightForWidth(label.width())} px")
    inside = dialog.rect()
    for w in dialog.findChildren(QLineEdit):
        if w.isVisible() and not inside.contains(w.geometry().translated(w.parentWidget().mapTo(dialog, w.pos())
                                                                          - w.pos())):
            found.append(f"field outside the dialog: {w.geometry()}")
    return found


class FileDialogs:
    """Counts (and closes) any file dialog that opens: Enter must never open one."""

    def __init__(self) -> None:
        self.opened: list[str] = []
        self.timer = QTimer()
        self.timer.setInterval(30)
        self.timer.timeout.connect(self._look)
        self.timer.start()

    def _look(self) -> None:
        for w in QApplication.topLevelWidgets():
            if isinstance(w, QFileDialog) and w.isVisible():
                self.opened.append(w.windowTitle())
                w.reject()


def settle(qtbot) -> None:
    qtbot.wait(120)  # queued layout requests, then the dialog's growth


def test_export_and_import_enter_runs_them_and_fields_keep_their_height(qtbot, desktop, tmp_path):
    eng = engine_of(desktop)
    eng.remember("The boat is moored at pier 9.")
    box = sections(desktop).transfer
    pickers = FileDialogs()

    export = box.open_export()
    qtbot.addWidget(export)
    qtbot.waitExposed(export)
    target = tmp_path / "memory.jsonl"
    export.path.setText(str(target))
    qtbot.keyClicks(export.passphrase, "river stone")
    qtbot.keyClicks(export.again, "river stones")
    qtbot.keyClick(export.again, Qt.Key.Key_Return)
    settle(qtbot)
    assert export.isVisible() and "differ" in export.result.text and not target.exists()
    assert cut_fields(export) == []
    export.passphrase.clear()
    export.again.clear()
    qtbot.keyClicks(export.passphrase, "ab")  # the minimum of "Set a passphrase", with its hint as it is typed
    assert export.hint.text() == "Too short: 2 of at least 8 characters."
    qtbot.keyClicks(export.again, "ab")
    qtbot.keyClick(export.again, Qt.Key.Key_Return)
    settle(qtbot)
    assert export.isVisible() and "at least 8 characters" in export.result.text and not target.exists()
    assert cut_fields(export) == []
    export.passphrase.clear()
    qtbot.keyClicks(export.passphrase, "river stone")
    export.again.clear()
    qtbot.keyClicks(export.again, "river stone")
    qtbot.keyClick(export.again, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: export.result.property("tone") == "ok", timeout=10_000)
    settle(qtbot)
    assert export.progress.isVisible() and target.exists()
    assert cut_fields(export) == []
    export.close()

    dialog = box.open_import()
    qtbot.addWidget(dialog)
    qtbot.waitExposed(dialog)
    dialog.path.setText(str(target))
    assert dialog.passphrase.isEnabled()
    qtbot.keyClicks(dialog.passphrase, "not the passphrase")
    qtbot.keyClick(dialog.passphrase, Qt.Key.Key_Return)  # imports; it used to open the file picker
    qtbot.waitUntil(lambda: dialog.result.property("tone") == "error", timeout=10_000)
    settle(qtbot)
    assert dialog.isVisible() and dialog.result.isVisible()
    assert cut_fields(dialog) == []
    dialog.passphrase.clear()
    qtbot.keyClicks(dialog.passphrase, "river stone")
    qtbot.keyClick(dialog.passphrase, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: dialog.result.property("tone") == "ok", timeout=10_000)
    settle(qtbot)
    assert dialog.progress.isVisible() and cut_fields(dialog) == []
    assert pickers.opened == []


def test_set_a_passphrase_enter_keeps_errors_in_view_and_wants_eight_characters(qtbot, desktop):
    recovery = sections(desktop).recovery
    qtbot.waitUntil(lambda: recovery.passphrase.text() == "Set a passphrase…")
    dialog = recovery.open_passphrase()
    qtbot.addWidget(dialog)
    qtbot.waitExposed(dialog)
    qtbot.keyClicks(dialog.new, "lantern harbour")
    qtbot.keyClicks(dialog.again, "lantern harbor")
    qtbot.keyClick(dialog.again, Qt.Key.Key_Return)  # it used to press Cancel: closed, nothing said, nothing set
    settle(qtbot)
    assert dialog.isVisible() and "differ" in dialog.message.text
    assert cut_fields(dialog) == []

    dialog.new.clear()
    dialog.again.clear()
    qtbot.keyClicks(dialog.new, "ab")
    qtbot.keyClicks(dialog.again, "ab")
    qtbot.keyClick(dialog.again, Qt.Key.Key_Return)
    settle(qtbot)
    assert dialog.isVisible() and "at least 8 characters" in dialog.message.text
    assert cut_fields(dialog) == []
    wait_idle(qtbot, desktop)
    assert not engine_of(desktop).has_passphrase

    dialog.new.clear()
    dialog.again.clear()
    qtbot.keyClicks(dialog.new, "lantern harbour")
    qtbot.keyClicks(dialog.again, "lantern harbour")
    qtbot.keyClick(dialog.again, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=10_000)
    assert engine_of(desktop).passphrase_opens("lantern harbour")

    # "Confirm it is you": a wrong passphrase and Enter keep it open, with the error in view
    qtbot.waitUntil(lambda: recovery._has_passphrase)
    recovery.reveal()
    reauth = recovery.dialog
    qtbot.addWidget(reauth)
    qtbot.waitExposed(reauth)
    qtbot.keyClicks(reauth.phrase, "not it at all")
    qtbot.keyClick(reauth.phrase, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: reauth.message.isVisible(), timeout=10_000)
    settle(qtbot)
    assert reauth.isVisible() and "does not open" in reauth.message.text
    assert cut_fields(reauth) == []


def test_the_engine_refuses_a_short_new_passphrase(desktop):
    import pytest

    from engine import UserError

    with pytest.raises(UserError, match="at least 8 characters"):
        engine_of(desktop).change_passphrase("ab")
    assert not engine_of(desktop).has_passphrase


def test_restore_asks_before_replacing_the_store(qtbot, desktop):
    eng = engine_of(desktop)
    eng.remember("Written before the snapshot.")
    eng.backup_now()
    later = eng.remember("Written after the snapshot.").id
    box = sections(desktop).backups
    box.refresh()
    qtbot.waitUntil(lambda: box.restore_button.isEnabled())
    dialog = box.open_restore()
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.list.count() == 1)
    dialog.list.setCurrentRow(0)
    asked: list[str] = []

    def answer_no() -> None:
        box_ = QApplication.activeModalWidget()
        if isinstance(box_, QMessageBox):
            asked.append(box_.text())
            box_.button(QMessageBox.StandardButton.No).click()
        else:
            QTimer.singleShot(30, answer_no)

    QTimer.singleShot(30, answer_no)
    qtbot.mouseClick(dialog.restore_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, desktop)
    assert asked and "Everything stored after this snapshot" in asked[0]
    assert engine_of(desktop) is eng and eng.get(later).text == "Written after the snapshot."
    assert dialog.restore_button.isEnabled() and dialog.message.text == ""


def test_a_dialog_taller_than_the_screen_scrolls_its_fields_and_keeps_its_buttons_in_view(qtbot, desktop):
    """On a short screen (720x450 at scale 2) the export dialog could not grow enough: Qt squeezed its fields
    to a few pixels. Now what does not fit scrolls, the fields keep their height and the buttons stay."""
    export = sections(desktop).transfer.open_export()
    qtbot.addWidget(export)
    qtbot.waitExposed(export)
    export.result.set("\n".join(f"Line {i} of a long message about the export." for i in range(60)), "error")
    settle(qtbot)
    room = export.screen().availableGeometry().height()
    assert export.height() <= room
    assert export.path.height() >= export.path.sizeHint().height()
    assert export.passphrase.height() >= export.passphrase.sizeHint().height()
    assert cut_fields(export) == []  # the long message too: whole, in the scroll area
    for b in (export.start, export.close_button):
        at = b.mapTo(export, b.rect().topLeft())
        assert b.isVisible() and export.rect().contains(at) and at.y() + b.height() <= export.height(), b.text()
