"""Settings → appearance, export/import, the HTTP API, backups and recovery, on a real store through the app."""

from __future__ import annotations

import shutil
import stat
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from tests.gui.conftest import engine_of, wait_idle


def sections(desktop) -> Any:
    w = desktop.window
    w.show_page("settings")
    return w.settings.sections


@pytest.fixture
def restore_theme(qapp) -> Iterator[None]:
    """The theme is the application's: put it back for the tests that follow."""
    from desktop import theme

    palette, sheet, style = QApplication.palette(), qapp.styleSheet(), qapp.style().name()
    yield
    theme._mode = "system"
    theme._themes.clear()
    qapp.setStyleSheet(sheet)
    qapp.setPalette(palette)
    qapp.setStyle(style)


def test_the_theme_switch_applies_at_once_and_is_saved(qtbot, desktop, restore_theme, profile_home):
    from desktop import theme
    from desktop.profile import saved_theme

    box = sections(desktop).appearance
    box.mode.setCurrentIndex(box.mode.findData("dark"))
    assert QApplication.palette().color(QPalette.ColorRole.Window).name() == theme.palette(True).color(
        QPalette.ColorRole.Window).name()
    assert theme.is_dark()
    wait_idle(qtbot, desktop)
    assert engine_of(desktop).settings.theme == "dark" and saved_theme(profile_home) == "dark"
    box.mode.setCurrentIndex(box.mode.findData("light"))
    assert QApplication.palette().color(QPalette.ColorRole.Base).name() == "#ffffff" and not theme.is_dark()
    wait_idle(qtbot, desktop)
    assert saved_theme(profile_home) == "light"


def test_export_then_import_round_trip_through_the_dialogs(qtbot, desktop, tmp_path):
    eng = engine_of(desktop)
    uids = [eng.remember(t).id for t in ("The boat is moored at pier 9.", "Mia's birthday is on 3 June.",
                                         "The spare key is under the blue pot.")]
    box = sections(desktop).transfer
    export = box.open_export()
    qtbot.addWidget(export)
    target = tmp_path / "out" / "memory.jsonl"
    target.parent.mkdir()
    export.path.setText(str(target))
    export.passphrase.setText("river stone")
    export.again.setText("river stones")
    qtbot.mouseClick(export.start, Qt.MouseButton.LeftButton)
    assert "differ" in export.result.label.text() and not target.exists()
    export.again.setText("river stone")
    qtbot.mouseClick(export.start, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: export.result.property("tone") == "ok", timeout=10_000)
    assert "3 memories" in export.result.label.text() and "encrypted" in export.result.label.text()
    assert target.exists() and desktop.bridge.is_encrypted_export(target)
    assert b"pier 9" not in target.read_bytes()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    export.close()

    eng.forget(uids[1])
    dialog = box.open_import()
    qtbot.addWidget(dialog)
    dialog.path.setText(str(target))
    assert dialog.passphrase.isEnabled()  # the file is encrypted
    dialog.passphrase.setText("wrong")
    qtbot.mouseClick(dialog.start, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.result.property("tone") == "error", timeout=10_000)
    assert eng.stats().memories == 2
    dialog.passphrase.setText("river stone")
    qtbot.mouseClick(dialog.start, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.result.property("tone") == "ok", timeout=10_000)
    assert dialog.result.label.text().startswith("Added 1 memory") and "skipped" in dialog.result.label.text()
    assert eng.get(uids[1]).text == "Mia's birthday is on 3 June."
    assert dialog.progress.value() == dialog.progress.maximum()


