"""Ask streams the answer into the panel; numbered sources open the memory; 'not in memory' says so."""

from __future__ import annotations

import pytest

from engine import Engine

from .conftest import engine_of, make_desktop

pytestmark = pytest.mark.skipif(not hasattr(Engine, "ask"), reason="Engine.ask has not landed yet")


@pytest.fixture
def ollama():
    from tests.ollama_server import OllamaTestServer

    with OllamaTestServer(models=["llama3.2"]) as server:
        yield server


@pytest.fixture
def asking_desktop(qtbot, qasync_loop, profile_home, lexical_embedder, ollama):
    from engine.config import LLMSettings, Settings, save_settings

    profile_home.mkdir(parents=True, exist_ok=True)
    save_settings(Settings(llm=LLMSettings(host=ollama.url, model="llama3.2")), profile_home)
    app = make_desktop(qtbot, profile_home, lexical_embedder)
    yield app
    app.quit()


def test_an_answer_streams_into_the_panel_with_clickable_sources(qtbot, asking_desktop, ollama):
    app = asking_desktop
    uid = engine_of(app).remember("My sister Alice lives in Lisbon").id
    ollama.script("Your sister Alice lives in Lisbon [1].")
    panel = app.window.ask
    app.window.open_ask()
    tokens: list[str] = []
    app.bridge.answer_token_received.connect(tokens.append)
    qtbot.keyClicks(panel.question, "Where does my sister Alice live?")
    with qtbot.waitSignal(app.bridge.answer_finished, timeout=30_000) as finished:
        panel.ask_button.click()
    result = finished.args[0]
    assert result.grounded and result.llm_available
    assert len(tokens) > 3 and "".join(tokens) == "Your sister Alice lives in Lisbon [1]."
    assert "Lisbon" in panel.answer.toPlainText()
    assert "source:1" in panel.answer.toHtml()  # the citation is a link
    assert panel.source_list.count() >= 1 and panel.source_list.isVisible()
    assert panel.source_list.item(0).text().startswith("[1]")
    # clicking source [1] opens that memory in the browser
    panel.open_source(1)
    browser = app.window.memories
    qtbot.waitUntil(lambda: app.window.pages.currentWidget() is browser and browser.editor.row is not None
                    and browser.editor.row.id == uid, timeout=10_000)


def test_not_in_memory_is_shown_as_such(qtbot, asking_desktop, ollama):
    app = asking_desktop
    engine_of(app).remember("The boat is moored in Porto")
    panel = app.window.ask
    qtbot.keyClicks(panel.question, "What is the capital of Mongolia?")
    with qtbot.waitSignal(app.bridge.answer_finished, timeout=30_000):
        panel.ask()
    assert not panel.banner.isHidden() and "Not in memory" in panel.banner.label.text()
    assert ollama.chat_requests == []  # no guess was asked for


def test_without_a_model_the_sources_still_show(qtbot, qasync_loop, profile_home, lexical_embedder):
    from engine.config import LLMSettings, Settings, save_settings

    profile_home.mkdir(parents=True, exist_ok=True)
    save_settings(Settings(llm=LLMSettings(host="http://127.0.0.1:9", model="llama3.2")), profile_home)
    app = make_desktop(qtbot, profile_home, lexical_embedder)
    try:
        engine_of(app).remember("The spare key is under the blue flower pot")
        panel = app.window.ask
        qtbot.keyClicks(panel.question, "Where is the spare key?")
        with qtbot.waitSignal(app.bridge.answer_finished, timeout=60_000) as finished:
            panel.ask()
        assert not finished.args[0].llm_available
        assert panel.source_list.count() >= 1
        assert not panel.banner.isHidden()
    finally:
        app.quit()


@pytest.mark.skipif(not hasattr(Engine, "ingest"), reason="Engine.ingest has not landed yet")
def test_a_document_source_shows_its_passage_inside_the_app(qtbot, asking_desktop, ollama, tmp_path,
                                                            monkeypatch):
    """Clicking a document source opens the passage in the app's reader (highlighted); launching the
    file is a second step the user takes there."""
    from PySide6.QtGui import QDesktopServices

    app = asking_desktop
    note = tmp_path / "garden.md"
    note.write_text("# Garden\n\nThe tomatoes go in the south bed in May.\n", encoding="utf-8")
    engine_of(app).ingest([note])
    opened: list[str] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toLocalFile()) or True)
    ollama.script("The tomatoes go in the south bed [1].")
    panel = app.window.ask
    qtbot.keyClicks(panel.question, "Where do the tomatoes go?")
    with qtbot.waitSignal(app.bridge.answer_finished, timeout=30_000):
        panel.ask()
    assert "garden" in panel.source_list.item(0).text().lower()
    panel.source_list.itemClicked.emit(panel.source_list.item(0))
    viewer = app.window.documents.viewer
    assert viewer is not None
    qtbot.waitUntil(lambda: "south bed" in viewer.text.toPlainText(), timeout=10_000)
    assert viewer.path == str(note)
    assert opened == []  # nothing launched until the user asks for it
    assert "garden" in panel.locator.text().lower()
