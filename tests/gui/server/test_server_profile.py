"""The desktop app on a profile that lives on a server, as a person uses it: the first run's choice "Connect
to a server", a capture seen in Memories, a memory written by another device showing up by itself, Settings
saying where the memory is; then the server stopped: a capture waits ("1 waiting to send"), Recall says it
needs the server; the server back: the capture arrives, once. A real server process on a real PostgreSQL."""

from __future__ import annotations

import json

import httpx
from PySide6.QtCore import Qt


def connect_at_first_run(qtbot, app, url: str, token: str) -> None:
    qtbot.waitUntil(lambda: app.where_dialog is not None and app.where_dialog.isVisible(), timeout=10_000)
    dialog = app.where_dialog
    qtbot.mouseClick(dialog.server, Qt.MouseButton.LeftButton)
    assert dialog.server.isChecked() and dialog.go.text() == "Connect"
    qtbot.keyClicks(dialog.address, url)
    qtbot.keyClicks(dialog.token, token)
    qtbot.mouseClick(dialog.go, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: app.bridge.info is not None, timeout=30_000)


def test_a_server_profile_from_first_run_to_offline_and_back(qtbot, profile_home, new_app,
                                                             server, monkeypatch, tmp_path, capture, texts_on_server):
    from desktop.main_window import MainWindow

    errors: list[str] = []  # a page that cannot work on a server profile must say so on itself, never in a box
    monkeypatch.setattr(MainWindow, "show_error", lambda self, message: errors.append(message))
    srv, token = server
    app = new_app(profile_home)
    try:
        # a wrong token is refused with the server's reason, and nothing is kept
        qtbot.waitUntil(lambda: app.where_dialog is not None and app.where_dialog.isVisible(), timeout=10_000)
        dialog = app.where_dialog
        assert dialog.local.isChecked() and dialog.go.text() == "Continue"  # this computer is the default
        assert not dialog.passphrase_note.isVisible() and not dialog.passphrase.isVisible()  # a keychain: none
        dialog.server.setChecked(True)
        qtbot.keyClicks(dialog.address, srv.url)
        qtbot.keyClicks(dialog.token, "pllm_not-a-token")
        qtbot.mouseClick(dialog.go, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: "refused this profile's token" in dialog.problem.label.text(), timeout=15_000)
        assert app.bridge.info is None and not (profile_home / "connection.json").exists()
        dialog.address.clear()
        dialog.token.clear()
        connect_at_first_run(qtbot, app, srv.url, token)
        info = app.bridge.info
        assert info.connection is not None and info.connection.url == srv.url
        assert not (profile_home / "memory.db").exists()  # nothing of the memory is kept on this computer
        assert token not in json.dumps([p.read_text(errors="replace") for p in profile_home.rglob("*.json")])
        status = app.window.status
        qtbot.waitUntil(lambda: status.server.isVisible() and status.server.text() == "● Server", timeout=10_000)
        qtbot.wait(2000)
        assert errors == []

        # remember, and see it
        capture(app, "The boiler's service code is 4471")
        browser = app.window.memories
        qtbot.waitUntil(lambda: len(browser.visible_ids()) == 1, timeout=10_000)
        [boiler] = browser.visible_ids()
        assert texts_on_server() == ["The boiler's service code is 4471"]

        # another device writes: it shows up by itself within a few seconds
        with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {token}"}) as other:
            made = other.post("/memory/remember", json={"text": "Swimming lessons are on Tuesdays at six"}).json()
        qtbot.waitUntil(lambda: made["id"] in browser.visible_ids(), timeout=5_000)
        qtbot.waitUntil(lambda: status.count.text().startswith("2 memories"), timeout=5_000)

        # a file added on the Documents page is uploaded, and listed from the server
        note = tmp_path / "boiler-manual.md"
        note.write_text("# Boiler manual\n\nBleed the radiators every autumn; the pressure should read 1.5 bar.\n")
        app.window.show_page("documents")
        docs = app.window.documents
        assert docs.ingest([str(note)])
        qtbot.waitUntil(lambda: not docs.running and docs.list.topLevelItemCount() == 1, timeout=30_000)
        assert docs.list.topLevelItem(0).text(0) == "Boiler manual"

        # Settings says where the memory is, and that the server answers
        app.window.show_page("settings")
        box = app.window.settings.sections.server
        assert srv.url in box.where.text() and box.isVisible()
        assert not app.window.settings.sections.backups.isVisible()  # a server's backups are its operator's
        qtbot.waitUntil(lambda: box.health.text().startswith("● Connected"), timeout=10_000)

        # the server stops: a capture and an edit wait, and the app says so; recall says it needs the server
        srv.stop()
        capture(app, "The plumber's number is 555 0199")
        qtbot.waitUntil(lambda: status.server.text() == "● Offline · 1 waiting to send", timeout=10_000)
        assert "1 waiting to send" in box.health.text() and "Cannot be reached" in box.health.text()
        edited: list[object] = []
        app.bridge.update(boiler, done=edited.append, failed=edited.append, text="The boiler's service code is 4472")
        qtbot.waitUntil(lambda: status.server.text() == "● Offline · 2 waiting to send", timeout=10_000)
        qtbot.waitUntil(lambda: bool(edited), timeout=10_000)  # its answer comes after the status bar's poll
        assert edited == [None]  # kept, not failed
        failed: list[str] = []
        app.bridge.recall("plumber", lambda hits: failed.append("answered"), failed=failed.append)
        qtbot.waitUntil(lambda: bool(failed), timeout=10_000)
        assert failed[0].startswith("Recall needs the server") and "2 writes wait in the outbox" in failed[0]

        # the server is back: the capture and the edit arrive, once, in order, and the app shows them
        srv.start()
        qtbot.waitUntil(lambda: status.server.text() == "● Server", timeout=20_000)
        assert texts_on_server() == ["The boiler's service code is 4472",
                                           "Swimming lessons are on Tuesdays at six",
                                           "The plumber's number is 555 0199"]
        qtbot.waitUntil(lambda: len(browser.visible_ids()) == 3, timeout=10_000)
        qtbot.wait(3 * app.bridge.SERVER_POLL_MS)  # more polls: nothing is sent again
        assert len(texts_on_server()) == 3
        assert errors == []
    finally:
        app.quit()


def test_keep_it_on_this_computer_opens_a_local_store(qtbot, profile_home, new_app):
    app = new_app(profile_home)
    try:
        qtbot.waitUntil(lambda: app.where_dialog is not None and app.where_dialog.isVisible(), timeout=10_000)
        assert app.bridge.info is None  # nothing is made before the choice
        qtbot.mouseClick(app.where_dialog.go, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: app.bridge.info is not None, timeout=20_000)
        assert app.bridge.info.connection is None and (profile_home / "memory.db").exists()
        assert not app.window.status.server.isVisible()
        app.window.show_page("settings")
        box = app.window.settings.sections.server
        assert box.where.text().startswith("On this computer") and not box.disconnect.isVisible()
    finally:
        app.quit()
