"""File → Import: a ChatGPT export and an Obsidian vault imported through the dialog, with progress, a
second import that adds nothing, and an export that cannot be read."""

from __future__ import annotations

from pathlib import Path

from tests.imports_fixtures import make_vault, write_chatgpt_zip

from .conftest import engine_of


def open_dialog(qtbot, desktop):
    window = desktop.window
    window.import_action.trigger()
    dialog = window.import_dialog
    qtbot.waitUntil(dialog.isVisible, timeout=5_000)
    return dialog


def run_import(qtbot, dialog, source: str, path: Path) -> None:
    dialog.source.setCurrentIndex(dialog.source.findData(source))
    dialog.path.setText(str(path))
    assert dialog.start.isEnabled()
    dialog.last_progress = None
    dialog.start.click()
    assert dialog.running and not dialog.start.isEnabled()
    qtbot.waitUntil(lambda: not dialog.running, timeout=60_000)
    assert dialog.last_progress is not None and dialog.last_progress[0] == dialog.last_progress[1] > 0


def test_import_a_chatgpt_export_and_a_vault_from_the_file_menu(qtbot, desktop, tmp_path: Path):
    export = write_chatgpt_zip(tmp_path / "export.zip")
    dialog = open_dialog(qtbot, desktop)
    run_import(qtbot, dialog, "chatgpt", export)
    assert dialog.report is not None and dialog.report.messages == 6
    assert dialog.status.text() == "Added 6 messages in 2 conversations. 1 empty skipped."
    assert dialog.stop.text() == "Close"
    run_import(qtbot, dialog, "chatgpt", export)
    assert dialog.status.text().startswith("Added 0 messages in 0 conversations. 2 conversations were already here.")
    eng = engine_of(desktop)
    assert eng.con.execute("SELECT count(*) FROM messages").fetchone()[0] == 6

    bad = tmp_path / "conversations.json"
    bad.write_text("[{]", encoding="utf-8")
    dialog.source.setCurrentIndex(dialog.source.findData("claude"))
    dialog.path.setText(str(bad))
    dialog.start.click()
    qtbot.waitUntil(lambda: not dialog.running, timeout=30_000)
    assert "is not a Claude export" in dialog.status.text() and dialog.report is None

    run_import(qtbot, dialog, "obsidian", make_vault(tmp_path / "Vault"))
    assert dialog.report.links == 4 and dialog.status.text().startswith("Added 4 notes and attachments and 4 links.")
