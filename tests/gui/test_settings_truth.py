"""Settings have one truth, settings.json: changes made there by the CLI or an editor while the app runs are
shown by the Settings page (Test connection tries them), and survive every save the app makes, which
writes only what was changed in the app."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from PySide6.QtCore import Qt

from .conftest import wait_idle


@pytest.fixture
def ollama():
    from tests.ollama_server import OllamaTestServer

    with OllamaTestServer(models=["mistral", "llama3.2"]) as server:
        yield server


def cli(*args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_outside_changes_are_shown_and_survive_the_apps_saves(qtbot, desktop, profile_home, tmp_path, ollama):
    window = desktop.window
    window.show_page("settings")
    page = window.settings
    qtbot.waitUntil(lambda: page.isEnabled())
    assert page.model.currentText() == "llama3.2" and page.host.text() == ""

    # the CLI and an editor change settings while the app runs
    papers = tmp_path / "papers"
    papers.mkdir()
    cli("config", "set", "ocr.enabled", "false")
    cli("folders", "allow", str(papers))
    cli("config", "set", "llm.model", "mistral")
    cli("config", "set", "llm.timeout", "12")
    cli("config", "set", "llm.host", ollama.url)
    path = profile_home / "settings.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["agents"]["agents"].append({"name": "Gardener", "description": "Plans the garden",
                                     "system_prompt": "You plan gardens.", "tools": ["search_memory"]})
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")

    # the page follows the file; Test connection tries the server and model the file names
    qtbot.waitUntil(lambda: page.model.currentText() == "mistral" and page.host.text() == ollama.url,
                    timeout=10_000)
    qtbot.mouseClick(page.test_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.test_result.property("tone") in ("ok", "error"), timeout=20_000)
    assert page.test_result.property("tone") == "ok", page.test_result.text
    assert "mistral" in page.test_result.text
    assert any(r.path in ("/api/tags", "/api/show", "/api/version") for r in ollama.requests)

    # the app saves: a section (the backup schedule), then the page's own Save with one field changed
    backups = page.sections.backups
    backups.schedule.setCurrentIndex(backups.schedule.findData("weekly"))
    wait_idle(qtbot, desktop)
    page.hotkey.set_shortcut("Ctrl+Alt+M")
    qtbot.mouseClick(page.save_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.feedback.text() == "Saved ✓", timeout=10_000)
    wait_idle(qtbot, desktop)

    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["ocr"]["enabled"] is False
    assert saved["ingest"]["allowed_folders"] == [str(papers.resolve())]
    assert saved["llm"]["model"] == "mistral" and saved["llm"]["timeout"] == 12 and saved["llm"]["host"] == ollama.url
    assert [a["name"] for a in saved["agents"]["agents"]] == ["Gardener"]
    assert saved["backup"]["schedule"] == "weekly" and saved["hotkey"] == "Ctrl+Alt+M"
    eng = desktop.bridge._engine.result()
    assert eng.settings.ocr.enabled is False and eng.settings.llm.model == "mistral"

    # an edit typed on the page and not saved is not overwritten by an outside change to another field
    page.model.setCurrentText("llama3.2")
    cli("config", "set", "llm.timeout", "30")
    qtbot.waitUntil(lambda: desktop.bridge.info.settings.llm.timeout == 30, timeout=10_000)
    assert page.model.currentText() == "llama3.2"
    qtbot.mouseClick(page.save_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: json.loads(path.read_text(encoding="utf-8"))["llm"]["model"] == "llama3.2",
                    timeout=10_000)
    assert json.loads(path.read_text(encoding="utf-8"))["llm"]["timeout"] == 30
