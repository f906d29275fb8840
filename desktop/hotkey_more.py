"""Global hotkeys on macOS (Carbon) and on Wayland (the xdg-desktop-portal GlobalShortcuts portal).

macOS: `RegisterEventHotKey` from Carbon, called through ctypes. A Carbon hot key needs no Accessibility
permission (unlike an event tap); its handler runs on the main thread, inside the Cocoa event loop Qt runs.

Wayland: the compositor owns the keyboard, so the app asks the portal (org.freedesktop.portal.GlobalShortcuts,
xdg-desktop-portal 1.16+, implemented by GNOME 48+, KDE Plasma 6 and Hyprland) for a session, binds one
shortcut (the desktop shows its own dialog to confirm or change the keys) and listens for `Activated`. The
D-Bus calls use jeepney (pure Python, already installed with keyring's Secret Service backend): the portal's
`a(sa{sv})` arguments cannot be built with PySide6's QtDBus bindings. Without the portal the status says
what to bind by hand (`personal-llm-desktop --capture`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import secrets
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------------
# macOS: Carbon RegisterEventHotKey
# ---------------------------------------------------------------------------------------------------
CMD_KEY, SHIFT_KEY, OPTION_KEY, CONTROL_KEY = 1 << 8, 1 << 9, 1 << 11, 1 << 12
K_EVENT_CLASS_KEYBOARD = int.from_bytes(b"keyb", "big")
K_EVENT_HOT_KEY_PRESSED = 5
SIGNATURE = int.from_bytes(b"PLLM", "big")

# kVK_* virtual key codes (HIToolbox/Events.h): the ANSI layout's positions
MAC_KEYS: dict[str, int] = {
    "A": 0x00, "S": 0x01, "D": 0x02, "F": 0x03, "H": 0x04, "G": 0x05, "Z": 0x06, "X": 0x07, "C": 0x08,
    "V": 0x09, "B": 0x0B, "Q": 0x0C, "W": 0x0D, "E": 0x0E, "R": 0x0F, "Y": 0x10, "T": 0x11, "1": 0x12,
    "2": 0x13, "3": 0x14, "4": 0x15, "6": 0x16, "5": 0x17, "9": 0x19, "7": 0x1A, "8": 0x1C, "0": 0x1D,
    "O": 0x1F, "U": 0x20, "I": 0x22, "P": 0x23, "L": 0x25, "J": 0x26, "K": 0x28, "N": 0x2D, "M": 0x2E,
    "RETURN": 0x24, "ENTER": 0x24, "TAB": 0x30, "SPACE": 0x31, "BACKSPACE": 0x33, "ESC": 0x35, "ESCAPE": 0x35,
    "F1": 0x7A, "F2": 0x78, "F3": 0x63, "F4": 0x76, "F5": 0x60, "F6": 0x61, "F7": 0x62, "F8": 0x64,
    "F9": 0x65, "F10": 0x6D, "F11": 0x67, "F12": 0x6F, "LEFT": 0x7B, "RIGHT": 0x7C, "DOWN": 0x7D, "UP": 0x7E,
}


def mac_hotkey(ctrl: bool, shift: bool, alt: bool, meta: bool, key: str) -> tuple[int, int] | None:
    """(virtual key code, Carbon modifiers) for a Qt-style shortcut; None for a key not on the table.
    Qt names the Command key "Ctrl" on macOS and the Control key "Meta": so do we."""
    code = MAC_KEYS.get(key.upper())
    if code is None:
        return None
    mods = (CMD_KEY if ctrl else 0) | (SHIFT_KEY if shift else 0) | (OPTION_KEY if alt else 0) | (
        CONTROL_KEY if meta else 0)
    return code, mods


class _EventHotKeyID(ctypes.Structure):
    _fields_ = [("signature", ctypes.c_uint32), ("id", ctypes.c_uint32)]


class _EventTypeSpec(ctypes.Structure):
    _fields_ = [("eventClass", ctypes.c_uint32), ("eventKind", ctypes.c_uint32)]


_HANDLER = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class MacHotkey:
    """One Carbon hot key for the application's event target. `register` returns '' or why it failed."""

    def __init__(self, fire: Callable[[], None]) -> None:
        self._fire = fire
        self._carbon: Any = None
        self._hotkey = ctypes.c_void_p()
        self._handler_ref = ctypes.c_void_p()
        self._callback = _HANDLER(self._on_event)  # kept alive as long as the handler is installed

    def _on_event(self, _call_ref: int | None, _event: int | None, _data: int | None) -> int:
        try:
            self._fire()
        except Exception:
            log.exception("hotkey handler failed")
        return 0  # noErr

    def register(self, code: int, modifiers: int) -> str:
        path = ctypes.util.find_library("Carbon") or "/System/Library/Frameworks/Carbon.framework/Carbon"
        try:
            carbon = ctypes.CDLL(path)
        except OSError as e:
            return f"Carbon is not available ({e})"
        carbon.GetApplicationEventTarget.restype = ctypes.c_void_p
        carbon.InstallEventHandler.argtypes = [ctypes.c_void_p, _HANDLER, ctypes.c_uint32,
                                               ctypes.POINTER(_EventTypeSpec), ctypes.c_void_p,
                                               ctypes.POINTER(ctypes.c_void_p)]
        carbon.RegisterEventHotKey.argtypes = [ctypes.c_uint32, ctypes.c_uint32, _EventHotKeyID, ctypes.c_void_p,
                                               ctypes.c_uint32, ctypes.POINTER(ctypes.c_void_p)]
        carbon.UnregisterEventHotKey.argtypes = [ctypes.c_void_p]
        carbon.RemoveEventHandler.argtypes = [ctypes.c_void_p]
        target = carbon.GetApplicationEventTarget()
        spec = _EventTypeSpec(K_EVENT_CLASS_KEYBOARD, K_EVENT_HOT_KEY_PRESSED)
        status = carbon.InstallEventHandler(target, self._callback, 1, ctypes.byref(spec), None,
                                            ctypes.byref(self._handler_ref))
        if status != 0:
            return f"the event handler could not be installed (OSStatus {status})"
        status = carbon.RegisterEventHotKey(code, modifiers, _EventHotKeyID(SIGNATURE, 1), target, 0,
                                            ctypes.byref(self._hotkey))
        if status != 0:
            carbon.RemoveEventHandler(self._handler_ref)
            return "taken" if status == -9878 else f"RegisterEventHotKey failed (OSStatus {status})"
        self._carbon = carbon
        return ""

    def unregister(self) -> None:
        if self._carbon is not None:
            self._carbon.UnregisterEventHotKey(self._hotkey)
            self._carbon.RemoveEventHandler(self._handler_ref)
            self._carbon = None


