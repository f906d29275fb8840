"""The app follows the store whoever writes to it, and notices when the language model stops answering."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ollama_server import OllamaTestServer

from .conftest import make_desktop, wait_idle


@pytest.fixture
def outsider(desktop, profile_home: Path, lexical_embedder):
    """A second engine on the same file, as the CLI would open it (another connection, another actor)."""
    from engine import Engine

    eng = Engine.open(profile_home, actor="cli", embedder=lexical_embedder, interactive=False)
    yield eng
    eng.close()


def test_a_memory_written_by_another_program_shows_up_with_its_count(qtbot, desktop, outsider):
    wait_idle(qtbot, desktop)
    browser, status = desktop.window.memories, desktop.window.status
    assert browser.visible_ids() == []
    result = outsider.remember("The heating engineer comes on the third of March", embed="none")
    # the poll runs every Bridge.POLL_MS; two seconds is the promise
    qtbot.waitUntil(lambda: result.id in browser.visible_ids(), timeout=2000)
    qtbot.waitUntil(lambda: status.count.text().startswith("1 memory"), timeout=2000)

    outsider.forget(result.id)
    qtbot.waitUntil(lambda: result.id not in browser.visible_ids(), timeout=2000)
    qtbot.waitUntil(lambda: status.count.text().startswith("0 memories"), timeout=2000)


def test_a_file_ingested_by_another_program_shows_up_in_documents(qtbot, desktop, outsider, tmp_path):
    wait_idle(qtbot, desktop)
    desktop.window.show_page("documents")
    docs = desktop.window.documents
    note = tmp_path / "boiler.md"
    note.write_text("# Boiler\n\nThe boiler's service code is 4471 and it is serviced every October.\n")
    outsider.ingest([note])
    qtbot.waitUntil(lambda: docs.list.topLevelItemCount() == 1, timeout=2000)
    assert docs.list.topLevelItem(0).text(0) == "Boiler"
    qtbot.waitUntil(lambda: "1 document" in desktop.window.status.count.text(), timeout=2000)


def test_the_apps_own_writes_are_not_announced_twice(qtbot, desktop):
    wait_idle(qtbot, desktop)
    seen: list = []
    desktop.bridge.outside_changed.connect(seen.append)
    with qtbot.waitSignal(desktop.bridge.changed, timeout=5000):
        desktop.bridge.remember("Parking is on level two", embed="none")
    qtbot.wait(3 * desktop.bridge.POLL_MS)
    assert seen == []


def test_answers_ready_turns_off_when_ollama_stops_answering(qtbot, qasync_loop, profile_home, lexical_embedder,
                                                             monkeypatch):
    import desktop.app as app_module

    monkeypatch.setattr(app_module, "HEALTH_EVERY_MS", 300)
    server = OllamaTestServer(models=["llama3.2"]).__enter__()
    try:
        monkeypatch.setenv("OLLAMA_HOST", server.url)
        app = make_desktop(qtbot, profile_home, lexical_embedder)
        try:
            llm = app.window.status.llm
            qtbot.waitUntil(lambda: llm.text() == "● Answers ready", timeout=10_000)
            server.close()
            qtbot.waitUntil(lambda: llm.text() != "● Answers ready", timeout=10_000)
            assert "Sources only" in llm.text()
        finally:
            app.quit()
    finally:
        server.close()
