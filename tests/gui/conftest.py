"""GUI test fixtures: offscreen Qt, one session-wide qasync loop, a temp profile per test.

QT_QPA_PLATFORM is set before anything imports Qt. The qasync loop is created once for the whole session:
stopping a qasync loop calls QApplication.exit(), which would break every later qtbot.wait.
"""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"
os.environ.setdefault("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")

import asyncio  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

PLAINTEXT_KEYRING = "keyrings.alt.file.PlaintextKeyring"


@pytest.fixture(autouse=True)
def profile_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own profile directory and the plaintext test keyring."""
    home = tmp_path / "profile"
    monkeypatch.setenv("PERSONAL_LLM_HOME", str(home))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", PLAINTEXT_KEYRING)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.delenv("PERSONAL_LLM_STARTUP_REPORT", raising=False)
    return home


@pytest.fixture(scope="session")
def qasync_loop(qapp) -> Iterator[asyncio.AbstractEventLoop]:
    import qasync

    loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


@pytest.fixture(scope="session")
def shared_embedder():
    """The real embedding model, loaded once for the session (a few seconds)."""
    from engine.embeddings import Embedder

    embedder = Embedder()
    embedder.load()
    return embedder


@pytest.fixture
def lexical_embedder():
    from engine.embeddings import NoEmbedder

    return NoEmbedder()


def make_desktop(qtbot, home: Path, embedder, **kwargs):
    from desktop.app import DesktopApp

    kwargs.setdefault("use_tray", False)
    kwargs.setdefault("use_hotkey", False)
    kwargs.setdefault("undo_seconds", 0.4)
    kwargs.setdefault("ask_where", False)  # a new profile keeps its memory on this computer (no first-run choice)
    desktop = DesktopApp(home, embedder=embedder, **kwargs)
    qtbot.addWidget(desktop.window)
    qtbot.addWidget(desktop.capture)
    qtbot.waitUntil(lambda: desktop.bridge.info is not None, timeout=20_000)
    return desktop


@pytest.fixture
def desktop(qtbot, qasync_loop, profile_home: Path, lexical_embedder):
    """The whole app (window, capture box, bridge) on a fresh profile, words-only search, no tray/hotkey."""
    app = make_desktop(qtbot, profile_home, lexical_embedder)
    yield app
    app.quit()


def wait_idle(qtbot, desktop, timeout: int = 10_000) -> None:
    qtbot.waitUntil(lambda: not desktop.bridge.busy, timeout=timeout)
    qtbot.wait(50)  # results delivered through queued signals


def engine_of(desktop):
    """The engine behind the bridge — for assertions only (tests may block the UI thread)."""
    return desktop.bridge._engine.result(timeout=20)


@pytest.fixture
def semantic_app(qtbot, qasync_loop, profile_home, shared_embedder) -> Iterator:
    """The desktop with the real model, once the status bar says semantic search is ready."""
    app = make_desktop(qtbot, profile_home, shared_embedder)
    try:
        qtbot.waitUntil(lambda: app.window.status.model_state == "ready", timeout=30_000)
        yield app
    finally:
        app.quit()


@pytest.fixture
def themed(qapp):
    """The app's look (Fusion, its palette and style sheet), as desktop.app's main applies it."""
    from desktop import theme

    palette, style = qapp.palette(), qapp.styleSheet()
    theme.Theme(qapp)
    yield
    qapp.setStyleSheet(style)
    qapp.setPalette(palette)