# ---------------------------------------------------------------------------------------------------
# Wayland: org.freedesktop.portal.GlobalShortcuts
# ---------------------------------------------------------------------------------------------------
PORTAL = "org.freedesktop.portal.Desktop"
PORTAL_PATH = "/org/freedesktop/portal/desktop"
SHORTCUTS = "org.freedesktop.portal.GlobalShortcuts"
SHORTCUT_ID = "quick-capture"


def portal_trigger(ctrl: bool, shift: bool, alt: bool, meta: bool, key: str) -> str:
    """The XDG shortcut notation the portal's preferred_trigger takes: 'CTRL+SHIFT+space'."""
    names = {"SPACE": "space", "RETURN": "Return", "ENTER": "Return", "TAB": "Tab", "ESC": "Escape",
             "ESCAPE": "Escape", "BACKSPACE": "BackSpace"}
    k = names.get(key.upper(), key if len(key) > 1 else key.lower())
    mods = [m for m, on in (("CTRL", ctrl), ("SHIFT", shift), ("ALT", alt), ("LOGO", meta)) if on]
    return "+".join([*mods, k])


class PortalHotkey:
    """A GlobalShortcuts session on its own thread and D-Bus connection. `start()` blocks until the portal
    answered (or `timeout`): ('active', detail) | ('unavailable', why) | ('refused', why)."""

    def __init__(self, trigger: str, description: str, fire: Callable[[], None], *, timeout: float = 30.0,
                 bus: str = "SESSION") -> None:
        self.trigger, self.description = trigger, description
        self._fire = fire
        self._timeout = timeout
        self._bus = bus
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._result: tuple[str, str] | None = None
        self._ready = threading.Event()
        self._on_result: Callable[[str, str], None] | None = None

    def start(self, on_result: Callable[[str, str], None] | None = None) -> tuple[str, str] | None:
        """Without `on_result`: wait for the portal's answer. With it: return None at once and report the
        answer from the portal thread (the desktop may show a dialog first, for as long as the user likes)."""
        self._on_result = on_result
        self._thread = threading.Thread(target=self._run, name="hotkey-portal", daemon=True)
        self._thread.start()
        if on_result is not None:
            return None
        self._ready.wait(self._timeout + 1)
        return self._result or ("unavailable", "the desktop portal did not answer in time")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _answer(self, state: str, detail: str) -> None:
        if self._result is None:
            self._result = (state, detail)
            self._ready.set()
            if self._on_result is not None:
                self._on_result(state, detail)

    def _run(self) -> None:
        try:
            self._session()
        except Exception as e:  # noqa: BLE001 - any D-Bus failure becomes a status for people
            log.info("portal hotkey: %s", type(e).__name__)
            self._answer("unavailable", _portal_reason(e))

    def _session(self) -> None:
        from jeepney import DBusAddress, MatchRule, new_method_call
        from jeepney.io.blocking import open_dbus_connection

        conn = open_dbus_connection(bus=self._bus)
        try:
            portal = DBusAddress(PORTAL_PATH, bus_name=PORTAL, interface=SHORTCUTS)
            sender = conn.unique_name.lstrip(":").replace(".", "_")

            def request(method: str, signature: str, body: tuple) -> tuple[int, dict]:
                token = "pllm" + secrets.token_hex(4)
                path = f"/org/freedesktop/portal/desktop/request/{sender}/{token}"
                rule = MatchRule(type="signal", interface="org.freedesktop.portal.Request", member="Response",
                                 path=path)
                _add_match(conn, rule)
                options = body[-1]
                options["handle_token"] = ("s", token)
                with conn.filter(rule) as queue:
                    reply = conn.send_and_get_reply(new_method_call(portal, method, signature, body),
                                                    timeout=self._timeout)
                    if reply.header.message_type.name == "error":
                        raise _PortalError(str(reply.header.fields.get(4, "error")), reply.body)
                    response = conn.recv_until_filtered(queue, timeout=self._timeout)
                code, results = response.body
                return int(code), {k: v[1] for k, v in results.items()}

            code, results = request("CreateSession", "a{sv}",
                                    ({"session_handle_token": ("s", "pllm" + secrets.token_hex(4))},))
            if code != 0:
                self._answer("refused", "the desktop did not open a shortcut session")
                return
            session = str(results.get("session_handle", ""))
            shortcut = (SHORTCUT_ID, {"description": ("s", self.description),
                                      "preferred_trigger": ("s", self.trigger)})
            code, results = request("BindShortcuts", "oa(sa{sv})sa{sv}", (session, [shortcut], "", {}))
            if code != 0:
                self._answer("refused", "the shortcut was not confirmed in the desktop's dialog")
                return
            bound = results.get("shortcuts") or []
            shown = next((dict((k, v[1]) for k, v in opts.items()).get("trigger_description", "")
                          for sid, opts in bound if sid == SHORTCUT_ID), "")
            activated = MatchRule(type="signal", interface=SHORTCUTS, member="Activated", path=PORTAL_PATH)
            _add_match(conn, activated)
            with conn.filter(activated) as queue:
                self._answer("active", str(shown or self.trigger))
                while not self._stop.is_set():
                    try:
                        message = conn.recv_until_filtered(queue, timeout=0.25)
                    except TimeoutError:
                        continue
                    if message.body and str(message.body[0]) == session and message.body[1] == SHORTCUT_ID:
                        self._fire()
            close = new_method_call(DBusAddress(session, bus_name=PORTAL, interface="org.freedesktop.portal.Session"),
                                    "Close")
            conn.send(close)
        finally:
            conn.close()


class _PortalError(Exception):
    def __init__(self, name: str, body: Any) -> None:
        super().__init__(name)
        self.name = name
        self.body = body


def _add_match(conn: Any, rule: Any) -> None:
    from jeepney.bus_messages import message_bus

    conn.send_and_get_reply(message_bus.AddMatch(rule), timeout=5)


def _portal_reason(error: Exception) -> str:
    name = getattr(error, "name", "") or type(error).__name__
    if "ServiceUnknown" in name or "NameHasNoOwner" in name:
        return "no desktop portal is running"
    if "UnknownMethod" in name or "UnknownInterface" in name or "UnknownObject" in name:
        return "this desktop's portal has no GlobalShortcuts support (xdg-desktop-portal 1.16+ with GNOME 48+, " \
               "KDE Plasma 6 or Hyprland)"
    if isinstance(error, TimeoutError):
        return "the desktop portal did not answer in time"
    if isinstance(error, OSError | KeyError):
        return "no D-Bus session bus was found"
    return f"the desktop portal refused ({name})"
