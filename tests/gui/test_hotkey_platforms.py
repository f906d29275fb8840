"""The global hotkey where it can run here: Wayland through a GlobalShortcuts portal (a stand-in on a private
D-Bus bus, spoken to over real D-Bus), and the macOS key table (Carbon itself only runs on a Mac)."""

from __future__ import annotations

import sys

import pytest

from desktop.hotkey import GlobalHotkey
from desktop.hotkey_more import CMD_KEY, CONTROL_KEY, OPTION_KEY, SHIFT_KEY, mac_hotkey, portal_trigger

from .fake_portal import FakePortal, PrivateBus, dbus_available

needs_dbus = pytest.mark.skipif(not dbus_available(), reason="needs dbus-daemon")


@pytest.fixture
def wayland(monkeypatch):
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    monkeypatch.setenv("XDG_SESSION_TYPE", "wayland")
    monkeypatch.setattr(sys, "platform", "linux")


@needs_dbus
def test_wayland_binds_the_shortcut_through_the_portal_and_fires(qtbot, qasync_loop, wayland, monkeypatch):
    with PrivateBus() as bus, FakePortal(bus.address) as portal:
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", bus.address)
        hotkey = GlobalHotkey()
        with qtbot.waitSignal(hotkey.status_changed, timeout=10_000,
                              check_params_cb=lambda s: s.state != "waiting") as reported:
            first = hotkey.start("Ctrl+Shift+Space")
            assert first.state == "waiting"
        status = reported.args[0]
        assert status.state == "active", status.message
        assert "CTRL+SHIFT+space" in status.message
        assert portal.bound and portal.bound[0][0][0] == "quick-capture"
        with qtbot.waitSignal(hotkey.activated, timeout=5000):
            portal.activate()
        hotkey.stop()


@needs_dbus
def test_wayland_without_the_portal_says_what_to_bind(qtbot, qasync_loop, wayland, monkeypatch):
    with PrivateBus() as bus:  # a bus, but nobody owns org.freedesktop.portal.Desktop
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", bus.address)
        hotkey = GlobalHotkey()
        with qtbot.waitSignal(hotkey.status_changed, timeout=10_000,
                              check_params_cb=lambda s: s.state != "waiting") as reported:
            hotkey.start("Ctrl+Shift+Space")
        status = reported.args[0]
        assert status.state == "wayland" and "personal-llm-desktop --capture" in status.message
        assert "no desktop portal" in status.message
        hotkey.stop()


def test_macos_keys_and_modifiers_follow_qts_naming():
    # Qt calls the Command key "Ctrl" on macOS and the Control key "Meta"
    assert mac_hotkey(True, True, False, False, "Space") == (0x31, CMD_KEY | SHIFT_KEY)
    assert mac_hotkey(False, False, True, True, "K") == (0x28, OPTION_KEY | CONTROL_KEY)
    assert mac_hotkey(True, False, False, False, "F5") == (0x60, CMD_KEY)
    assert mac_hotkey(True, False, False, False, "§") is None


def test_macos_listener_reports_when_carbon_is_missing(qtbot, qasync_loop, monkeypatch):
    if sys.platform == "darwin":
        pytest.skip("on a Mac Carbon loads; this checks the message where it cannot")
    monkeypatch.setattr(sys, "platform", "darwin")
    status = GlobalHotkey().start("Ctrl+Shift+Space")
    # Carbon cannot load here: the status says so and what to use instead (never a traceback)
    assert status.state == "unsupported" and "Carbon" in status.message and "--capture" in status.message


def test_portal_triggers_use_the_xdg_notation():
    assert portal_trigger(True, True, False, False, "Space") == "CTRL+SHIFT+space"
    assert portal_trigger(False, False, True, True, "K") == "ALT+LOGO+k"
