"""Files and folders dropped on the window are ingested with visible progress."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from engine import Engine

from .conftest import engine_of

needs_ingest = pytest.mark.skipif(not hasattr(Engine, "ingest"), reason="Engine.ingest has not landed yet")


def drop_files(widget, paths: list[Path]) -> QDropEvent:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    pos = QPoint(widget.width() // 2, widget.height() // 2)
    actions = Qt.DropAction.CopyAction
    enter = QDragEnterEvent(pos, actions, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, enter)
    assert enter.isAccepted(), "the window refused the drag"
    move = QDragMoveEvent(pos, actions, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, move)
    drop = QDropEvent(QPointF(pos), actions, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, drop)
    return drop


def test_the_window_accepts_file_drags_but_not_text(qtbot, desktop):
    mime = QMimeData()
    mime.setText("just text")
    enter = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    enter.ignore()
    QApplication.sendEvent(desktop.window, enter)
    assert not enter.isAccepted()


@needs_ingest
def test_dropped_files_and_folders_are_ingested_with_progress(qtbot, desktop, tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "garden.md").write_text("# Garden\n\nThe tomatoes go in the south bed in May.\n", encoding="utf-8")
    (folder / "boat.txt").write_text("The boat's engine oil is changed every 100 hours.\n", encoding="utf-8")
    single = tmp_path / "recipe.txt"
    single.write_text("Pancakes: 200 g flour, 2 eggs, 300 ml milk.\n", encoding="utf-8")
    progress: list[object] = []
    desktop.bridge.ingest_progressed.connect(progress.append)
    with qtbot.waitSignal(desktop.bridge.ingest_finished, timeout=60_000) as finished:
        drop_files(desktop.window, [folder, single])
        assert desktop.window.pages.currentWidget() is desktop.window.documents  # progress is visible
        assert desktop.window.documents.job_box.isVisible()
    results = finished.args[0]
    assert sorted(Path(r.path).name for r in results) == ["boat.txt", "garden.md", "recipe.txt"]
    assert all(r.status == "added" for r in results)
    assert progress, "no progress was reported"
    docs = desktop.window.documents
    qtbot.waitUntil(lambda: docs.list.topLevelItemCount() == 3, timeout=10_000)
    assert "Added" in docs.progress_label.text() or "added" in docs.progress_label.text()
    hits = engine_of(desktop).recall("tomatoes south bed")
    assert hits and hits[0].kind == "chunk"


@needs_ingest
def test_files_dropped_on_the_capture_box_are_ingested(qtbot, desktop, tmp_path):
    note = tmp_path / "wifi.txt"
    note.write_text("The guest wifi is called Meadow.\n", encoding="utf-8")
    desktop.capture.open_box()
    with qtbot.waitSignal(desktop.bridge.ingest_finished, timeout=60_000) as finished:
        drop_files(desktop.capture, [note])
    assert [r.status for r in finished.args[0]] == ["added"]


@needs_ingest
def test_a_bad_file_fails_with_a_readable_reason_and_changes_nothing(qtbot, desktop, tmp_path):
    bad = tmp_path / "broken.pdf"
    bad.write_bytes(b"this is not a pdf at all")
    docs = desktop.window.documents
    with qtbot.waitSignal(desktop.bridge.ingest_finished, timeout=60_000) as finished:
        desktop.window.ingest([str(bad)])
    (result,) = finished.args[0]
    assert result.status == "failed" and result.error
    row = docs.job.topLevelItem(0)
    assert row.text(1) == f"Failed: {result.error}"  # the whole reason, wrapped, never cut
    assert not docs.banner.isHidden()
    assert engine_of(desktop).list_documents() == []


@needs_ingest
def test_deleting_a_document_removes_it_from_the_list_and_the_store(qtbot, desktop, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    note = tmp_path / "boat.txt"
    note.write_text("The boat's engine oil is changed every 100 hours.\n", encoding="utf-8")
    docs = desktop.window.documents
    with qtbot.waitSignal(desktop.bridge.ingest_finished, timeout=60_000):
        desktop.window.ingest([str(note)])
    qtbot.waitUntil(lambda: docs.list.topLevelItemCount() == 1, timeout=10_000)
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    docs.list.setCurrentItem(docs.list.topLevelItem(0))
    docs.delete_selected()
    qtbot.waitUntil(lambda: docs.list_stack.currentWidget() is docs.empty, timeout=10_000)
    assert engine_of(desktop).list_documents() == []
    assert engine_of(desktop).recall("engine oil hours") == []


@needs_ingest
def test_cancel_stops_an_ingest(qtbot, desktop, tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(40):
        (folder / f"note{i:02}.txt").write_text(f"Note number {i} about topic {i * 7}.\n" * 50, encoding="utf-8")
    docs = desktop.window.documents
    desktop.bridge.ingest_progressed.connect(lambda _p: docs.cancel_ingest())
    with qtbot.waitSignal(desktop.bridge.ingest_finished, timeout=60_000) as finished:
        desktop.window.ingest([str(folder)])
    added = [r for r in finished.args[0] if r.status == "added"]
    assert len(added) < 40
    assert "Finished" in docs.progress_label.text()


def test_a_document_sent_without_a_file_is_not_called_pasted_text(qtbot, desktop):
    """An upload through the HTTP API (a PDF, a note) has no path here: it was listed as "(pasted text)"."""
    from desktop.documents_view import NO_FILE, open_file

    engine_of(desktop).ingest_upload(b"The tenancy ends on 31 March.\n", "lease-notes.txt")
    docs = desktop.window.documents
    desktop.window.show_page("documents")
    qtbot.waitUntil(lambda: docs.list.topLevelItemCount() == 1, timeout=10_000)
    row = docs.list.topLevelItem(0)
    assert row.text(0) == "lease-notes.txt"
    assert row.text(4) == "(no file)" and row.toolTip(4) == NO_FILE
    assert "pasted" not in open_file("")
