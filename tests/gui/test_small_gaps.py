"""An agent added in settings.json while the app runs appears in Ask; the File menu's actions do what they say."""

from __future__ import annotations

from pathlib import Path


def test_an_agent_added_to_settings_json_appears_without_a_restart(qtbot, desktop, profile_home: Path):
    from engine.config import AgentSettings, load_settings, save_settings

    window = desktop.window
    window.build_pages()
    window.show_page("ask")
    ask = window.ask
    qtbot.waitUntil(lambda: ask.agent_picker.findData("Organiser") >= 0, timeout=10_000)  # the list is read
    assert ask.agent_picker.findData("Gardener") < 0
    # another program (an editor, a script) adds an agent to the profile's settings.json
    settings = load_settings(profile_home)
    settings.agents.agents.append(AgentSettings(name="Gardener", description="Plans the garden",
                                                tools=["search_memory"]))
    save_settings(settings, profile_home)
    ask.agent_toggle.setChecked(True)
    qtbot.waitUntil(lambda: ask.agent_picker.findData("Gardener") >= 0, timeout=10_000)
    ask.agent_toggle.setChecked(False)
    window.show_page("memories")
    settings.agents.agents = []
    save_settings(settings, profile_home)
    window.show_page("ask")  # and one removed goes, the next time Ask is shown
    qtbot.waitUntil(lambda: ask.agent_picker.findData("Gardener") < 0, timeout=10_000)


def test_the_file_menu_has_the_usual_actions_and_they_work(qtbot, desktop, tmp_path: Path):
    window = desktop.window
    menu = window.menuBar().actions()[0].menu()
    names = [a.text().split("\t")[0].replace("&", "") for a in menu.actions() if not a.isSeparator()]
    assert names == ["Quick capture…", "Add files…", "Add a folder…", "Import…", "Import an export…", "Export…",
                     "Back up now", "Settings", "Quit"]
    # Back up now: a real snapshot, said in the status bar
    window.backup_action.trigger()
    qtbot.waitUntil(lambda: window.status.currentMessage().startswith("Backed up ("), timeout=30_000)
    box = window.settings.sections.backups
    qtbot.waitUntil(lambda: box._status is not None and box._status.count == 1, timeout=10_000)
    # Export…: the export dialog
    window.export_action.trigger()
    export = window.settings.sections.transfer.dialog
    assert export is not None and export.isVisible() and "xport" in export.windowTitle()
    export.close()
    # Quick capture…: the capture box
    window.capture_action.trigger()
    qtbot.waitUntil(lambda: desktop.capture.isVisible(), timeout=5000)
    desktop.capture.hide()
    # Settings: the page
    window.settings_action.trigger()
    assert window.pages.currentWidget() is window.settings
    # Quit: the app's quit (the window's own Ctrl+Q), not only a closed window
    with qtbot.waitSignal(window.quit_requested, timeout=2000):
        window.quit_action.trigger()
