"""What the desktop app's tests on a profile that lives on a server share: a real PostgreSQL (tests/pg_server.py),
a real `personal-llm serve --database` process on it with one user, alice, and her token (`server`); the app on a
profile connected to it (`connected_app`); a capture typed into the quick-capture box (`capture`); and the
user's memories as the database holds them (`texts_on_server`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from PySide6.QtCore import Qt

from tests.pg_server import pg_db, pg_empty_url, pg_server, pg_template, pg_url  # noqa: F401
from tests.postgres.serving import Server


@pytest.fixture
def server(pg_url: str, tmp_path: Path) -> Iterator[tuple[Server, str]]:  # noqa: F811
    """The server process (stopped and started again by the tests) and alice's token."""
    from engine import users

    token = users.add(pg_url, "alice")
    s = Server(pg_url, tmp_path / "server-home").start()
    try:
        yield s, token
    finally:
        s.stop()


@pytest.fixture
def texts_on_server(pg_url: str) -> Callable[[], list[str]]:  # noqa: F811
    """The user's memories on the server, in the order they were stored (not the app's own events)."""
    def texts() -> list[str]:
        with psycopg.connect(pg_url) as con:
            return [r[0] for r in con.execute(
                "SELECT text FROM personal_llm.memories WHERE source <> 'activity' ORDER BY id")]

    return texts


@pytest.fixture
def capture(qtbot) -> Callable[..., None]:
    """Type `text` into the app's capture box and press Return; wait until it says `saved`."""
    def typed(app: Any, text: str, saved: str = "Saved ✓") -> None:
        box = app.capture
        box.open_box()
        qtbot.keyClicks(box.input, text)
        qtbot.keyClick(box.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: box.status.text() == saved, timeout=15_000)

    return typed


@pytest.fixture
def new_app(qtbot, qasync_loop, lexical_embedder) -> Callable[[Path], Any]:
    """`new_app(home)`: the desktop app on the profile at `home` (no tray, no hotkey), its windows watched by
    qtbot. The test quits it."""
    from desktop.app import DesktopApp

    def make(home: Path) -> Any:
        app = DesktopApp(home, embedder=lexical_embedder, use_tray=False, use_hotkey=False, undo_seconds=0.4)
        qtbot.addWidget(app.window)
        qtbot.addWidget(app.capture)
        return app

    return make


@pytest.fixture
def connected_app(qtbot, new_app, monkeypatch) -> Iterator[Callable[..., tuple[Any, list[str]]]]:
    """`connected_app(home, url, token)`: the app on a profile at `home` connected to `url` (as `personal-llm
    connect` leaves it), and the error boxes it showed (a page must say on itself what it cannot do, never in a
    box). Every app made is quit at the end."""
    from desktop.main_window import MainWindow
    from engine import check_server, connect_profile

    errors: list[str] = []
    monkeypatch.setattr(MainWindow, "show_error", lambda self, message: errors.append(message))
    apps: list[Any] = []

    def make(home: Path, url: str, token: str) -> tuple[Any, list[str]]:
        home.mkdir(parents=True, exist_ok=True)
        connect_profile(home, check_server(url, token), token)
        app = new_app(home)
        apps.append(app)
        qtbot.waitUntil(lambda: app.bridge.info is not None, timeout=30_000)
        return app, errors

    yield make
    for app in apps:
        app.quit()
