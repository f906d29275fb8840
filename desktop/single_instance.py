"""One running app per profile: a second launch hands its arguments to the first and exits.

The local socket's name includes a hash of the profile directory (and the user), so two profiles — or
two tests with different PERSONAL_LLM_HOME — never talk to each other's instance.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_MS = 500


def server_name(home: Path) -> str:
    try:
        user = getpass.getuser()
    except Exception:  # no user name (containers): the profile path alone still separates profiles
        user = "user"
    digest = hashlib.sha256(f"{user}\0{home.expanduser().resolve()}".encode()).hexdigest()[:16]
    return f"personal-llm-{digest}"


class SingleInstance(QObject):
    """`forward(args)` first; if no instance answered, `listen()` and receive `arguments_received`."""

    arguments_received = Signal(list)

    def __init__(self, home: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = server_name(home)
        self._server: QLocalServer | None = None
        self._clients: dict[QLocalSocket, bytearray | None] = {}

    def forward(self, args: list[str]) -> bool:
        """Send `args` to a running instance. True when one received them (this process should exit)."""
        socket = QLocalSocket()
        socket.connectToServer(self.name)
        if not socket.waitForConnected(CONNECT_TIMEOUT_MS):
            return False
        socket.write(json.dumps(args).encode("utf-8") + b"\n")
        ok = socket.waitForBytesWritten(CONNECT_TIMEOUT_MS)
        socket.waitForReadyRead(CONNECT_TIMEOUT_MS)  # the running instance acknowledges
        socket.disconnectFromServer()
        return ok

    def listen(self) -> bool:
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        if not server.listen(self.name):
            QLocalServer.removeServer(self.name)  # a stale socket left by a crash
            if not server.listen(self.name):
                log.warning("single-instance server could not listen: %s", server.errorString())
                return False
        server.newConnection.connect(self._accept)
        self._server = server
        return True

    def close(self) -> None:
        for socket in list(self._clients):
            socket.readyRead.disconnect()
            socket.disconnected.disconnect()
            socket.abort()
            socket.deleteLater()
        self._clients.clear()
        if self._server is not None:
            self._server.close()
            self._server = None

    def _accept(self) -> None:
        assert self._server is not None
        while self._server.hasPendingConnections():
            socket = self._server.nextPendingConnection()
            self._clients[socket] = bytearray()
            socket.readyRead.connect(lambda s=socket: self._read(s))
            socket.disconnected.connect(lambda s=socket: self._drop(s))
            if socket.bytesAvailable():
                self._read(socket)

    def _read(self, socket: QLocalSocket) -> None:
        buffer = self._clients.get(socket)
        if buffer is None:
            return
        buffer.extend(bytes(socket.readAll().data()))
        if buffer.endswith(b"\n"):
            self._clients[socket] = None  # handled; dropped when the other side hangs up
            socket.write(b"ok\n")
            socket.flush()
            self._deliver(bytes(buffer))

    def _drop(self, socket: QLocalSocket) -> None:
        buffer = self._clients.pop(socket, None)
        if buffer and buffer.endswith(b"\n"):
            self._deliver(bytes(buffer))
        socket.deleteLater()

    def _deliver(self, data: bytes) -> None:
        try:
            args = json.loads(data.decode("utf-8"))
        except ValueError:
            log.warning("ignored a malformed message from a second instance")
            return
        if isinstance(args, list):
            self.arguments_received.emit([str(a) for a in args])
