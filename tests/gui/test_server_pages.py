"""Every page of the desktop app on a profile that lives on a server, against a real server process on a real
PostgreSQL: what the server offers works as on this computer; what it does not (the activity log, conflicts,
agents, watched folders) says so on the page, never in an error box. Captures made while the server is away are
listed with the memories, marked waiting to send, and the list reads itself again when the server is back.
Settings copies the memory to a server and back to this computer, with progress, in the background."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PySide6.QtCore import Qt

from tests import pg_server as pg
from tests.gui.test_server_profile import capture, texts_on_server
from tests.postgres.serving import Server

pg_server, pg_template, pg_db, pg_url, pg_empty_url = pg.pg_server, pg.pg_template, pg.pg_db, pg.pg_url, pg.pg_empty_url


@pytest.fixture
def server(pg_url: str, tmp_path: Path) -> Iterator[tuple[Server, str]]:
    from engine import users

    token = users.add(pg_url, "alice")
    s = Server(pg_url, tmp_path / "server-home").start()
    try:
        yield s, token
    finally:
        s.stop()


def connected_app(qtbot, home: Path, url: str, token: str, embedder, monkeypatch) -> tuple[object, list[str]]:
    """The app on a profile connected to `url` (as `personal-llm connect` leaves it); the error boxes it showed."""
    from desktop.app import DesktopApp
    from desktop.main_window import MainWindow
    from engine import check_server, connect_profile

    home.mkdir(parents=True, exist_ok=True)
    connect_profile(home, check_server(url, token), token)
    errors: list[str] = []
    monkeypatch.setattr(MainWindow, "show_error", lambda self, message: errors.append(message))
    app = DesktopApp(home, embedder=embedder, use_tray=False, use_hotkey=False, undo_seconds=0.4)
    qtbot.addWidget(app.window)
    qtbot.addWidget(app.capture)
    qtbot.waitUntil(lambda: app.bridge.info is not None, timeout=30_000)
    return app, errors


def when_column(browser, uid: str) -> str:
    model = browser.model
    return model.data(model.index(model.row_of(uid), 3))


def test_every_page_on_a_server_profile(qtbot, qasync_loop, profile_home, lexical_embedder, server, pg_url,
                                        monkeypatch):
    srv, token = server
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {token}"}) as other:
        other.post("/memory/remember", json={"text": "The boiler was serviced by Marta in March"}).raise_for_status()
    app, errors = connected_app(qtbot, profile_home, srv.url, token, lexical_embedder, monkeypatch)
    w = app.window
    try:
        w.build_pages()
        qtbot.waitUntil(lambda: len(w.memories.visible_ids()) == 1, timeout=10_000)
        [boiler] = w.memories.visible_ids()

        # what the server does not offer says so on its page, with the reason
        w.show_page("activity")
        assert w.activity.stack.currentWidget() is w.activity.empty
        assert w.activity.empty.title.text() == "The activity log is kept on the server."
        assert srv.url in w.activity.empty.hint.text() and not w.activity.refresh_button.isVisible()
        w.show_page("conflicts")
        assert w.conflicts.stack.currentWidget() is w.conflicts.empty
        assert "server" in w.conflicts.empty.title.text()
        w.show_page("ask")
        assert not w.ask.agent_toggle.isEnabled()
        assert "computer" in w.ask.agent_toggle.toolTip()
        w.show_page("settings")
        folders = w.settings.folders  # watched folders feed a profile on this computer: it says so
        assert folders.not_here.isVisible() and not folders.body.isVisible()
        assert "Documents" in folders.not_here.text()
        w.show_page("documents")
        assert "uploaded to your server" in w.documents.drop_zone.hint.text()

        # what it offers reads the server: the graph's entities, a search, Ask's sources
        w.show_page("graph")  # read from the server: no facts yet (no language model there), said as such
        qtbot.waitUntil(lambda: "of your server" in w.graph.empty.hint.text(), timeout=10_000)
        w.show_page("memories")
        w.memories.search.setText("boiler")
        qtbot.waitUntil(lambda: len(w.memories.visible_ids()) == 1, timeout=10_000)
        w.memories.search.setText("")
        qtbot.waitUntil(lambda: len(w.memories.visible_ids()) == 1 and not w.memories._reading, timeout=10_000)
        assert errors == []

        # the server goes away: a capture is listed at once, marked waiting to send; the list read again
        # (a filter changed and back) still shows what it showed, and the capture
        srv.stop()
        capture(qtbot, app, "The plumber's number is 555 0199")
        browser = w.memories
        qtbot.waitUntil(lambda: len(browser.visible_ids()) == 2, timeout=10_000)
        [waiting] = [uid for uid in browser.visible_ids() if when_column(browser, uid) == "Waiting to send"]
        assert browser.model.get(waiting).text == "The plumber's number is 555 0199"
        qtbot.waitUntil(lambda: w.status.server.text() == "● Offline · 1 waiting to send", timeout=10_000)
        qtbot.waitUntil(lambda: w.status.count.text().startswith("2 memories"), timeout=10_000)  # as listed
        browser.refresh()
        qtbot.waitUntil(lambda: not browser._reading, timeout=10_000)
        qtbot.wait(300)
        assert browser.visible_ids() == [waiting, boiler] and browser.list_stack.currentWidget() is browser.tree
        assert when_column(browser, waiting) == "Waiting to send"

        # back: the capture is sent once, and the list is read again from the server (nothing waits)
        srv.start()
        qtbot.waitUntil(lambda: w.status.server.text() == "● Server", timeout=20_000)
        qtbot.waitUntil(lambda: len(browser.visible_ids()) == 2
                        and all(when_column(browser, u) != "Waiting to send" for u in browser.visible_ids()),
                        timeout=10_000)
        assert texts_on_server(pg_url) == ["The boiler was serviced by Marta in March",
                                           "The plumber's number is 555 0199"]
        assert errors == []
    finally:
        app.quit()


def test_a_revoked_token_says_so_keeps_the_capture_and_a_new_token_sends_it(
        qtbot, qasync_loop, profile_home, lexical_embedder, server, pg_url, monkeypatch):
    from engine import users

    srv, token = server
    app, errors = connected_app(qtbot, profile_home, srv.url, token, lexical_embedder, monkeypatch)
    w = app.window
    try:
        w.build_pages()
        status = w.status
        qtbot.waitUntil(lambda: status.server.text() == "● Server", timeout=10_000)
        users.remove(pg_url, "alice", forget=False)  # revoked: the server refuses it within its 10 s
        qtbot.waitUntil(lambda: status.server.text().startswith("● Token refused"), timeout=30_000)
        capture(qtbot, app, "The spare key is under the blue pot")  # kept, not failed
        qtbot.waitUntil(lambda: status.server.text() == "● Token refused · 1 waiting to send", timeout=10_000)
        assert "refused this profile's token" in status.server.toolTip()
        assert "Use a new token" in status.currentMessage()
        w.show_page("settings")
        box = w.settings.sections.server
        qtbot.waitUntil(lambda: box.renew.isVisible(), timeout=10_000)
        assert box.health.text().startswith("● Token refused.") and "1 waiting to send" in box.health.text()
        assert texts_on_server(pg_url) == []

        # a wrong token is refused with the reason, and the capture still waits
        box.renew_token("pllm_not-a-token")
        qtbot.waitUntil(lambda: "refused this profile's token" in box.feedback.text, timeout=15_000)
        # the new token (another account here: a user's second token has no command yet) takes it, once
        new = users.add(pg_url, "alice-laptop")
        box.renew_token(new)
        qtbot.waitUntil(lambda: status.server.text() == "● Server", timeout=20_000)
        assert not box.renew.isVisible()
        qtbot.waitUntil(lambda: texts_on_server(pg_url) == ["The spare key is under the blue pot"], timeout=10_000)
        assert new not in "".join(p.read_text(errors="replace") for p in profile_home.rglob("*.json"))
        assert errors == []
    finally:
        app.quit()


def test_without_a_keychain_a_passphrase_protects_the_servers_token(
        qtbot, qasync_loop, profile_home, lexical_embedder, server, pg_url, monkeypatch):
    import keyring.core
    from PySide6.QtWidgets import QInputDialog

    from desktop.app import DesktopApp
    from engine import remote

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    monkeypatch.delenv("PERSONAL_LLM_PASSPHRASE", raising=False)
    keyring.core._keyring_backend = None
    srv, token = server
    app = DesktopApp(profile_home, embedder=lexical_embedder, use_tray=False, use_hotkey=False, undo_seconds=0.4)
    qtbot.addWidget(app.window)
    qtbot.addWidget(app.capture)
    try:
        qtbot.waitUntil(lambda: app.where_dialog is not None and app.where_dialog.isVisible(), timeout=10_000)
        dialog = app.where_dialog
        dialog.server.setChecked(True)
        assert dialog.passphrase.isVisible() and "No keychain" in dialog.passphrase_note.text()
        qtbot.keyClicks(dialog.address, srv.url)
        qtbot.keyClicks(dialog.token, token)
        qtbot.keyClicks(dialog.passphrase, "short")
        qtbot.mouseClick(dialog.go, Qt.MouseButton.LeftButton)
        assert "at least 8 characters" in dialog.problem.label.text()
        dialog.passphrase.setText("correct horse battery")
        dialog.again.setText("correct horse battery")
        qtbot.mouseClick(dialog.go, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: app.bridge.info is not None, timeout=30_000)
        capture(qtbot, app, "The gate code is 1984")
        srv.stop()
        capture(qtbot, app, "The alarm code is 2468")  # into the outbox, encrypted with the sealed key
        qtbot.waitUntil(lambda: app.window.status.server.text() == "● Offline · 1 waiting to send", timeout=10_000)
    finally:
        app.quit()
    files = [p for p in profile_home.rglob("*") if p.is_file()]
    assert not any(token.encode() in p.read_bytes() or b"2468" in p.read_bytes() for p in files)
    assert "protected" in (profile_home / "connection.json").read_text()

    # a new start (a new process: nothing unlocked) asks for the passphrase; a wrong one is asked again
    remote._unlocked.clear()
    remote.close_outbox(profile_home)
    prompts: list[str] = []
    replies = ["wrong passphrase", "correct horse battery"]

    def get_text(parent, title, label, echo):
        prompts.append(label)
        return (replies.pop(0), True) if replies else ("", False)

    monkeypatch.setattr(QInputDialog, "getText", staticmethod(get_text))
    srv.start()
    app = DesktopApp(profile_home, embedder=lexical_embedder, use_tray=False, use_hotkey=False, undo_seconds=0.4)
    qtbot.addWidget(app.window)
    qtbot.addWidget(app.capture)
    try:
        qtbot.waitUntil(lambda: app.bridge.info is not None, timeout=30_000)
        assert len(prompts) == 2 and "Enter it" in prompts[0] and "does not open" in prompts[1]
        qtbot.waitUntil(lambda: app.window.status.server.text() == "● Server", timeout=20_000)
        qtbot.waitUntil(lambda: texts_on_server(pg_url) == ["The gate code is 1984", "The alarm code is 2468"],
                        timeout=10_000)
    finally:
        app.quit()
        keyring.core._keyring_backend = None


def test_settings_copies_a_local_memory_to_the_server_and_back_with_progress_and_a_stop(
        qtbot, qasync_loop, profile_home, tmp_path, lexical_embedder, server, pg_url, monkeypatch):
    from engine import Remembered
    from tests.gui.conftest import engine_of, make_desktop

    srv, token = server
    app = make_desktop(qtbot, profile_home, lexical_embedder)  # a local profile
    try:
        engine_of(app).remember_many([Remembered(f"Local note number {i} about the garden") for i in range(1200)])
        app.window.show_page("settings")
        box = app.window.settings.sections.server
        assert box.move_button.text() == "Copy to a server…"
        dialog = box.open_move()
        dialog.address.setText(srv.url)
        dialog.token.setText(token)
        seen: list[tuple[int, int]] = []
        dialog.bridge_progress = dialog._progressed

        def progressed(done: int, total: int) -> None:
            seen.append((done, total))
            dialog.bridge_progress(done, total)
            if len(seen) == 1:
                dialog.stop_copy()  # the user stops it after the first batch

        monkeypatch.setattr(dialog, "_progressed", progressed)
        dialog.run()
        assert dialog.running and not dialog.start.isEnabled()
        qtbot.waitUntil(lambda: not dialog.running, timeout=120_000)
        assert seen[0][0] == 500 and dialog.result.text.startswith("Stopped: ")
        sent = len(texts_on_server(pg_url))  # the batch on its way when Stop was pressed is stored whole
        assert sent in (500, 1000) and f"{sent:,} items were copied" in dialog.result.text
        monkeypatch.setattr(dialog, "_progressed", dialog.bridge_progress)
        dialog.run()  # again: the rest, nothing twice
        qtbot.waitUntil(lambda: not dialog.running, timeout=120_000)
        assert f"1,200 of them memories: {1200 - sent:,} memories new on the server" in dialog.result.text
        assert len(texts_on_server(pg_url)) == 1200 and dialog.progress.value() == dialog.progress.maximum()
    finally:
        app.quit()

    # and back: a server profile copies its account into a profile kept on this computer
    device = tmp_path / "device"
    back, errors = connected_app(qtbot, device, srv.url, token, lexical_embedder, monkeypatch)
    try:
        back.window.build_pages()
        back.window.show_page("settings")
        box = back.window.settings.sections.server
        assert box.move_button.text() == "Copy to this computer…"
        dialog = box.open_move()
        dialog.name.setText("copy")
        dialog.run()
        qtbot.waitUntil(lambda: not dialog.running, timeout=120_000)
        assert "1,200 of them memories: 1,200 memories new in the profile copy" in dialog.result.text, dialog.result.text
        assert dialog.key_dialog.isVisible()  # the new profile's recovery key, shown once
        assert (profile_home / "profiles" / "copy" / "memory.db").exists()
        assert errors == []
    finally:
        back.quit()
