"""A stand-in for xdg-desktop-portal's GlobalShortcuts on a private D-Bus session bus, for tests: it answers
CreateSession and BindShortcuts the way the portal does (a Request object whose Response signal carries the
result) and emits Activated on demand."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from typing import Any

PORTAL = "org.freedesktop.portal.Desktop"
PATH = "/org/freedesktop/portal/desktop"
SHORTCUTS = "org.freedesktop.portal.GlobalShortcuts"


def dbus_available() -> bool:
    return shutil.which("dbus-daemon") is not None


class PrivateBus:
    """`dbus-daemon --session` of our own; `address` to connect to."""

    def __enter__(self) -> PrivateBus:
        self.proc = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"],
                                     stdout=subprocess.PIPE, text=True, env=dict(os.environ))
        self.address = self.proc.stdout.readline().strip()
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(5)


class FakePortal:
    def __init__(self, address: str, *, accept: bool = True) -> None:
        self.address = address
        self.accept = accept
        self.bound: list[Any] = []
        self.sessions: list[str] = []
        self._activate = threading.Event()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> FakePortal:
        self._thread.start()
        assert self._ready.wait(5), "the fake portal did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def activate(self) -> None:
        self._activate.set()

    def _serve(self) -> None:
        from jeepney import DBusAddress, HeaderFields, MessageType, new_method_return, new_signal
        from jeepney.bus_messages import message_bus
        from jeepney.io.blocking import open_dbus_connection

        conn = open_dbus_connection(bus=self.address)
        conn.send_and_get_reply(message_bus.RequestName(PORTAL), timeout=5)
        self._ready.set()

        def respond(msg: Any, results: dict) -> None:
            sender = str(msg.header.fields[HeaderFields.sender]).lstrip(":").replace(".", "_")
            token = msg.body[-1]["handle_token"][1]
            path = f"/org/freedesktop/portal/desktop/request/{sender}/{token}"
            conn.send(new_method_return(msg, "o", (path,)))
            code = 0 if self.accept else 1
            conn.send(new_signal(DBusAddress(path, interface="org.freedesktop.portal.Request"), "Response",
                                 "ua{sv}", (code, results)))

        try:
            while not self._stop.is_set():
                if self._activate.is_set() and self.sessions:
                    self._activate.clear()
                    conn.send(new_signal(DBusAddress(PATH, interface=SHORTCUTS), "Activated", "osta{sv}",
                                         (self.sessions[-1], "quick-capture", 0, {})))
                try:
                    msg = conn.receive(timeout=0.1)
                except TimeoutError:
                    continue
                if msg.header.message_type != MessageType.method_call:
                    continue
                member = msg.header.fields.get(HeaderFields.member)
                if member == "CreateSession":
                    session = f"/org/freedesktop/portal/desktop/session/test/{len(self.sessions)}"
                    self.sessions.append(session)
                    respond(msg, {"session_handle": ("s", session)})
                elif member == "BindShortcuts":
                    self.bound.append(msg.body[1])
                    shown = [(sid, {"trigger_description": ("s", dict(opts)["preferred_trigger"][1])})
                             for sid, opts in msg.body[1]]
                    respond(msg, {"shortcuts": ("a(sa{sv})", shown)})
                elif member == "Close":
                    conn.send(new_method_return(msg))
        finally:
            conn.close()
