"""The Ask panel's Agent mode: steps appear as they happen, a sensitive step asks in a dialog naming the
tool and its arguments, Stop ends the run at any time. The model is tests/ollama_server.py speaking tool
calling to the real `ollama` client; the store is real."""

from __future__ import annotations

import pytest

from engine import NotFound

from .conftest import engine_of, make_desktop


@pytest.fixture
def ollama():
    from tests.ollama_server import OllamaTestServer

    with OllamaTestServer(models=["llama3.2"]) as server:
        yield server


@pytest.fixture
def agent_desktop(qtbot, qasync_loop, profile_home, lexical_embedder, ollama):
    from engine.config import LLMSettings, Settings, save_settings

    profile_home.mkdir(parents=True, exist_ok=True)
    save_settings(Settings(llm=LLMSettings(host=ollama.url, model="llama3.2")), profile_home)
    app = make_desktop(qtbot, profile_home, lexical_embedder)
    panel = app.window.ask
    app.window.open_ask()
    qtbot.waitUntil(lambda: panel.agent_picker.findData("Organiser") >= 0, timeout=10_000)
    panel.agent_toggle.setChecked(True)
    panel.agent_picker.setCurrentIndex(panel.agent_picker.findData("Organiser"))
    yield app
    app.quit()


def call(name, **arguments):
    from tests.ollama_server import Reply

    return Reply(tool_calls=[{"name": name, "arguments": arguments}])


def start(qtbot, panel, task):
    panel.question.clear()
    qtbot.keyClicks(panel.question, task)
    panel.ask_button.click()


def steps(panel):
    return [panel.steps.item(i).text() for i in range(panel.steps.count())]


def test_a_sensitive_step_asks_in_a_dialog_naming_the_tool_and_its_arguments(qtbot, agent_desktop, ollama):
    from tests.ollama_server import Reply

    app, panel = agent_desktop, agent_desktop.window.ask
    eng = engine_of(app)
    kept, doomed = (eng.remember(t).id for t in ("Keep this note", "An old note to delete"))
    assert panel.ask_button.text() == "Run" and panel.agent_picker.isVisible()

    # "Don't allow": the tool does not run
    ollama.script(call("forget_memory", id=kept), Reply(text="I left it."))
    start(qtbot, panel, "Delete the note")
    qtbot.waitUntil(lambda: panel.dialog is not None and panel.dialog.isVisible(), timeout=20_000)
    dialog = panel.dialog
    assert "Organiser" in dialog.title.text() and "forget_memory" in dialog.title.text()
    assert dialog.arguments.toPlainText() == f'id: "{kept}"'
    assert "Sensitive" in dialog.permission.text()
    assert dialog.deny_button.isDefault() and not dialog.allow_button.isDefault()
    assert any(s.startswith("→ forget_memory(") for s in steps(panel))
    with qtbot.waitSignal(app.bridge.agent_finished, timeout=20_000):
        dialog.deny_button.click()
    assert "    ✗ was not run: the person did not confirm it" in steps(panel)
    assert eng.get(kept).id == kept and panel.answer.toPlainText() == "I left it."

    # "Allow": it runs, and the run goes on to its answer
    ollama.script(call("forget_memory", id=doomed), Reply(text="Deleted the old note."))
    start(qtbot, panel, "Delete the old note")
    qtbot.waitUntil(lambda: panel.dialog is not None and panel.dialog.isVisible(), timeout=20_000)
    with qtbot.waitSignal(app.bridge.agent_finished, timeout=20_000):
        panel.dialog.allow_button.click()
    assert "    ✓ done" in steps(panel) and panel.answer.toPlainText() == "Deleted the old note."
    with pytest.raises(NotFound):
        eng.get(doomed)
    assert panel.ask_button.isVisible() and not panel.stop_button.isVisible()


def test_stop_ends_a_run_while_it_asks_and_while_the_model_writes(qtbot, agent_desktop, ollama):
    from tests.ollama_server import Reply

    app, panel = agent_desktop, agent_desktop.window.ask
    eng = engine_of(app)
    kept = eng.remember("Keep this note").id

    # Stop while the dialog is open: the dialog goes, nothing runs, the model is not asked again
    ollama.script(call("forget_memory", id=kept), Reply(text="never"))
    start(qtbot, panel, "Delete the note")
    qtbot.waitUntil(lambda: panel.dialog is not None and panel.dialog.isVisible(), timeout=20_000)
    dialog = panel.dialog
    with qtbot.waitSignal(app.bridge.agent_cancelled, timeout=20_000):
        panel.stop_button.click()
    assert not dialog.isVisible() and panel.dialog is None
    assert panel.banner.isVisible() and "Stopped" in panel.banner.label.text()
    assert eng.get(kept).id == kept and ollama.pending == 1  # the answer was never asked for

    # Stop while the model is still writing: the run ends at the next piece
    ollama.clear()
    ollama.script(call("today"), Reply(text="It is a very long answer that keeps going and going " * 20, delay=2.0))
    start(qtbot, panel, "What day is it?")
    qtbot.waitUntil(lambda: any("✓ done" in s for s in steps(panel)), timeout=20_000)
    with qtbot.waitSignal(app.bridge.agent_cancelled, timeout=20_000):
        panel.stop_button.click()
    assert steps(panel)[-1] == "Stopped." and panel.ask_button.isVisible()
    audit = [e for e in eng.audit_log() if e.action == "agent_run"]
    assert audit[0].detail["stopped"] == "cancelled"
