"""The app's plumbing: one instance per profile, hotkey parsing and platform messages, closing, first run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from desktop import profile
from desktop.hotkey import Combo, GlobalHotkey, session_kind
from desktop.single_instance import SingleInstance, server_name

from .conftest import make_desktop


def test_profile_home_matches_the_engine(profile_home):
    from engine.config import home_dir

    assert profile.profile_home() == home_dir()


def test_a_second_launch_hands_its_arguments_to_the_first(qtbot, qasync_loop, tmp_path):
    first = SingleInstance(tmp_path / "a")
    assert first.listen()
    try:
        second = SingleInstance(tmp_path / "a")
        with qtbot.waitSignal(first.arguments_received, timeout=5000) as received:
            assert second.forward(["--capture"])
        assert received.args == [["--capture"]]
        other_profile = SingleInstance(tmp_path / "b")
        assert other_profile.name != first.name
        assert not other_profile.forward(["--capture"])  # different profiles never talk to each other
    finally:
        first.close()
        qtbot.wait(50)


def test_server_names_differ_per_profile(tmp_path):
    assert server_name(tmp_path / "x") != server_name(tmp_path / "y")
    assert server_name(tmp_path / "x") == server_name(tmp_path / "x")


def test_capture_argument_opens_the_running_instances_box(qtbot, desktop):
    desktop.handle_arguments(["--capture"])
    assert desktop.capture.isVisible()


@pytest.mark.parametrize("text,expected", [
    ("Ctrl+Shift+Space", Combo(ctrl=True, shift=True, alt=False, meta=False, key="Space")),
    ("Meta+Alt+K", Combo(ctrl=False, shift=False, alt=True, meta=True, key="K")),
])
def test_shortcuts_parse(text, expected):
    assert Combo.parse(text) == expected


@pytest.mark.parametrize("text", ["", "Space", "Hyper+K"])
def test_unusable_shortcuts_are_refused(text):
    with pytest.raises(ValueError):
        Combo.parse(text)


def test_wayland_is_detected_and_the_user_told_what_to_bind(qtbot, qasync_loop, monkeypatch):
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    assert session_kind() == "wayland"
    hotkey = GlobalHotkey()
    status = hotkey.start("Ctrl+Shift+Space")
    assert status.state == "wayland" and "personal-llm-desktop --capture" in status.message
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setenv("XDG_SESSION_TYPE", "wayland")
    assert session_kind() == "wayland"


def test_hotkey_status_reaches_settings(qtbot, qasync_loop, profile_home, lexical_embedder, monkeypatch):
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    monkeypatch.delenv("DISPLAY", raising=False)
    app = make_desktop(qtbot, profile_home, lexical_embedder, use_hotkey=True)
    try:
        qtbot.waitUntil(lambda: "--capture" in app.window.settings.hotkey_status.label.text(), timeout=5000)
    finally:
        app.quit()


def test_without_a_tray_closing_the_window_quits(qtbot, desktop):
    assert desktop.tray is None  # offscreen: no system tray
    assert not desktop.window.close_to_tray
    with qtbot.waitSignal(desktop.quitted, timeout=10_000):
        desktop.window.close()


def test_with_a_tray_closing_the_window_keeps_the_app_and_tells_once(qtbot, desktop, monkeypatch):
    from desktop.tray import Tray

    tray = Tray(desktop)
    notices: list[str] = []
    monkeypatch.setattr(tray, "notify", lambda title, message: notices.append(title))
    desktop.tray = tray
    desktop.window.close_to_tray = True
    desktop.window.close()
    assert not desktop.window.isVisible() and not desktop._quitting
    qtbot.waitUntil(lambda: desktop.bridge.info.settings.tray_notice_shown, timeout=10_000)
    desktop.window.bring_to_front()
    desktop.window.close()
    assert notices == ["Personal LLM is still running"]  # once, remembered in settings
    from engine.config import load_settings

    assert load_settings(desktop.home).tray_notice_shown


def test_first_run_says_what_works_and_what_is_missing(qtbot, qasync_loop, profile_home, lexical_embedder):
    from engine.config import LLMSettings, Settings, save_settings

    profile_home.mkdir(parents=True)
    save_settings(Settings(llm=LLMSettings(host="http://127.0.0.1:9")), profile_home)  # nothing listens there
    app = make_desktop(qtbot, profile_home, lexical_embedder)
    try:
        assert app.bridge.info.created
        card = app.window.first_run
        qtbot.waitUntil(lambda: "ollama pull llama3.2" in card.body.text(), timeout=20_000)
        text = card.body.text()
        assert "Ollama not running" in text and "sources only" in text and "ollama.com" in text
        # the tests' keyring is keyrings.alt's plaintext file: the card says so instead of "keychain"
        assert "is encrypted, but its key is in a plaintext file" in text
        assert "`" not in text and "<code>ollama pull llama3.2</code>" in text  # commands as code, no backticks
        assert "words only" in text  # embeddings are off in this test
    finally:
        app.quit()


def test_second_start_shows_no_first_run_card(qtbot, qasync_loop, profile_home, lexical_embedder):
    from engine import Engine

    Engine.open(profile_home, embedder=lexical_embedder).close()
    app = make_desktop(qtbot, profile_home, lexical_embedder)
    try:
        assert not app.bridge.info.created
        qtbot.wait(200)
        assert app.window.first_run.isHidden()
    finally:
        app.quit()


def test_settings_test_connection_reports_the_server(qtbot, desktop):
    from tests.ollama_server import OllamaTestServer

    settings = desktop.window.settings
    with OllamaTestServer(models=["llama3.2", "qwen2.5"]) as server:
        settings.host.setText(server.url)
        settings.model.setCurrentText("llama3.2")
        settings.test_button.click()
        qtbot.waitUntil(lambda: settings.test_result.label.text().startswith("✓"), timeout=15_000)
        offered = [settings.model.itemText(i) for i in range(settings.model.count())]
        assert any(m.startswith("qwen2.5") for m in offered)  # the server's models are offered
        settings.model.setCurrentText("missing-model")
        settings.test_button.click()
        qtbot.waitUntil(lambda: settings.test_button.isEnabled() and settings.test_result.property("tone") == "error",
                        timeout=15_000)


def test_saving_settings_persists_them(qtbot, desktop):
    from engine.config import load_settings

    settings = desktop.window.settings
    settings.host.setText("http://127.0.0.1:11500")
    settings.save_button.click()
    qtbot.waitUntil(lambda: settings.feedback.text() == "Saved ✓", timeout=10_000)
    assert load_settings(desktop.home).llm.host == "http://127.0.0.1:11500"


def test_start_at_login_writes_and_removes_the_autostart_entry(qtbot, desktop, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    entry = tmp_path / "config" / "autostart" / "personal-llm.desktop"
    settings = desktop.window.settings
    settings.autostart.setChecked(True)
    settings.save_button.click()
    qtbot.waitUntil(lambda: settings.feedback.text() == "Saved ✓", timeout=10_000)
    assert entry.is_file() and "--hidden" in entry.read_text()
    settings.autostart.setChecked(False)
    settings.save_button.click()
    qtbot.waitUntil(lambda: not entry.exists(), timeout=10_000)


def test_encryption_status_names_the_keyring_backend_and_warns_about_a_plaintext_one(qtbot, desktop):
    settings = desktop.window.settings
    # the tests run on keyrings.alt's PlaintextKeyring: the key sits in a file, which must be said
    assert "a plaintext file (" in settings.encryption.text() and "keyring_pass.cfg" in settings.encryption.text()
    assert "keychain" not in settings.encryption.text()
    assert not settings.key_warning.isHidden() and "not a system keychain" in settings.key_warning.text
    assert str(Path(desktop.bridge.info.store)) in settings.location.text()


def test_settings_show_the_ollama_host_from_the_environment(qtbot, qasync_loop, profile_home, lexical_embedder,
                                                            monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", "http://10.1.2.3:11434")
    app = make_desktop(qtbot, profile_home, lexical_embedder)
    try:
        settings = app.window.settings
        assert settings.host.text() == ""
        assert settings.host.placeholderText() == "http://10.1.2.3:11434 (from OLLAMA_HOST)"
        assert "127.0.0.1" not in settings.host.placeholderText()
    finally:
        app.quit()


def test_the_shortcut_recorder_keeps_escape_and_the_windows_own_shortcuts_out(qtbot, desktop):
    from PySide6.QtCore import Qt

    settings = desktop.window.settings
    recorder = settings.hotkey
    before = recorder.shortcut()
    qtbot.keyClick(recorder, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
    assert recorder.shortcut() == before and "Ctrl+2 is used inside this window" in settings.hotkey_problem.text
    qtbot.keyClick(recorder, Qt.Key.Key_Escape)
    assert recorder.shortcut() == before and settings.hotkey_problem.isHidden()
    qtbot.keyClick(recorder, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier)
    assert recorder.shortcut() == "Ctrl+Alt+M" and settings.hotkey_problem.isHidden()
    settings.save()
    qtbot.waitUntil(lambda: settings.feedback.text() == "Saved ✓", timeout=5000)
    assert settings.hotkey_problem.isHidden()  # no error beside "Saved ✓"


def test_saving_settings_keeps_the_welcome_card_away_and_the_tray_notice_seen(qtbot, desktop):
    from .conftest import wait_idle

    window = desktop.window
    wait_idle(qtbot, desktop)
    qtbot.waitUntil(lambda: window.first_run.isVisible(), timeout=5000)  # a first run shows it
    window.first_run._dismiss()
    desktop.bridge.update_settings({"tray_notice_shown": True})  # as the app saves it after the first close
    wait_idle(qtbot, desktop)
    window.settings.model.setCurrentText("mistral")
    window.settings.save()
    qtbot.waitUntil(lambda: window.settings.feedback.text() == "Saved ✓", timeout=5000)
    wait_idle(qtbot, desktop)
    assert not window.first_run.isVisible()
    from engine.config import load_settings

    assert load_settings(desktop.home).tray_notice_shown is True  # Settings' Save did not undo it


def test_pause_says_paused_and_offers_resume(qtbot, desktop):
    status = desktop.window.status
    assert status.paused.isHidden()
    with qtbot.waitSignal(desktop.bridge.paused_changed, timeout=5000):
        desktop.bridge.set_paused(True)
    assert not status.paused.isHidden() and "Paused" in status.paused.text() and not status.resume.isHidden()
    with qtbot.waitSignal(desktop.bridge.paused_changed, timeout=5000):
        status.resume.click()
    assert status.paused.isHidden() and desktop.bridge.paused is False


def test_self_test_flag_runs_the_engine_self_test():

    proc = subprocess.run([sys.executable, "-c", "import sys; from desktop.app import main; "
                           "sys.exit(main(['--self-test']))"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_audit_view_lists_changes(qtbot, desktop):
    from .conftest import engine_of

    uid = engine_of(desktop).remember("Audit me").id
    desktop.window.show_page("activity")
    view = desktop.window.activity
    qtbot.waitUntil(lambda: any(view.tree.topLevelItem(i).text(1) == "You remembered a fact"
                                for i in range(view.tree.topLevelItemCount())), timeout=10_000)
    rows = [[view.tree.topLevelItem(i).text(c) for c in range(3)] for i in range(view.tree.topLevelItemCount())]
    # sentences, not raw ids or `_uids: […]`; memory text never appears in the activity log
    assert all(uid not in cell and "_uids" not in cell and "Audit me" not in cell for row in rows for cell in row)
    item = next(view.tree.topLevelItem(i) for i in range(view.tree.topLevelItemCount())
                if view.tree.topLevelItem(i).text(1) == "You remembered a fact")
    view.tree.itemActivated.emit(item, 1)  # a change to a memory opens it
    assert desktop.window.pages.currentWidget() is desktop.window.memories
    qtbot.waitUntil(lambda: desktop.window.memories.editor.row is not None
                    and desktop.window.memories.editor.row.id == uid, timeout=5000)


def test_the_activity_says_a_backups_size_in_words(qtbot, desktop):
    """A backup's size was shown as "bytes 1.57286e+06"; it reads as a size, and no number is in e-notation."""
    from desktop import formatting

    from .conftest import engine_of

    size = engine_of(desktop).backup_now().bytes
    assert size >= 1000  # a real snapshot of a store: kilobytes at least
    desktop.window.show_page("activity")
    view = desktop.window.activity
    qtbot.waitUntil(lambda: any(view.tree.topLevelItem(i).text(1) == "You made an encrypted backup"
                                for i in range(view.tree.topLevelItemCount())), timeout=10_000)
    item = next(view.tree.topLevelItem(i) for i in range(view.tree.topLevelItemCount())
                if view.tree.topLevelItem(i).text(1) == "You made an encrypted backup")
    assert item.text(2) == formatting.size(size) and item.text(2).endswith(("KB", "MB")), item.text(2)


