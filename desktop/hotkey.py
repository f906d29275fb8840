"""The global hotkey that opens the quick-capture box from anywhere.

Each platform's listener runs on its own thread (X11 with its own X connection; Windows with its own
message queue) and reaches the UI thread only through the `activated` signal. Where a global grab is not
possible the status says what to do instead. macOS (Carbon) and Wayland (the GlobalShortcuts portal) are in
hotkey_more.py.
"""

from __future__ import annotations

import logging
import os
import select
import sys
import threading
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

log = logging.getLogger(__name__)

CAPTURE_COMMAND = "personal-llm-desktop --capture"


@dataclass(frozen=True)
class HotkeyStatus:
    state: str  # active | waiting | clash | wayland | unsupported | invalid | off
    message: str

    @property
    def active(self) -> bool:
        return self.state == "active"


@dataclass(frozen=True)
class Combo:
    """A parsed shortcut like Ctrl+Shift+Space."""

    ctrl: bool
    shift: bool
    alt: bool
    meta: bool
    key: str  # Qt's key name: "Space", "K", "F5", …

    @classmethod
    def parse(cls, text: str) -> Combo:
        parts = [p.strip() for p in text.replace(" ", "").split("+") if p.strip()]
        if not parts:
            raise ValueError("empty shortcut")
        mods = {p.lower() for p in parts[:-1]}
        unknown = mods - {"ctrl", "control", "shift", "alt", "meta", "super", "win", "cmd"}
        if unknown:
            raise ValueError(f"unknown modifier {sorted(unknown)[0]}")
        if not mods:
            raise ValueError("a global shortcut needs at least one modifier (Ctrl, Alt, Shift or Meta)")
        return cls(ctrl=bool(mods & {"ctrl", "control"}), shift="shift" in mods, alt="alt" in mods,
                   meta=bool(mods & {"meta", "super", "win", "cmd"}), key=parts[-1])


def session_kind() -> str:
    """x11 | wayland | windows | macos | none."""
    if sys.platform == "win32":
        return "windows"
    if sys.platform == "darwin":
        return "macos"
    if os.environ.get("XDG_SESSION_TYPE", "").lower() == "wayland" or (
        os.environ.get("WAYLAND_DISPLAY") and not os.environ.get("DISPLAY")
    ):
        return "wayland"
    return "x11" if os.environ.get("DISPLAY") else "none"


class GlobalHotkey(QObject):
    """Owns one platform listener. `start(shortcut)` (again to change it), `stop()` at quit."""

    activated = Signal()
    status_changed = Signal(object)  # HotkeyStatus

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._listener: _Listener | None = None
        self.status = HotkeyStatus("off", "The global shortcut is not set up yet.")

    def start(self, shortcut: str) -> HotkeyStatus:
        self.stop()
        try:
            combo = Combo.parse(shortcut)
        except ValueError as e:
            return self._set(HotkeyStatus("invalid", f"“{shortcut}” is not a usable shortcut: {e}."))
        kind = session_kind()
        if kind == "wayland":
            listener: _Listener = _PortalListener(combo, self.activated.emit, self._set_from_thread)
            self._listener = listener
            return self._set(listener.start(shortcut))
        if kind == "macos":
            listener = _MacListener(combo, self.activated.emit, self._set_from_thread)
            self._listener = listener
            return self._set(listener.start(shortcut))
        if kind == "none":
            return self._set(HotkeyStatus("unsupported", "No desktop session was found for a global shortcut."))
        listener_type = _X11Listener if kind == "x11" else _WindowsListener
        listener = listener_type(combo, self.activated.emit, self._set_from_thread)  # type: ignore[abstract]
        self._listener = listener
        return self._set(listener.start(shortcut))

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.stop()
            self._listener = None

    def _set(self, status: HotkeyStatus) -> HotkeyStatus:
        self.status = status
        if status.state not in ("active", "off"):
            log.info("global hotkey: %s", status.state)
        self.status_changed.emit(status)
        return status

    def _set_from_thread(self, status: HotkeyStatus) -> None:
        self.status = status
        self.status_changed.emit(status)  # queued to the UI thread by Qt


class _Listener:
    def __init__(self, combo: Combo, fire, report) -> None:
        self.combo = combo
        self._fire = fire
        self._report = report
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, shortcut: str) -> HotkeyStatus:
        raise NotImplementedError

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)


