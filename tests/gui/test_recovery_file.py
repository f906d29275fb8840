"""The recovery key saved to a file from the app (at first run and from Settings): the file is written,
private, readable, and the key in it opens the store through the app's own recovery flow."""

from __future__ import annotations

import re
import stat
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QFileDialog, QLineEdit

from tests.gui.conftest import engine_of, make_desktop, wait_idle

KEY = re.compile(r"\b[A-Z0-9]{4}(?:-[A-Z0-9]{4}){7}\b")


def answer_file_dialog(qtbot, path: Path) -> list[str]:
    """When the app's file dialog shows, type `path` into it and accept, as a user would. Returns the titles seen."""
    seen: list[str] = []

    def fill() -> None:
        dialogs = [w for w in QApplication.topLevelWidgets() if isinstance(w, QFileDialog) and w.isVisible()]
        if not dialogs:
            QTimer.singleShot(50, fill)
            return
        dialog = dialogs[0]
        seen.append(dialog.windowTitle())
        # typed into the name field: selectFile() leaves the name alone while that field has the focus, so
        # the key went to the default name in the folder of `path`
        dialog.findChild(QLineEdit, "fileNameEdit").setText(str(path))
        dialog.accept()

    QTimer.singleShot(50, fill)
    return seen


def saved_key(qtbot, dialog, path: Path) -> str:
    seen = answer_file_dialog(qtbot, path)
    qtbot.mouseClick(dialog.save_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: path.exists(), timeout=10_000)
    assert seen == ["Save the recovery key"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "Saved to" in dialog.feedback.text() and str(path) in dialog.feedback.text()
    found = KEY.findall(path.read_text(encoding="utf-8"))
    assert found == [dialog.key]
    return found[0]


def test_save_to_a_file_writes_the_key_that_opens_the_store(qtbot, qasync_loop, profile_home, lexical_embedder,
                                                            tmp_path):
    import keyring

    from desktop.app import DesktopApp
    from desktop.recovery_dialogs import OpenWithRecoveryDialog
    from engine.keys import SERVICE, read_profile

    app = make_desktop(qtbot, profile_home, lexical_embedder)
    try:
        first = app.recovery_dialog
        assert first is not None and first.isVisible()
        key = saved_key(qtbot, first, tmp_path / "first-run key.txt")

        # Settings → Recovery → Show recovery key… → Save to a file…
        app.window.show_page("settings")
        recovery = app.window.settings.sections.recovery
        first.kept.setChecked(True)
        qtbot.mouseClick(first.done_button, Qt.MouseButton.LeftButton)
        recovery.reveal()
        qtbot.waitUntil(lambda: recovery.dialog is not None and recovery.dialog.isVisible())
        show = next(b for b in recovery.dialog.buttons() if b.text() == "Show")
        qtbot.mouseClick(show, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: getattr(recovery.dialog, "key", None) == key)
        assert saved_key(qtbot, recovery.dialog, tmp_path / "from settings.txt") == key
        recovery.dialog.close()
        uid = engine_of(app).remember("Opened again with the key from the file.").id
        wait_idle(qtbot, app)
    finally:
        app.quit()

    # this computer's keychain loses the key: the file's key opens the store in the app
    account = read_profile(profile_home).key_account
    keyring.delete_password(SERVICE, account)
    from_file = KEY.findall((tmp_path / "first-run key.txt").read_text(encoding="utf-8"))[0]
    again = DesktopApp(profile_home, embedder=lexical_embedder, use_tray=False, use_hotkey=False)
    qtbot.addWidget(again.window)
    try:
        qtbot.waitUntil(lambda: isinstance(again.recovery_dialog, OpenWithRecoveryDialog)
                        and again.recovery_dialog.isVisible(), timeout=20_000)
        opener = again.recovery_dialog
        qtbot.keyClicks(opener.key, from_file)
        qtbot.keyClick(opener.key, Qt.Key.Key_Return)  # Enter opens (it used to press Quit)
        qtbot.waitUntil(lambda: again.bridge.info is not None or opener.error.property("tone") == "error",
                        timeout=30_000)
        assert again.bridge.info is not None, opener.error.label.text()
        assert engine_of(again).get(uid).text == "Opened again with the key from the file."
    finally:
        again.quit()
