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
        assert not w.settings.folders.isVisible()  # watched folders feed a profile on this computer
        w.show_page("documents")
        assert "uploaded to your server" in w.documents.drop_zone.hint.text()

        # what it offers reads the server: the graph's entities, a search, Ask's sources
        w.show_page("graph")
        qtbot.wait(1500)
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