def test_activity_details_never_show_a_number_in_e_notation():
    from desktop.audit_view import details

    assert details({"bytes": 1572864}) == "1.6 MB"
    assert details({"pages": 2_500_000}) == "pages 2,500,000"
    assert details({"seconds": 1.5}) == "seconds 1.5"


def test_every_change_the_engine_records_reads_as_a_sentence():
    """The Activity page said "The command line watch add": an action without a sentence of its own."""
    import re
    from pathlib import Path

    from desktop.audit_view import ACTIONS, MANY

    engine = Path(__file__).resolve().parents[2] / "engine"
    recorded = {m for f in engine.rglob("*.py")
                for m in re.findall(r"\brecord\(\s*\"([a-z_]+)\"", f.read_text(encoding="utf-8"))}
    assert {"remember", "watch_add", "agent_run"} <= recorded  # the scan finds them
    assert recorded <= ACTIONS.keys(), sorted(recorded - ACTIONS.keys())
    for action in ("watch_add", "import_conversation"):  # and a run of them counts them
        assert "{n}" in MANY[action]


def test_tidy_up_runs_consolidation_and_reports(qtbot, desktop):
    desktop.window.show_page("settings")
    settings = desktop.window.settings
    settings.tidy_button.click()
    qtbot.waitUntil(lambda: settings.tidy_button.isEnabled() and settings.tidy_result.text() != "Tidying up…",
                    timeout=30_000)
    assert settings.tidy_result.text().startswith("Done:"), settings.tidy_result.text()


