"""The HTTP API, served while the app runs: `personal-llm serve` as a child process on 127.0.0.1.

A child process (not a thread of the app) keeps the API's own actor in the activity log and its work off
the app's threads; it opens the same store (both hold the shared in-use lock) and stops with the app.
"""

from __future__ import annotations

import json
import logging

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, Signal

log = logging.getLogger(__name__)


class ApiServer(QObject):
    started = Signal(str)  # the URL
    stopped = Signal()
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.url: str | None = None
        self._proc: QProcess | None = None
        self._out = b""
        self._err = b""
        self._stopping = False

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.state() != QProcess.ProcessState.NotRunning

    def start(self, command: list[str], env: dict[str, str]) -> None:
        if self.running:
            return
        proc = QProcess(self)
        environment = QProcessEnvironment()
        for key, value in env.items():
            environment.insert(key, value)
        proc.setProcessEnvironment(environment)
        proc.readyReadStandardOutput.connect(self._read_out)
        proc.readyReadStandardError.connect(self._read_err)
        proc.finished.connect(self._finished)
        proc.errorOccurred.connect(self._error)
        self._proc, self._out, self._err, self._stopping, self.url = proc, b"", b"", False, None
        proc.start(command[0], command[1:])
        log.info("starting the API server")

    def stop(self, wait_ms: int = 5000) -> None:
        proc = self._proc
        if proc is None:
            return
        self._stopping = True
        if proc.state() != QProcess.ProcessState.NotRunning:
            proc.terminate()  # uvicorn shuts down gracefully on SIGTERM
            if not proc.waitForFinished(wait_ms):
                proc.kill()
                proc.waitForFinished(2000)
        self._gone()

    def _read_out(self) -> None:
        assert self._proc is not None
        self._out += bytes(self._proc.readAllStandardOutput().data())
        if self.url is None:
            text = self._out.decode("utf-8", "replace").lstrip()
            try:  # `serve --json` announces {"url": …, "docs": …} (possibly over several lines)
                announced, _end = json.JSONDecoder().raw_decode(text)
            except ValueError:
                return  # not all of it yet
            url = announced.get("url") if isinstance(announced, dict) else None
            if url:
                self.url = str(url)
                log.info("the API server is running")
                self.started.emit(self.url)

    def _read_err(self) -> None:
        assert self._proc is not None
        self._err = (self._err + bytes(self._proc.readAllStandardError().data()))[-4000:]

    def _finished(self, code: int, _status: QProcess.ExitStatus) -> None:
        if self._stopping or self._proc is None:
            return
        lines = [ln for ln in self._err.decode("utf-8", "replace").splitlines() if ln.strip()]
        reason = lines[-1].strip() if lines else f"it stopped (exit code {code})"
        self._gone()
        self.failed.emit(f"The API server stopped: {reason}")

    def _error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart and not self._stopping:
            self._gone()
            self.failed.emit("The API server could not be started.")

    def _gone(self) -> None:
        proc, self._proc, self.url = self._proc, None, None
        if proc is not None:
            proc.deleteLater()
        self.stopped.emit()
