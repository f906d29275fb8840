"""On a real X server with a tray host: the real global hotkey opens the capture box, and typed text is stored."""

from __future__ import annotations

import json
import time

import pytest

from .xserver import XServer, launch_app, missing_tools, wait_event

pytestmark = [
    pytest.mark.xvfb,
    pytest.mark.skipif(bool(missing_tools()), reason=f"needs {', '.join(missing_tools())} (apt-get install "
                                                     "xvfb trayer xdotool)"),
]


def test_hotkey_opens_capture_and_the_typed_fact_is_stored(tmp_path):
    from engine import Engine
    from engine.config import Settings, save_settings
    from engine.embeddings import NoEmbedder

    home = tmp_path / "profile"
    home.mkdir()
    save_settings(Settings(embedding_model="none"), home)  # this test is about the hotkey, not the model
    with Engine.open(home, embedder=NoEmbedder()):  # a profile kept on this computer: no first-run question
        pass
    report = tmp_path / "events.jsonl"
    with XServer() as x:
        x.start_tray_host()
        app = launch_app(x, home, report)
        try:
            assert wait_event(report, "tray", 30, app)["available"] is True  # trayer hosts our icon
            hotkey = wait_event(report, "hotkey", 30, app)
            assert hotkey["state"] == "active", hotkey
            x.run("xdotool", "key", "--clearmodifiers", "ctrl+shift+space")
            wait_event(report, "capture_opened", 10, app)
            found = x.run("xdotool", "search", "--sync", "--onlyvisible", "--name", "Quick capture")
            window = found.stdout.split()[0]
            x.run("xdotool", "windowfocus", "--sync", window, check=False)
            time.sleep(0.3)
            x.run("xdotool", "type", "--delay", "20", "The recycling goes out on Tuesdays")
            x.run("xdotool", "key", "Return")
            wait_event(report, "captured", 20, app)
            # a second launch (what Wayland users bind) hands --capture to the running instance and exits
            second = launch_app(x, home, tmp_path / "second.jsonl", "--capture")
            assert second.wait(30) == 0
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _count(report, "capture_opened") < 2:
                time.sleep(0.05)
            assert _count(report, "capture_opened") == 2
            assert not (tmp_path / "second.jsonl").exists()  # it never started a window of its own
        finally:
            app.terminate()
            try:
                app.wait(20)
            except Exception:
                app.kill()
    with Engine.open(home, embedder=NoEmbedder()) as eng:
        texts = [m.text for m in eng.list_memories()]
        hits = eng.recall("recycling Tuesdays")
    assert texts == ["The recycling goes out on Tuesdays"]
    assert hits and hits[0].text == "The recycling goes out on Tuesdays"
    events = [json.loads(line)["event"] for line in report.read_text().splitlines()]
    assert events.index("window_painted") < events.index("engine_opened")


def test_x11_hotkey_fires_with_numlock_on_and_reports_a_clash(qtbot, qasync_loop, monkeypatch):
    """In-process: the X11 listener (its own X connection and thread) works with NumLock on, reaches the UI
    thread through its signal, and a shortcut another program already grabbed is reported as a clash."""
    from Xlib import XK, X, display

    from desktop.hotkey import GlobalHotkey

    with XServer() as x:
        monkeypatch.setenv("DISPLAY", x.display)
        monkeypatch.setenv("XDG_SESSION_TYPE", "x11")
        monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
        hotkey = GlobalHotkey()
        try:
            status = hotkey.start("Ctrl+Alt+K")
            assert status.state == "active", status.message
            x.run("xdotool", "key", "Num_Lock")  # NumLock on: the grab of the Mod2 variant must catch it
            with qtbot.waitSignal(hotkey.activated, timeout=5000):
                x.run("xdotool", "key", "ctrl+alt+k")
            x.run("xdotool", "key", "Num_Lock")
        finally:
            hotkey.stop()
        other = display.Display(x.display)  # another program holds Ctrl+Shift+Space
        try:
            keycode = other.keysym_to_keycode(XK.string_to_keysym("space"))
            other.screen().root.grab_key(keycode, X.ControlMask | X.ShiftMask, True, X.GrabModeAsync,
                                         X.GrabModeAsync)
            other.sync()
            clash = GlobalHotkey()
            try:
                status = clash.start("Ctrl+Shift+Space")
            finally:
                clash.stop()
            assert status.state == "clash"
            assert "already taken by another program" in status.message
        finally:
            other.close()


def _count(report, event: str) -> int:
    return sum(1 for line in report.read_text().splitlines() if json.loads(line)["event"] == event)