class _MacListener(_Listener):
    """Carbon RegisterEventHotKey (no Accessibility permission needed); fires on the main thread."""

    def start(self, shortcut: str) -> HotkeyStatus:
        from .hotkey_more import MacHotkey, mac_hotkey

        c = self.combo
        mapped = mac_hotkey(c.ctrl, c.shift, c.alt, c.meta, c.key)
        if mapped is None:
            return HotkeyStatus("invalid", f"The key “{c.key}” cannot be a global shortcut on macOS; choose a "
                                           "letter, a digit, Space, Return or F1–F12.")
        self._mac = MacHotkey(self._fire)
        failure = self._mac.register(*mapped)
        if failure == "taken":
            return HotkeyStatus("clash", f"{shortcut} is already taken by another app. Choose another shortcut.")
        if failure:
            return HotkeyStatus("unsupported", f"The global shortcut could not be set up ({failure}). Use the "
                                               f"menu-bar icon's Quick capture, or bind “{CAPTURE_COMMAND}” "
                                               "with Shortcuts.")
        return HotkeyStatus("active", f"Press {shortcut.replace('Ctrl', '⌘')} anywhere to capture a memory.")

    def stop(self) -> None:
        mac = getattr(self, "_mac", None)
        if mac is not None:
            mac.unregister()


class _PortalListener(_Listener):
    """Wayland: the xdg-desktop-portal GlobalShortcuts portal; else the advice to bind the command."""

    BUS = "SESSION"

    def start(self, shortcut: str) -> HotkeyStatus:
        from .hotkey_more import PortalHotkey, portal_trigger

        c = self.combo
        if self.BUS == "SESSION" and not os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
            return self.status("unavailable", "no D-Bus session bus was found")
        self._portal = PortalHotkey(portal_trigger(c.ctrl, c.shift, c.alt, c.meta, c.key),
                                    "Open Personal LLM's quick capture", self._fire, bus=self.BUS)
        self._portal.start(lambda state, detail: self._report(self.status(state, detail)))
        return HotkeyStatus("waiting", "Asking your desktop for the global shortcut (it may show a dialog to "
                                       "confirm it)…")

    @staticmethod
    def status(state: str, detail: str) -> HotkeyStatus:
        if state == "active":
            return HotkeyStatus("active", f"Press {detail} anywhere to capture a memory (set through your "
                                          "desktop's shortcut settings; change it there).")
        return HotkeyStatus("wayland", f"Wayland lets apps have a global shortcut only through the desktop "
                                       f"portal, and {detail}. Add one in your desktop's keyboard settings that "
                                       f"runs: {CAPTURE_COMMAND}")

    def stop(self) -> None:
        portal = getattr(self, "_portal", None)
        if portal is not None:
            portal.stop()


class _X11Listener(_Listener):
    """XGrabKey on the root window, from a thread with its own X connection."""

    def start(self, shortcut: str) -> HotkeyStatus:
        ready = threading.Event()
        result: list[HotkeyStatus] = []

        def run() -> None:
            try:
                self._loop(shortcut, ready, result)
            except Exception as e:  # noqa: BLE001 - X errors of every kind end up as a status for people
                log.exception("X11 hotkey listener failed")
                if not ready.is_set():
                    result.append(HotkeyStatus("unsupported", f"The global shortcut could not be set up ({e})."))
                    ready.set()

        self._thread = threading.Thread(target=run, name="hotkey-x11", daemon=True)
        self._thread.start()
        ready.wait(5)
        return result[0] if result else HotkeyStatus("unsupported", "The X server did not answer in time.")

    def _loop(self, shortcut: str, ready: threading.Event, result: list[HotkeyStatus]) -> None:
        from Xlib import XK, X, display, error

        disp = display.Display()
        try:
            root = disp.screen().root
            keysym = XK.string_to_keysym(_x_key_name(self.combo.key))
            keycode = disp.keysym_to_keycode(keysym) if keysym else 0
            if not keycode:
                result.append(HotkeyStatus("invalid", f"The key “{self.combo.key}” is not on this keyboard."))
                ready.set()
                return
            mods = ((X.ControlMask if self.combo.ctrl else 0) | (X.ShiftMask if self.combo.shift else 0)
                    | (X.Mod1Mask if self.combo.alt else 0) | (X.Mod4Mask if self.combo.meta else 0))
            # NumLock (Mod2) and CapsLock (Lock) must not stop the shortcut from working
            variants = [mods | extra for extra in (0, X.LockMask, X.Mod2Mask, X.LockMask | X.Mod2Mask)]
            catcher = error.CatchError(error.BadAccess)
            for m in variants:
                root.grab_key(keycode, m, True, X.GrabModeAsync, X.GrabModeAsync, onerror=catcher)
            disp.sync()
            if catcher.get_error():
                for m in variants:
                    root.ungrab_key(keycode, m)
                disp.sync()
                result.append(HotkeyStatus(
                    "clash", f"{shortcut} is already taken by another program. Choose another shortcut below."))
                ready.set()
                return
            result.append(HotkeyStatus("active", f"Press {shortcut} anywhere to capture a memory."))
            ready.set()
            while not self._stop.is_set():
                readable, _, _ = select.select([disp.fileno()], [], [], 0.25)
                if not readable and not disp.pending_events():
                    continue
                while disp.pending_events():
                    event = disp.next_event()
                    if event.type == X.KeyPress and event.detail == keycode:
                        self._fire()
            for m in variants:
                root.ungrab_key(keycode, m)
            disp.sync()
        finally:
            disp.close()