def test_the_theme_follows_the_os_scheme(qapp, monkeypatch):
    from PySide6.QtGui import QPalette

    from desktop import theme

    monkeypatch.setattr(theme, "is_dark", lambda: True)
    t = theme.Theme(qapp)
    dark_window = qapp.palette().color(QPalette.ColorRole.Window)
    monkeypatch.setattr(theme, "is_dark", lambda: False)
    t.apply()  # what the OS's colorSchemeChanged triggers
    light_window = qapp.palette().color(QPalette.ColorRole.Window)
    assert dark_window.lightness() < 80 < light_window.lightness()
    assert "chevron-down-light.svg" in qapp.styleSheet()


def test_settings_choose_the_embedding_model(qtbot, desktop, tmp_path):
    from engine.config import load_settings

    settings = desktop.window.settings
    assert settings.embedding_model.currentData() == load_settings(desktop.home).embedding_model
    settings.embedding_model.setEditText(str(tmp_path))  # not a model folder: a clear message, nothing saved
    settings.save_button.click()
    qtbot.waitUntil(lambda: "sentence-transformers model" in settings.test_result.label.text(), timeout=10_000)
    settings.embedding_model.setCurrentIndex(settings.embedding_model.findData("none"))
    settings.save_button.click()
    qtbot.waitUntil(lambda: settings.feedback.text() == "Saved ✓", timeout=10_000)
    assert load_settings(desktop.home).embedding_model == "none"
    qtbot.waitUntil(lambda: "words only" in settings.embedding.text(), timeout=10_000)


