"""What the app says: the Activity page's sentences and runs, banners that show their text (not markup),
the backup's age, the watched folder's indexing message, the document reader's title."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .conftest import engine_of, wait_idle


def activity_rows(qtbot, desktop, until) -> list[list[str]]:
    desktop.window.show_page("activity")
    view = desktop.window.activity
    view.refresh()

    def rows() -> list[list[str]]:
        return [[view.tree.topLevelItem(i).text(c) for c in range(3)] for i in range(view.tree.topLevelItemCount())]

    qtbot.waitUntil(lambda: until(rows()), timeout=20_000)
    return rows()


def test_a_batch_of_3000_writes_is_one_activity_row_with_its_count(qtbot, desktop, profile_home: Path):
    from engine import Engine
    from engine.embeddings import NoEmbedder
    from engine.memories import Remembered

    with Engine.open(profile_home, actor="cli", embedder=NoEmbedder()) as cli:
        cli.remember_many([Remembered(f"Batch note number {i}.") for i in range(3000)], embed="none")
        cli.remember("One more, as an event.", kind="episodic", embed="none")
    rows = activity_rows(qtbot, desktop, lambda rows: any("3,000" in r[1] for r in rows))
    assert rows[0][1] == "The command line remembered an event"
    assert rows[1][1] == "The command line remembered 3,000 facts"
    assert sum("remembered a fact" in r[1] for r in rows) == 0  # not 3,000 rows, nor 500 of them
    batch = desktop.window.activity.tree.topLevelItem(1)
    assert batch.childCount() > 1 and batch.child(0).text(1) == "The command line remembered a fact"
    assert "earlier" in batch.child(batch.childCount() - 1).text(1)


def test_activity_says_when_reading_for_the_knowledge_graph_linked_nothing(qtbot, desktop, profile_home: Path):
    from engine import Engine
    from engine.embeddings import NoEmbedder
    from tests.ollama_server import OllamaTestServer, Reply

    def reply(request: dict[str, Any]) -> Any:
        prompt = request["messages"][-1]["content"]
        if request["format"]["title"] == "TripleExtraction" and "Alice" in prompt:
            return Reply(json={"triples": [{"subject": "Alice", "relation": "works at", "object": "Acme",
                                            "subject_type": "person", "object_type": "organization"}]})
        return Reply(json={"triples": [], "facts": []})

    with OllamaTestServer(models=["llama3.2"], reply_fn=reply) as server:
        with Engine.open(profile_home, actor="cli", embedder=NoEmbedder()) as cli:
            settings = cli.settings.model_copy(deep=True)
            settings.llm.host = server.url
            cli.apply_settings(settings)
            cli.remember("The weather was grey all day.", embed="none")
            cli.extract_pending()
            rows = activity_rows(qtbot, desktop, lambda rows: any("knowledge graph" in r[1] or "link" in r[1]
                                                                  for r in rows))
            assert any(r[1].endswith("found nothing to link in a memory") for r in rows), rows
            assert not any("linked" in r[1] for r in rows), rows
            cli.remember("Alice works at Acme.", embed="none")
            cli.remember("Bob likes tea.", embed="none")
            cli.extract_pending()
    rows = activity_rows(qtbot, desktop, lambda rows: any("read 2 memories for the knowledge graph" in r[1]
                                                          for r in rows))
    run = next(r for r in rows if "read 2 memories" in r[1])
    assert run[2] == "1 link"


def test_banners_show_text_not_markup(qtbot, desktop):
    desktop.window.show_page("settings")
    api = desktop.window.settings.sections.api
    api._started("http://127.0.0.1:8765")
    label = api.state.label
    assert label.isVisible()
    # what the person reads: the address, as a link; no tags shown as text
    from PySide6.QtGui import QTextDocument

    doc = QTextDocument()
    doc.setHtml(label.text())
    shown = doc.toPlainText()
    assert "<a" not in shown and "</a" not in shown and "&gt;" not in shown
    assert "http://127.0.0.1:8765/docs" in shown.replace("\u2060", "")
    assert "href='http://127.0.0.1:8765/docs'" in label.text()


def test_the_keychain_warning_names_a_command_that_exists(qtbot, desktop, tmp_path: Path):
    import os
    import subprocess
    import sys

    settings = desktop.window.settings
    desktop.window.show_page("settings")
    # the plaintext test keyring is not a system keychain: the warning shows
    qtbot.waitUntil(lambda: bool(settings.key_warning.text), timeout=10_000)
    command = settings.key_warning.text.split("`")[1].split()
    assert command[0] == "personal-llm"
    # the command line accepts it as written: what fails is the made-up key, not the command
    env = dict(os.environ, PERSONAL_LLM_HOME=str(tmp_path / "elsewhere"),
               PERSONAL_LLM_NEW_PASSPHRASE="a long new passphrase")
    proc = subprocess.run([sys.executable, "-m", "engine.cli", *command[1:]], capture_output=True, text=True,
                          timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1 and "usage:" not in proc.stderr, proc.stderr
    assert "recovery key" in proc.stderr.lower(), proc.stderr


def test_the_last_backup_ages_while_the_page_is_open(qtbot, desktop):
    desktop.window.show_page("settings")
    box = desktop.window.settings.sections.backups
    box.back_up_now()
    qtbot.waitUntil(lambda: "just now" in box.last.text(), timeout=30_000)
    taken = box._status.last.at
    box.clock = lambda: taken + 2 * 3600 + 5
    box.ager.timeout.emit()  # what the minute timer does
    assert "2 hours ago" in box.last.text() and "just now" not in box.last.text()


def test_the_indexing_message_ends_when_the_folder_is_indexed(qtbot, desktop, tmp_path: Path):
    box = desktop.window.settings.folders
    folder = tmp_path / "notes & more"
    folder.mkdir()
    (folder / "a.md").write_text("The boiler was serviced in May.", encoding="utf-8")
    box.add_folder(str(folder))
    qtbot.waitUntil(lambda: box.list.topLevelItemCount() == 1 and box.list.topLevelItem(0).text(2) == "Watched"
                    and box.list.topLevelItem(0).text(4) == "0", timeout=30_000)
    qtbot.waitUntil(lambda: "being indexed" not in box.feedback.text, timeout=10_000)
    assert box.feedback.text == f"Watching {folder}: 1 file indexed."
    assert "&amp;amp;" not in box.feedback.label.text()  # the path is escaped once, not twice


def test_the_document_reader_is_titled_with_the_document(qtbot, desktop, tmp_path: Path):
    note = tmp_path / "boiler.md"
    note.write_text("# Boiler\n\nThe boiler was serviced in May by Heatwell.", encoding="utf-8")
    eng = engine_of(desktop)
    eng.ingest([note])
    desktop.window.show_page("documents")
    docs = desktop.window.documents
    wait_idle(qtbot, desktop)
    qtbot.waitUntil(lambda: docs.list.topLevelItemCount() == 1, timeout=20_000)
    uid = docs.list.topLevelItem(0).data(0, 256)
    docs.view_document(uid)
    viewer = docs.viewer
    assert viewer is not None and viewer.isVisible()
    assert "Passage" not in viewer.windowTitle()
    assert viewer.windowTitle().startswith(viewer.title.text())
