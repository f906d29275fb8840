"""The watched-folders section of Settings: add a folder, see its status follow the watcher, pause, remove."""

from __future__ import annotations

from pathlib import Path

from .conftest import engine_of


def test_a_folder_added_in_settings_is_watched_and_its_status_shown(qtbot, desktop, tmp_path: Path):
    box = desktop.window.settings.folders
    folder = tmp_path / "journal"
    folder.mkdir()
    (folder / "monday.md").write_text("Monday: the plumber fixed the kitchen tap.", encoding="utf-8")
    assert not box.remove_button.isEnabled() and not box.pause_button.isEnabled()  # no folder yet
    box.add_folder(str(folder), "home")
    qtbot.waitUntil(lambda: box.list.topLevelItemCount() == 1, timeout=20_000)
    assert not box.list.selectedItems()
    assert not box.remove_button.isEnabled() and not box.pause_button.isEnabled()  # none chosen
    qtbot.waitUntil(lambda: box.list.topLevelItem(0).text(3) == "1"  # files indexed
                    and box.list.topLevelItem(0).text(2) == "Watched", timeout=30_000)  # and the scan done
    item = box.list.topLevelItem(0)
    assert item.text(0) == str(folder) and item.text(1) == "home"

    (folder / "tuesday.md").write_text("Tuesday: the piano tuner comes at noon.", encoding="utf-8")
    qtbot.waitUntil(lambda: box.list.topLevelItem(0).text(3) == "2", timeout=30_000)  # the watcher follows
    eng = engine_of(desktop)
    assert {Path(d.path).name for d in eng.list_documents()} == {"monday.md", "tuesday.md"}

    box.list.topLevelItem(0).setSelected(True)
    assert box.pause_button.isEnabled() and box.pause_button.text() == "Pause"
    box.pause_button.click()
    qtbot.waitUntil(lambda: box.list.topLevelItemCount() == 1 and box.list.topLevelItem(0).text(2) == "Paused",
                    timeout=20_000)
    box.list.topLevelItem(0).setSelected(True)
    box.remove_button.click()
    qtbot.waitUntil(lambda: box.list.topLevelItemCount() == 0, timeout=20_000)
    assert "stay in memory" in box.feedback.label.text() and len(eng.list_documents()) == 2