def test_ctrl_f_goes_to_the_memory_search_from_any_page(qtbot, desktop):
    """The window's Find shortcut, pressed as a key (a second shortcut on the same key in the window makes Qt
    fire neither): from another page, and from the memories page with the focus elsewhere."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    window = desktop.window
    window.show()
    qtbot.waitExposed(window)
    window.show_page("settings")
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=3000)  # shortcuts need it active
    assert not window.memories.search.hasFocus()
    qtbot.keyClick(window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: window.memories.search.hasFocus(), timeout=3000)
    window.sidebar.setFocus()
    assert window.sidebar.hasFocus()
    qtbot.keyClick(window.sidebar, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: window.memories.search.hasFocus(), timeout=3000)


def _run_app_until(profile_home: Path, line: str, number: int) -> tuple[int, str]:
    """Start the app (hidden, no tray offscreen: its window), wait for `line` in its log, send it the signal
    `number`; its exit code and what it printed."""
    import os
    import time

    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    app = subprocess.Popen([sys.executable, "-m", "desktop.app", "--hidden"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = profile_home / "logs" / "desktop.log"
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and line in log.read_text(errors="replace")):
            assert app.poll() is None and time.monotonic() < deadline, f"the app did not log {line!r}"
            time.sleep(0.1)
        app.send_signal(number)
        code = app.wait(90)  # the quit waits for the step of the model's load under way: seconds, more on a busy machine
    finally:
        if app.poll() is None:
            app.kill()
    crash = profile_home / "logs" / "desktop-crash.log"
    return code, (app.stdout.read() if app.stdout else "") + (crash.read_text() if crash.exists() else "")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM and SIGINT are POSIX signals")
@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_sigterm_quits_as_the_quit_menu_does(profile_home: Path, name: str):
    """A logout or `kill` sends SIGTERM, Ctrl+C in a terminal SIGINT: the app quits through its own Quit (the
    edit under way saved, the store closed) instead of dying where it stood — here in its first seconds, while
    the embedding model loads in the background, whose thread once outlived the quit and crashed the exit
    (SIGSEGV, or SIGABRT "FATAL: exception not rethrown", inside the Rust of safetensors)."""
    import signal

    from engine import Engine
    from engine.embeddings import NoEmbedder

    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:  # an existing store: no first-run dialog
        eng.remember("The fuse box is in the hall cupboard", embed="none")
    code, output = _run_app_until(profile_home, "watching folders", getattr(signal, name))
    assert code == 0, output
    log = (profile_home / "logs" / "desktop.log").read_text(errors="replace")
    assert "quitting" in log and "did not stop" not in log


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM is a POSIX signal")
def test_sigterm_while_the_backlog_is_embedded_keeps_every_memory(profile_home: Path):
    """SIGTERM while the background embeds what waits for a vector: the batch under way ends, the store closes
    after it, and every memory is still there, found by meaning once the next start has embedded the rest."""
    import signal

    from engine import Engine
    from engine.embeddings import NoEmbedder

    texts = [f"Note {i}: the spare key number {i} hangs in the shed by the door." for i in range(400)]
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        for text in texts:
            eng.remember(text, embed="none")
    code, output = _run_app_until(profile_home, "embedding model loaded", signal.SIGTERM)
    assert code == 0, output
    with Engine.open(profile_home) as eng:
        assert eng.stats().memories == len(texts)
        assert eng.con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        eng.embed_pending()
        assert eng.embedding_status()[0] == "ready" and eng.space.pending() == 0


def test_quit_while_the_model_loads_leaves_no_thread_behind(qtbot, qasync_loop, profile_home):
    """The quit stops the model's load at its next step and waits for it and for the thread that reports it:
    once quit() returns no background thread is left to run into the interpreter's (or Qt's) teardown."""
    import threading

    from engine.embeddings import Embedder

    embedder = Embedder()  # a model not loaded yet, as at every start
    app = make_desktop(qtbot, profile_home, embedder)
    qtbot.waitUntil(lambda: any(t.name == "engine-background" for t in threading.enumerate()), timeout=20_000)
    with qtbot.waitSignal(app.quitted, timeout=60_000):
        app.quit()
    left = {t.name for t in threading.enumerate()} & {"engine-background", "bridge-model-watch", "folder-watch"}
    assert left == set()
    assert not embedder.ready and embedder.failed is None  # stopped, not failed: the next start loads it


def test_quit_while_the_store_opens_starts_nothing_after(qtbot, qasync_loop, profile_home, lexical_embedder):
    """Quit while the writer thread opens the store: the store is closed once open, and nothing of an opened
    app starts after the quit (no `opened`, so no timers, hotkey listener or first-run dialogs)."""
    from desktop.app import DesktopApp

    app = DesktopApp(profile_home, embedder=lexical_embedder, use_tray=False, use_hotkey=False, ask_where=False)
    qtbot.addWidget(app.window)
    qtbot.addWidget(app.capture)
    opened: list[object] = []
    app.bridge.opened.connect(opened.append)
    qtbot.waitUntil(lambda: app.bridge._engine is not None and app.bridge._engine.running(), timeout=20_000)
    with qtbot.waitSignal(app.quitted, timeout=60_000):
        app.quit()
    qtbot.wait(300)  # what the writer thread sent before the close arrives now
    assert opened == [] and app.bridge.info is None
    assert not app._health_timer.isActive() and not app._tidy_timer.isActive()