def _x_key_name(key: str) -> str:
    names = {"space": "space", "return": "Return", "enter": "Return", "tab": "Tab", "esc": "Escape",
             "escape": "Escape", "backspace": "BackSpace", "ins": "Insert", "del": "Delete"}
    if key.lower() in names:
        return names[key.lower()]
    return key.lower() if len(key) == 1 else key


class _WindowsListener(_Listener):
    """RegisterHotKey on a thread with its own message queue (hotkeys belong to the registering thread)."""

    WM_HOTKEY = 0x0312
    WM_QUIT = 0x0012

    def start(self, shortcut: str) -> HotkeyStatus:
        ready = threading.Event()
        result: list[HotkeyStatus] = []
        self._thread_id = 0
        self._thread = threading.Thread(target=self._loop, args=(shortcut, ready, result), name="hotkey-win",
                                        daemon=True)
        self._thread.start()
        ready.wait(5)
        return result[0] if result else HotkeyStatus("unsupported", "Windows did not answer in time.")

    def _loop(self, shortcut: str, ready: threading.Event, result: list[HotkeyStatus]) -> None:
        import ctypes
        from ctypes import wintypes

        user32 = ctypes.windll.user32  # type: ignore[attr-defined]
        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        self._thread_id = kernel32.GetCurrentThreadId()
        mods = ((0x0002 if self.combo.ctrl else 0) | (0x0004 if self.combo.shift else 0)
                | (0x0001 if self.combo.alt else 0) | (0x0008 if self.combo.meta else 0) | 0x4000)  # NOREPEAT
        vk = _windows_vk(self.combo.key)
        if vk is None:
            result.append(HotkeyStatus("invalid", f"The key “{self.combo.key}” cannot be used here."))
            ready.set()
            return
        if not user32.RegisterHotKey(None, 1, mods, vk):
            result.append(HotkeyStatus(
                "clash", f"{shortcut} is already taken by another program. Choose another shortcut below."))
            ready.set()
            return
        result.append(HotkeyStatus("active", f"Press {shortcut} anywhere to capture a memory."))
        ready.set()
        msg = wintypes.MSG()
        try:
            while user32.GetMessageW(ctypes.byref(msg), None, 0, 0) > 0:
                if msg.message == self.WM_HOTKEY:
                    self._fire()
        finally:
            user32.UnregisterHotKey(None, 1)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread_id:
            import ctypes

            ctypes.windll.user32.PostThreadMessageW(self._thread_id, self.WM_QUIT, 0, 0)  # type: ignore[attr-defined]
        super().stop()


def _windows_vk(key: str) -> int | None:
    named = {"space": 0x20, "return": 0x0D, "enter": 0x0D, "tab": 0x09, "esc": 0x1B, "escape": 0x1B,
             "backspace": 0x08, "ins": 0x2D, "del": 0x2E}
    if key.lower() in named:
        return named[key.lower()]
    if len(key) == 1 and key.isalnum():
        return ord(key.upper())
    if key.upper().startswith("F") and key[1:].isdigit() and 1 <= int(key[1:]) <= 24:
        return 0x70 + int(key[1:]) - 1
    return None
