"""The ingest flow says what happened in full, the list names every document one way, a passage is read
inside the app, and files given on the command line (or by "Open with") are added — also to a running app."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from engine import Source

from .conftest import engine_of, wait_idle


def ingest(qtbot, desktop, *paths: Path) -> list:
    with qtbot.waitSignal(desktop.bridge.ingest_finished, timeout=60_000) as finished:
        desktop.window.ingest([str(p) for p in paths])
    wait_idle(qtbot, desktop)
    return finished.args[0]


def test_a_run_reports_in_full_and_leaves_nothing_to_cancel(qtbot, desktop, tmp_path):
    good = tmp_path / "garden.md"
    good.write_text("# Garden\n\nThe tomatoes go in the south bed in May.\n", encoding="utf-8")
    bad = tmp_path / "broken.pdf"
    bad.write_bytes(b"this is not a pdf at all")
    docs = desktop.window.documents
    labels: list[str] = []
    desktop.bridge.ingest_progressed.connect(lambda _p: labels.append(docs.progress_label.text()))
    results = ingest(qtbot, desktop, good, bad)
    assert sorted(r.status for r in results) == ["added", "failed"]
    assert labels and not any("0 passages" in t for t in labels)
    assert docs.progress_label.text().startswith("Finished")
    assert docs.cancel.isHidden()
    failed = next(docs.job.topLevelItem(i) for i in range(docs.job.topLevelItemCount())
                  if docs.job.topLevelItem(i).text(0) == "broken.pdf")
    error = next(r.error for r in results if r.status == "failed")
    assert failed.text(1) == f"Failed: {error}" and docs.job.wordWrap()
    assert failed.toolTip(1).startswith("<p>")  # a rich-text tooltip wraps instead of running 1,000+ px wide
    # the list keeps the file that could not be read, with why, until it is added again or deleted
    qtbot.waitUntil(lambda: docs.list.topLevelItemCount() == 2, timeout=5000)
    rows = {docs.list.topLevelItem(i).text(0): docs.list.topLevelItem(i) for i in range(2)}
    assert rows["broken.pdf"].text(1) == "Failed" and error in rows["broken.pdf"].toolTip(0)
    assert rows["Garden"].text(1) == "MD"
    posted: list[str] = []
    docs.status_posted.connect(posted.append)
    docs.list.itemActivated.emit(rows["broken.pdf"], 0)  # nothing to read: it says why instead
    assert posted and "could not be ingested" in posted[-1] and docs.viewer is None


def test_the_list_names_documents_one_way_with_type_size_date_and_folder(qtbot, desktop, tmp_path):
    titled = tmp_path / "plan.md"
    titled.write_text("# Garden plan\n\nSow broad beans in March.\n", encoding="utf-8")
    plain = tmp_path / "boat notes.txt"
    plain.write_text("The boat's engine oil is changed every 100 hours.\n", encoding="utf-8")
    ingest(qtbot, desktop, titled, plain)
    docs = desktop.window.documents
    qtbot.waitUntil(lambda: docs.list.topLevelItemCount() == 2, timeout=5000)
    header = [docs.list.headerItem().text(i) for i in range(docs.list.columnCount())]
    assert header == ["Document", "Type", "Size", "Added", "Folder"]
    rows = {docs.list.topLevelItem(i).text(1): [docs.list.topLevelItem(i).text(c) for c in range(5)]
            for i in range(2)}
    assert rows["MD"][0] == "Garden plan" and rows["TXT"][0] in ("boat notes", "boat notes.txt")
    assert all("untitled" not in r[0].lower() for r in rows.values())
    assert rows["TXT"][2].endswith("bytes") and rows["MD"][4] == str(tmp_path)
    assert not docs.delete.isEnabled() and not docs.reingest.isEnabled()  # nothing selected
    docs.list.topLevelItem(0).setSelected(True)
    assert docs.delete.isEnabled()


def test_a_document_source_is_shown_inside_the_app_and_a_failed_open_is_reported(qtbot, desktop, tmp_path):
    note = tmp_path / "garden.md"
    note.write_text("# Garden\n\n## Spring\n\nSow the broad beans in March.\n\n## Autumn\n\n"
                    "Plant the garlic in October, two inches deep.\n", encoding="utf-8")
    ingest(qtbot, desktop, note)
    hit = next(h for h in engine_of(desktop).recall("garlic October", include_chunks=True) if h.document_id)
    source = Source.from_hit(1, hit)
    desktop.window.show_passage(source)
    viewer = desktop.window.documents.viewer
    # the whole document, to read on, with the cited passage highlighted
    qtbot.waitUntil(lambda: "broad beans" in viewer.text.toPlainText(), timeout=5000)
    assert viewer.isVisible() and "garlic" in (viewer.highlighted() or "")
    assert "broad beans" not in viewer.highlighted()
    assert source.locator and source.locator in viewer.where.text()
    note.unlink()  # the file moved away since: opening it must say so, not claim it opened
    assert viewer.open_file() is False
    assert "no longer at" in viewer.result.text()


def test_double_click_in_the_list_opens_the_reader(qtbot, desktop, tmp_path):
    note = tmp_path / "boat.txt"
    note.write_text("The boat's engine oil is changed every 100 hours.\n", encoding="utf-8")
    ingest(qtbot, desktop, note)
    docs = desktop.window.documents
    qtbot.waitUntil(lambda: docs.list.topLevelItemCount() == 1, timeout=5000)
    docs.list.itemActivated.emit(docs.list.topLevelItem(0), 0)
    qtbot.waitUntil(lambda: docs.viewer is not None and "engine oil" in docs.viewer.text.toPlainText(), timeout=5000)


def test_files_on_the_command_line_reach_the_running_app(qtbot, desktop, profile_home, tmp_path):
    from desktop.single_instance import SingleInstance

    note = tmp_path / "recipe.txt"
    note.write_text("Pancakes: 200 g flour, 2 eggs, 300 ml milk.\n", encoding="utf-8")
    single = SingleInstance(profile_home)
    assert single.listen()
    single.arguments_received.connect(desktop.handle_arguments)  # as desktop.app.main wires it
    try:
        env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
        launch = subprocess.Popen([sys.executable, "-m", "desktop.app", str(note)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        qtbot.waitUntil(lambda: launch.poll() is not None, timeout=30_000)
        assert launch.returncode == 0, launch.stdout.read()
        qtbot.waitUntil(lambda: [Path(d.path).name for d in engine_of(desktop).list_documents()] == ["recipe.txt"],
                        timeout=20_000)
    finally:
        single.close()


def test_a_folder_row_sums_up_its_files_and_is_not_called_cancelled(qtbot, desktop, tmp_path):
    """A folder has no result of its own; after a run nobody cancelled, its row says what its files did."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "heron.txt").write_text("The herons nest by the old mill every spring.\n", encoding="utf-8")
    (folder / "broken.pdf").write_bytes(b"this is not a pdf at all")
    single = tmp_path / "kiln.md"
    single.write_text("# Kiln\n\nThe kiln is fired to cone 6 on Saturdays.\n", encoding="utf-8")
    results = ingest(qtbot, desktop, folder, single)
    assert sorted(r.status for r in results) == ["added", "added", "failed"]
    docs = desktop.window.documents
    rows = {docs.job.topLevelItem(i).text(0): docs.job.topLevelItem(i).text(1)
            for i in range(docs.job.topLevelItemCount())}
    assert rows["notes"] == "1 added, 1 failed", rows
    assert rows["kiln.md"] == "Added" and rows["heron.txt"] == "Added", rows
    assert "Cancelled" not in rows.values()