def test_the_api_toggle_starts_a_server_that_wants_the_token_and_stops_it(qtbot, desktop):
    eng = engine_of(desktop)
    settings = eng.settings.model_copy(deep=True)
    settings.embedding_model = "none"  # the server's own engine: no model to load
    settings.api_port = 0  # any free port
    eng.apply_settings(settings)
    box = sections(desktop).api
    box._port = 0
    qtbot.waitUntil(lambda: len(box.token.text()) > 20)
    token = box.token.text()
    assert token == eng.api_token()
    qtbot.mouseClick(box.copy_token, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == token
    assert '"mcp"' in box.mcp.toPlainText() and str(desktop.home) in box.mcp.toPlainText()

    box.enabled.setChecked(True)
    qtbot.waitUntil(lambda: box.server.url is not None, timeout=60_000)
    url = box.server.url
    assert url.startswith("http://127.0.0.1:") and url in box.state.label.text()
    assert httpx.get(f"{url}/stats", timeout=10).status_code == 401
    eng.remember("Served while the app runs.")
    got = httpx.get(f"{url}/stats", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert got.status_code == 200 and got.json()["memories"] == 1
    wait_idle(qtbot, desktop)
    assert eng.settings.api_enabled

    box.enabled.setChecked(False)
    assert not box.server.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/stats", timeout=5)
    wait_idle(qtbot, desktop)
    assert not eng.settings.api_enabled


def test_back_up_now_makes_a_snapshot_the_schedule_takes_one_when_due_and_an_old_one_is_warned_about(
        qtbot, desktop, tmp_path):
    eng = engine_of(desktop)
    eng.remember("Backed up.")
    box = sections(desktop).backups
    qtbot.waitUntil(lambda: box._status is not None)
    assert box.warning.isVisible() and "no backup" in box.warning.label.text()
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    box.choose_folder(str(folder))
    qtbot.waitUntil(lambda: box._status is not None and box._status.folder == folder)

    qtbot.mouseClick(box.now_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: box._status.count == 1 and box.now_button.isEnabled(), timeout=10_000)
    (snap,) = eng.snapshots()
    assert snap.path.parent == folder and snap.path.stat().st_size > 0
    assert box.last.text().startswith("Today") and not box.warning.isVisible()
    box.scheduler.check()  # a fresh snapshot: nothing is due
    wait_idle(qtbot, desktop)
    assert len(eng.snapshots()) == 1

    old = datetime.now() - timedelta(days=10)
    name = f"memory-{old:%Y%m%dT%H%M%S%f}"
    shutil.move(snap.path, folder / f"{name}.db")
    shutil.move(folder / f"{snap.name}.profile.json", folder / f"{name}.profile.json")
    box.refresh()
    qtbot.waitUntil(lambda: box.warning.isVisible())
    assert "10 days ago" in box.warning.label.text() and box.warning.property("tone") == "warn"

    box.scheduler.check()  # daily: due, so the app takes one by itself
    qtbot.waitUntil(lambda: len(eng.snapshots()) == 2, timeout=10_000)
    qtbot.waitUntil(lambda: not box.warning.isVisible())


def test_first_run_shows_the_recovery_key_once_and_asks_to_confirm_it_was_kept(qtbot, desktop, tmp_path):
    dialog = desktop.recovery_dialog
    assert dialog is not None and dialog.isVisible()
    key = dialog.key
    assert len(key.replace("-", "")) == 32 and dialog.key_label.text() == key
    qtbot.mouseClick(dialog.copy_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == key
    sheet = tmp_path / "key.txt"
    dialog.save(str(sheet))
    assert key in sheet.read_text() and stat.S_IMODE(sheet.stat().st_mode) == 0o600
    recovery = sections(desktop).recovery
    assert recovery.reminder.isVisible()
    assert not dialog.done_button.isEnabled()
    dialog.kept.setChecked(True)
    qtbot.mouseClick(dialog.done_button, Qt.MouseButton.LeftButton)
    assert not dialog.isVisible() and not recovery.reminder.isVisible()
    wait_idle(qtbot, desktop)
    assert engine_of(desktop).settings.recovery_confirmed

    # Settings shows the same key again; a passphrase set there is asked for first
    recovery.reveal()
    qtbot.waitUntil(lambda: recovery.dialog is not None and recovery.dialog.isVisible())
    show = next(b for b in recovery.dialog.buttons() if b.text() == "Show")
    qtbot.mouseClick(show, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: getattr(recovery.dialog, "key", None) == key)
    recovery.dialog.close()
    assert not recovery._has_passphrase
    change = recovery.open_passphrase()
    change.new.setText("lantern harbour")
    change.again.setText("lantern harbour")
    qtbot.mouseClick(change.ok, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: recovery._has_passphrase and recovery.passphrase.text() == "Change passphrase…",
                    timeout=10_000)
    recovery.reveal()
    reauth = recovery.dialog
    reauth.phrase.setText("not it")
    qtbot.mouseClick(reauth.ok, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "does not open" in reauth.message.label.text(), timeout=10_000)
    reauth.phrase.setText("lantern harbour")
    qtbot.mouseClick(reauth.ok, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: getattr(recovery.dialog, "key", None) == key, timeout=10_000)
    assert engine_of(desktop).passphrase_opens("lantern harbour")


def test_open_with_the_recovery_key_after_the_keychain_entry_is_gone(qtbot, qasync_loop, profile_home,
                                                                     lexical_embedder):
    import keyring

    from desktop.app import DesktopApp
    from desktop.recovery_dialogs import OpenWithRecoveryDialog
    from engine import Engine
    from engine.keys import SERVICE, read_profile

    with Engine.open(profile_home, embedder=lexical_embedder) as eng:
        key = eng.recovery_key
        uid = eng.remember("Kept through a lost keychain.").id
    account = read_profile(profile_home).key_account
    keyring.delete_password(SERVICE, account)
    assert keyring.get_password(SERVICE, account) is None

    app = DesktopApp(profile_home, embedder=lexical_embedder, use_tray=False, use_hotkey=False)
    qtbot.addWidget(app.window)
    try:
        qtbot.waitUntil(lambda: isinstance(app.recovery_dialog, OpenWithRecoveryDialog)
                        and app.recovery_dialog.isVisible(), timeout=20_000)
        dialog = app.recovery_dialog
        assert "not in the keychain" in dialog.reason.text()  # why, in the engine's words
        dialog.key.setText("AAAA-BBBB-CCCC-DDDD-EEEE-FFFF-GGGG-HHHH")
        qtbot.mouseClick(dialog.open_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.error.property("tone") == "error" and dialog.open_button.isEnabled(),
                        timeout=20_000)
        assert app.bridge.info is None
        dialog.key.setText(key.lower())
        qtbot.mouseClick(dialog.open_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: app.bridge.info is not None, timeout=20_000)
        assert not dialog.isVisible()
        assert keyring.get_password(SERVICE, account) is not None  # a new keychain entry
        assert engine_of(app).get(uid).text == "Kept through a lost keychain."
    finally:
        app.quit()
    with Engine.open(profile_home, embedder=lexical_embedder) as eng:  # and it opens normally from now on
        assert eng.get(uid).text == "Kept through a lost keychain."


def test_restore_from_settings_brings_a_snapshot_back_and_keeps_the_current_store_aside(qtbot, desktop,
                                                                                        profile_home):
    from engine import NotFound

    eng = engine_of(desktop)
    kept = eng.remember("Written before the snapshot.").id
    eng.backup_now()
    later = eng.remember("Written after the snapshot.").id
    box = sections(desktop).backups
    box.refresh()
    qtbot.waitUntil(lambda: box.restore_button.isEnabled())
    dialog = box.open_restore()
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.list.count() == 1)
    dialog.list.setCurrentRow(0)
    dialog.restore(confirm=False)
    qtbot.waitUntil(lambda: dialog.message.property("tone") == "ok", timeout=20_000)
    restored = engine_of(desktop)
    assert restored is not eng and desktop.bridge.info is not None
    assert restored.get(kept).text == "Written before the snapshot."
    with pytest.raises(NotFound):
        restored.get(later)
    (aside,) = profile_home.glob("memory.db.before-restore-*")
    assert "kept at" in dialog.message.label.text() and str(aside) in dialog.message.label.text()
    desktop.bridge.remember("Written after the restore.")
    wait_idle(qtbot, desktop)
    assert restored.stats().memories == 2
