"""More of Settings: where the memory is (this computer, or a server with its address, health and the writes
waiting to send; disconnect), appearance (light, dark, system), export and import, the HTTP API and MCP for other
programs, backups (folder, schedule, last snapshot, back up now, restore) and recovery (the recovery key,
the passphrase). Each section saves its own settings as they change (`Bridge.update_settings`: only the
setting changed, every other one stays as it is in settings.json).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from . import formatting, theme
from .api_server import ApiServer
from .bridge import Bridge, EngineInfo
from .first_run import RecoveryKeyDialog
from .recovery_dialogs import PassphraseDialog, ReauthDialog, length_hint
from .widgets import Banner, button, grow_to_fit, muted

SCHEDULES = (("Every day", "daily"), ("Every week", "weekly"), ("Only when I click “Back up now”", "off"))
CHECK_EVERY_MS = 30 * 60 * 1000  # how often the app looks whether a scheduled snapshot is due
FIRST_CHECK_MS = 60 * 1000  # the first look, a minute after the store opened (off the startup path)


def ago(at: float, now: float | None = None) -> str:
    """'5 minutes ago', '3 hours ago', '9 days ago'."""
    seconds = max(0.0, (now or time.time()) - at)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            return f"{formatting.plural(int(seconds // size), unit)} ago"
    return "just now"


def local_iso(at: float) -> str:
    return datetime.fromtimestamp(at).astimezone().isoformat()


def size_text(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.0f} KB"


def counts_text(counts: dict[str, int]) -> str:
    labels = {"memory": "memory", "document": "document", "chunk": "passage", "conversation": "conversation",
              "node": "entity", "edge": "fact"}
    parts = [formatting.plural(n, labels[k]).replace("memorys", "memories").replace("entitys", "entities")
             for k, n in counts.items() if n and k in labels]
    return ", ".join(parts) or "nothing"


def copy_to_clipboard(text: str) -> None:
    QGuiApplication.clipboard().setText(text)


class Note(QLabel):
    """A muted line that takes no room while it says nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("Muted")
        self.setWordWrap(True)
        self.hide()

    def setText(self, text: str) -> None:  # noqa: N802 - Qt API
        super().setText(text)
        self.setVisible(bool(text))


class SettingsSections(QObject):
    """Builds the sections; `boxes` go into the Settings page, below its own."""

    def __init__(self, bridge: Bridge, synced: Callable[[Any], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self._synced = synced
        self.appearance = AppearanceBox(self)
        self.transfer = TransferBox(self)
        self.api = ApiBox(self)
        self.backups = BackupBox(self)
        self.recovery = RecoveryBox(self)
        self.server = ServerBox(self)  # placed first by the Settings page
        self.boxes: list[QGroupBox] = [self.appearance, self.recovery, self.backups, self.transfer, self.api]
        self.local_only: list[QGroupBox] = [self.recovery, self.backups, self.transfer, self.api]
        bridge.opened.connect(self._opened)
        bridge.settings_changed.connect(self._followed)

    def save(self, change: Callable[[Any], None], done: Callable[[Any], None] | None = None) -> None:
        """Change and save settings; the Settings page's copy follows so its own Save keeps the change."""
        def saved(settings: Any) -> None:
            self._synced(settings)
            if done is not None:
                done(settings)

        self.bridge.update_settings(change, saved, self.bridge.failed.emit)

    def _opened(self, info: EngineInfo) -> None:
        local = info.connection is None
        for box in self.boxes:
            here = local or box not in self.local_only  # a server's keys, backups and doors are its operator's
            box.setVisible(here)
            if here:
                box.load(info)  # type: ignore[attr-defined]
        self.server.load(info)

    def _followed(self, _settings: Any) -> None:
        """Saved settings changed (here, or in settings.json by another program): the theme and the backup
        schedule show them. (Bridge.info carries the new settings already.)"""
        info = self.bridge.info
        if info is not None:
            self.appearance.load(info)
            self.backups.load(info)


# ----------------------------------------------------------------------------------------------------
# where the memory is
# ----------------------------------------------------------------------------------------------------
class ServerBox(QGroupBox):
    """Where the memory is: on this computer, or on a server (its address, its certificate, whether it answers,
    the writes waiting to send), with Disconnect."""

    disconnected = Signal()

    def __init__(self, sections: SettingsSections) -> None:
        super().__init__("Where your memory is")
        self.sections = sections
        self.where = QLabel("…")
        self.where.setWordWrap(True)
        self.where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.certificate = QLabel("")  # short lines (the fingerprint in four): unwrapped, its height is right
        self.certificate.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.health = QLabel("")
        self.health.setWordWrap(True)
        self.renew = button("Use a new token…")
        self.renew.setToolTip("The server refused this computer's token: give the new one (`personal-llm server "
                              "add-user` prints a user's token); what waits to be sent stays and is sent then")
        self.renew.clicked.connect(self.ask_new_token)
        self.renew.hide()
        self.disconnect = button("Disconnect…")
        self.disconnect.setToolTip("Stop using this server on this computer (your memory stays on the server)")
        self.disconnect.clicked.connect(self.confirm_disconnect)
        self.feedback = Banner()
        self.form = QFormLayout(self)
        self.form.addRow("Kept", self.where)
        self.form.addRow("Certificate", self.certificate)
        self.form.addRow("Server", self.health)
        row = QHBoxLayout()
        row.addWidget(muted("Switch with `personal-llm-desktop --profile NAME`; a profile connects once."), 1)
        row.addWidget(self.renew, 0, Qt.AlignmentFlag.AlignTop)
        row.addWidget(self.disconnect, 0, Qt.AlignmentFlag.AlignTop)
        self.form.addRow("", row)
        self.move_button = button("Copy to a server…")
        self.move_button.clicked.connect(self.open_move)
        self.move_note = muted("")
        self.move_note.setWordWrap(True)
        move_row = QHBoxLayout()
        move_row.addWidget(self.move_note, 1)
        move_row.addWidget(self.move_button, 0, Qt.AlignmentFlag.AlignTop)
        self.form.addRow("Copy", move_row)
        self.form.addRow("", self.feedback)
        self.move_dialog: MoveDialog | None = None
        sections.bridge.connection_changed.connect(self.show_connection)

    def open_move(self) -> MoveDialog:
        """Copy this profile's memories to a server (a local profile), or to this computer (a server profile)."""
        info = self.sections.bridge.info
        to_server = info is None or "push" not in info.unavailable
        self.move_dialog = MoveDialog(self.sections.bridge, to_server=to_server, parent=self.window())
        self.move_dialog.show()
        return self.move_dialog

    def load(self, info: EngineInfo) -> None:
        connection = info.connection
        server = connection is not None
        for field in (self.certificate, self.health):
            self.form.setRowVisible(field, server)
        self.disconnect.setVisible(server)
        to_server = "push" not in info.unavailable
        self.move_button.setText("Copy to a server…" if to_server else "Copy to this computer…")
        self.move_note.setText(
            "Send your memories into your account on a Personal LLM server, to use them from several devices."
            if to_server else
            "Copy your memories from the server into a profile kept on this computer, encrypted.")
        if not server:
            self.where.setText(f"On this computer, encrypted: {info.store}")
            return
        self.where.setText(f"On your server, {connection.url}")
        self.certificate.setText(
            "Pinned (self-signed), SHA-256 fingerprint:\n" + formatting.fingerprint_lines(connection.fingerprint)
            if connection.fingerprint
            else "Verified by an authority this computer trusts" if connection.url.startswith("https:")
            else "None: plain HTTP on this computer's loopback only")
        self.show_connection(connection)

    def show_connection(self, connection: Any) -> None:
        if connection is None:
            return
        waiting = (f" {connection.waiting} waiting to send." if connection.waiting else " Nothing waiting to send.")
        self.renew.setVisible(bool(getattr(connection, "token_refused", False)))
        if getattr(connection, "token_refused", False):
            self.health.setText(f"● Token refused. {connection.detail}".strip() + waiting)
            self.health.setStyleSheet("color: #DC2626;")
        elif connection.reachable is None:
            self.health.setText("◌ Checking…" + waiting)
            self.health.setStyleSheet("color: #9DA0AA;")
        elif connection.reachable:
            took = f", answered in {connection.latency_ms:.0f} ms" if connection.latency_ms is not None else ""
            held = (f", {connection.memories:,} memories" if connection.memories is not None else "")
            self.health.setText(f"● Connected{took}{held}." + waiting)
            self.health.setStyleSheet("color: #10B981;")
        else:
            self.health.setText(f"● Cannot be reached. {connection.detail}".strip() + waiting)
            self.health.setStyleSheet("color: #D97706;")

    def ask_new_token(self) -> None:
        token, ok = QInputDialog.getText(self.window(), "Use a new token",
                                         "The server refused this computer's token (it was revoked, or its user "
                                         "removed).\nYour new token (`personal-llm server add-user` prints one):",
                                         QLineEdit.EchoMode.Password)
        if ok and token.strip():
            self.renew_token(token.strip())

    def renew_token(self, token: str) -> None:
        self.feedback.set("Checking the new token…", "info")
        self.renew.setEnabled(False)

        def done(connection: Any) -> None:
            self.renew.setEnabled(True)
            self.feedback.set("Connected again: what waited is being sent.", "ok")
            self.show_connection(connection)

        def failed(message: str) -> None:
            self.renew.setEnabled(True)
            self.feedback.set(message, "error")

        self.sections.bridge.renew_token(token, done, failed)

    def confirm_disconnect(self) -> None:
        connection = self.sections.bridge.connection
        if connection is not None and connection.waiting:
            self.feedback.set(f"{connection.waiting} write(s) still wait to be sent: disconnect once the server "
                              "has them (or drop them with `personal-llm outbox --drop ID`).", "warn")
            return
        answer = QMessageBox.question(
            self.window(), "Disconnect from the server?",
            "This computer stops using the server: its token leaves the keychain. Your memory stays on the "
            "server. Personal LLM closes; when you start it again, choose where your memory lives.")
        if answer != QMessageBox.StandardButton.Yes:
            return
        self.sections.bridge.disconnect_server(lambda _none: self.disconnected.emit(),
                                               lambda message: self.feedback.set(message, "error"))


class MoveDialog(QDialog):
    """Copy the memories to a server (address and token) or to this computer (a profile's name), in the
    bridge's jobs thread with a progress bar. Stop (or closing the dialog) ends it after the page being
    copied; what was copied stays, and starting again completes it without copying anything twice."""

    finished_ok = Signal(object)

    def __init__(self, bridge: Bridge, *, to_server: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.to_server = to_server
        self.cancel: Any = None  # the running copy's stop (a threading.Event)
        self._copied = 0  # memories copied so far by the running copy
        self.setWindowTitle("Copy your memory to a server" if to_server else "Copy your memory to this computer")
        self.form = QFormLayout()
        self.address = QLineEdit()
        self.address.setPlaceholderText("https://memory.example.org:8765")
        self.token = QLineEdit()
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText("pllm_…")
        self.fingerprint = QLineEdit()
        self.fingerprint.setPlaceholderText("only for a self-signed certificate: AB:CD:…")
        self.name = QLineEdit("this-computer")
        # no keychain on this computer: a passphrase protects the copy, as at a local profile's first run
        self.needs_passphrase = not to_server and not bridge.keychain_available()
        self.passphrase = QLineEdit()
        self.passphrase.setEchoMode(QLineEdit.EchoMode.Password)
        self.passphrase.setPlaceholderText("at least 8 characters")
        self.again = QLineEdit()
        self.again.setEchoMode(QLineEdit.EchoMode.Password)
        self.passphrase_note = muted("No keychain is available on this computer, so a passphrase protects the "
                                     "copy's key. You type it each time that profile is opened; for a profile "
                                     "copied into before, type its passphrase.")
        self.passphrase_note.setWordWrap(True)
        self.passphrase_hint = length_hint(bridge, self.passphrase)
        if to_server:
            intro = ("Your memories, documents, conversations and the graph are sent into your account, each with its "
                     "own id: sending again, or after a stop, adds nothing twice.")
            self.form.addRow("Address", self.address)
            self.form.addRow("Token", self.token)
            self.form.addRow("Fingerprint", self.fingerprint)
        else:
            intro = ("Everything in your account is copied into a profile kept on this computer, encrypted; open it "
                     "with `personal-llm-desktop --profile NAME`. Copying again adds nothing twice.")
            self.form.addRow("Profile", self.name)
            if self.needs_passphrase:
                self.form.addRow("", self.passphrase_note)
                self.form.addRow("Passphrase", self.passphrase)
                self.form.addRow("", self.passphrase_hint)
                self.form.addRow("Again", self.again)
        self.progress = QProgressBar()
        self.progress.hide()
        self.result = Banner()
        self.start = button("Copy", primary=True)
        self.start.clicked.connect(self.run)
        self.stop = button("Stop")
        self.stop.clicked.connect(self.stop_copy)
        self.stop.hide()
        self.close_button = button("Close")
        self.close_button.clicked.connect(self.reject)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.close_button)
        buttons.addWidget(self.stop)
        buttons.addWidget(self.start)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 16)
        layout.setSpacing(10)
        note = muted(intro)
        note.setWordWrap(True)
        layout.addWidget(note)
        layout.addLayout(self.form)
        layout.addWidget(self.progress)
        layout.addWidget(self.result)
        layout.addLayout(buttons)
        self.setMinimumWidth(min(520, max(320, self.screen().availableGeometry().width() - 40))
                             if self.screen() else 520)
        grow_to_fit(self)

    @property
    def running(self) -> bool:
        return self.cancel is not None

    def run(self) -> None:
        if self.running:
            return
        if self.to_server and not (self.address.text().strip() and self.token.text().strip()):
            self.result.set("Give the server's address and your token (`personal-llm server add-user` prints it).",
                            "error")
            return
        if not self.to_server and not self.name.text().strip():
            self.result.set("Name the profile to copy into.", "error")
            return
        passphrase = None
        if self.needs_passphrase:
            passphrase = self.passphrase.text()
            if problem := self.bridge.passphrase_problem(passphrase):
                self.result.set(problem, "error")
                return
            if self.again.text() != passphrase:
                self.result.set("The two passphrases differ; type the same one twice.", "error")
                return
        self.start.setEnabled(False)
        self._copied = 0
        self.stop.show()
        self.stop.setEnabled(True)
        self.progress.setRange(0, 0)
        self.progress.show()
        self.result.set("Copying…", "info")
        if self.to_server:
            self.cancel = self.bridge.push_to_server(self.address.text().strip(), self.token.text().strip(),
                                                     self.fingerprint.text().strip() or None, self._done,
                                                     self._failed, self._progressed)
        else:
            self.cancel = self.bridge.copy_to_local(self.name.text().strip(), self._done, self._failed,
                                                    self._progressed, passphrase=passphrase)

    def stop_copy(self) -> None:
        if self.cancel is not None:
            self.cancel.set()
            self.stop.setEnabled(False)
            self.result.set("Stopping after the memories being copied now…", "info")

    def _progressed(self, done: int, total: int) -> None:
        self._copied = done
        if total > 0:
            self.progress.setRange(0, total)
            self.progress.setValue(min(done, total))
            self.result.set(f"Copied {done:,} of {total:,} items…", "info")

    def _ended(self) -> None:
        self.cancel = None
        self.start.setEnabled(True)
        self.stop.hide()

    def _failed(self, message: str) -> None:
        self._ended()
        self.progress.hide()
        self.result.set(message, "error")

    def _done(self, value: Any) -> None:
        self._ended()
        moved = getattr(value, "moved", value)  # a copy to this computer: Copied (the moved, the new profile)
        stopped = value is None or bool(getattr(value, "cancelled", False))
        if stopped:
            self.progress.hide()
            n = max(self._copied, moved.records if moved is not None else 0)
            copied = f": {n:,} items were copied" if n else ""
            self.result.set(f"Stopped{copied}. Copy again to complete it (nothing is copied twice).", "warn")
        else:
            self.progress.setRange(0, 1)
            self.progress.setValue(1)
            where = "on the server" if self.to_server else f"in the profile {self.name.text().strip()}"
            self.result.set(f"Copied {moved.records:,} items, {moved.memories:,} of them memories: {moved.added:,} "
                            f"memories new {where}, the others were there already.", "ok")
            self.close_button.setDefault(True)
        key = getattr(value, "recovery_key", None)
        if key:  # the profile made by this copy: its recovery key, shown once
            self.key_dialog = RecoveryKeyDialog(key, parent=self)
            self.key_dialog.show()
        self.finished_ok.emit(value)

    def reject(self) -> None:
        self.stop_copy()  # closing stops the copy (cancel-safe: what was copied stays)
        super().reject()


# ----------------------------------------------------------------------------------------------------
# appearance
# ----------------------------------------------------------------------------------------------------
class AppearanceBox(QGroupBox):
    def __init__(self, sections: SettingsSections) -> None:
        super().__init__("Appearance")
        self.sections = sections
        self.mode = QComboBox()
        for label, value in theme.MODES:
            self.mode.addItem(label, value)
        self.mode.currentIndexChanged.connect(self._changed)
        row = QHBoxLayout(self)
        row.addWidget(QLabel("Theme"))
        row.addWidget(self.mode)
        row.addStretch(1)
        self._loading = False

    def load(self, info: EngineInfo) -> None:
        self._loading = True
        self.mode.setCurrentIndex(max(self.mode.findData(info.settings.theme), 0))
        self._loading = False
        if theme.mode() != info.settings.theme:
            theme.set_mode(info.settings.theme)

    def _changed(self, _index: int) -> None:
        value = self.mode.currentData()
        theme.set_mode(value)
        if not self._loading:
            self.sections.save(lambda s: setattr(s, "theme", value))


# ----------------------------------------------------------------------------------------------------
# export and import
# ----------------------------------------------------------------------------------------------------
class TransferBox(QGroupBox):
    def __init__(self, sections: SettingsSections) -> None:
        super().__init__("Export and import")
        self.sections = sections
        self.export_button = button("Export…")
        self.export_button.clicked.connect(self.open_export)
        self.import_button = button("Import…")
        self.import_button.clicked.connect(self.open_import)
        row = QHBoxLayout(self)
        row.addWidget(muted("Everything you stored, as one file (encrypted with a passphrase you choose), to keep "
                            "or to move to another computer. Importing merges: nothing is added twice."), 1)
        row.addWidget(self.export_button)
        row.addWidget(self.import_button)
        self.dialog: QDialog | None = None

    def load(self, info: EngineInfo) -> None:
        pass

    def open_export(self) -> ExportDialog:
        self.dialog = ExportDialog(self.sections.bridge, self.window())
        self.dialog.show()
        return self.dialog

    def open_import(self) -> ImportDialog:
        self.dialog = ImportDialog(self.sections.bridge, self.window())
        self.dialog.show()
        return self.dialog


class _FileDialog(QDialog):
    """A file row, passphrase fields, a progress bar, a result line and a start button."""

    finished_ok = Signal(object)

    def __init__(self, bridge: Bridge, title: str, action: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.setWindowTitle(title)
        self.path = QLineEdit()
        self.choose = button("Choose…")
        self.choose.clicked.connect(self._choose)
        path_row = QHBoxLayout()
        path_row.addWidget(self.path, 1)
        path_row.addWidget(self.choose)
        self.form = QFormLayout()
        self.form.addRow("File", path_row)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.hide()
        self.result = Banner()
        self.start = button(action, primary=True)
        self.start.clicked.connect(self.run)
        self.close_button = button("Close")
        self.close_button.clicked.connect(self.reject)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.close_button)
        buttons.addWidget(self.start)
        self.layout_ = QVBoxLayout(self)
        self.layout_.setContentsMargins(20, 16, 20, 16)
        self.layout_.setSpacing(10)
        self.layout_.addLayout(self.form)
        self.layout_.addWidget(self.progress)
        self.layout_.addWidget(self.result)
        self.layout_.addLayout(buttons)
        self.setMinimumWidth(500)
        grow_to_fit(self)

    def _choose(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        raise NotImplementedError

    def _working(self, text: str) -> None:
        self.start.setEnabled(False)
        self.progress.setRange(0, 0)
        self.progress.show()
        self.result.set(text, "info")

    def _progressed(self, done: int, total: int) -> None:
        if total > 0:
            self.progress.setRange(0, total)
            self.progress.setValue(min(done, total))

    def _failed(self, message: str) -> None:
        self.start.setEnabled(True)
        self.progress.hide()
        self.result.set(message, "error")

    def _succeeded(self, text: str, value: Any) -> None:
        self.progress.setRange(0, 1)
        self.progress.setValue(1)
        self.result.set(text, "ok")
        self.start.setEnabled(True)
        self.close_button.setDefault(True)
        self.finished_ok.emit(value)


class ExportDialog(_FileDialog):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(bridge, "Export your memory", "Export", parent)
        self.path.setText(str(Path.home() / f"personal-llm-export-{datetime.now():%Y-%m-%d}.jsonl"))
        self.encrypt = QCheckBox("Encrypt the file with a passphrase (recommended)")
        self.encrypt.setChecked(True)
        self.passphrase = QLineEdit()
        self.passphrase.setEchoMode(QLineEdit.EchoMode.Password)
        self.again = QLineEdit()
        self.again.setEchoMode(QLineEdit.EchoMode.Password)
        self.encrypt.toggled.connect(self.passphrase.setEnabled)
        self.encrypt.toggled.connect(self.again.setEnabled)
        self.form.addRow("", self.encrypt)
        self.hint = length_hint(bridge, self.passphrase)  # the rule of "Set a passphrase", as it is typed
        self.encrypt.toggled.connect(self.hint.setVisible)
        self.form.addRow("Passphrase", self.passphrase)
        self.form.addRow("", self.hint)
        self.form.addRow("Again", self.again)
        self.layout_.insertWidget(0, muted("Memories, documents and their passages, conversations, the knowledge "
                                           "graph and the activity log. Without encryption the file is plain text "
                                           "that anyone who gets it can read."))

    def _choose(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export to", self.path.text(), "JSON Lines (*.jsonl)")
        if path:
            self.path.setText(path)

    def run(self) -> None:
        path = self.path.text().strip()
        if not path:
            self.result.set("Choose where to write the export.", "error")
            return
        phrase = None
        if self.encrypt.isChecked():
            phrase = self.passphrase.text()
            if not phrase:
                self.result.set("Choose a passphrase for the file (or untick encryption).", "error")
                return
            if problem := self.bridge.passphrase_problem(phrase):
                self.result.set(problem, "error")
                return
            if phrase != self.again.text():
                self.result.set("The two passphrases differ.", "error")
                return
        self._working("Exporting…")
        self.bridge.export(path, phrase, self._done, self._failed, self._progressed)

    def _done(self, result: Any) -> None:
        self._succeeded(f"Exported {counts_text(result.counts)} to {result.path} ({size_text(result.bytes)}"
                        + (", encrypted)." if result.encrypted else ", not encrypted)."), result)


class ImportDialog(_FileDialog):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(bridge, "Import into your memory", "Import", parent)
        self.passphrase = QLineEdit()
        self.passphrase.setEchoMode(QLineEdit.EchoMode.Password)
        self.passphrase.setPlaceholderText("the passphrase the file was exported with")
        self.form.addRow("Passphrase", self.passphrase)
        self.note = muted("A Personal LLM export, or a JSON Lines file of memories from another tool "
                          '({"text": …, "kind": …, "at": …, "project": …} per line).')
        self.layout_.insertWidget(0, self.note)
        self.path.textChanged.connect(self._path_changed)
        self._path_changed("")

    def _path_changed(self, text: str) -> None:
        encrypted = bool(text.strip()) and Path(text.strip()).is_file() and self.bridge.is_encrypted_export(text.strip())
        self.passphrase.setEnabled(encrypted)

    def _choose(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import from", str(Path.home()),
                                              "Exports and JSON Lines (*.jsonl *.json *.enc);;All files (*)")
        if path:
            self.path.setText(path)

    def run(self) -> None:
        path = self.path.text().strip()
        if not path or not Path(path).is_file():
            self.result.set("Choose a file to import.", "error")
            return
        phrase = self.passphrase.text() if self.passphrase.isEnabled() else None
        if self.passphrase.isEnabled() and not phrase:
            self.result.set("This file is encrypted: type the passphrase it was exported with.", "error")
            return
        self._working("Importing…")
        self.bridge.import_file(path, phrase, self._done, self._failed, self._progressed)

    def _done(self, result: Any) -> None:
        skipped = sum(result.skipped.values())
        self._succeeded(f"Added {counts_text(result.added)}"
                        + (f"; {skipped:,} already here were skipped." if skipped else "."), result)


# ----------------------------------------------------------------------------------------------------
# the HTTP API and MCP
# ----------------------------------------------------------------------------------------------------
class ApiBox(QGroupBox):
    def __init__(self, sections: SettingsSections) -> None:
        super().__init__("Other programs (HTTP API and MCP)")
        self.sections = sections
        bridge = sections.bridge
        self.server = ApiServer(self)
        self.server.started.connect(self._started)
        self.server.stopped.connect(self._stopped)
        self.server.failed.connect(self._failed)
        bridge.closed.connect(self.server.stop)

        self.enabled = QCheckBox("Serve the HTTP API on this computer (127.0.0.1) while the app runs")
        self.enabled.toggled.connect(self._toggled)
        self.state = Banner()
        self.token = QLineEdit()
        self.token.setReadOnly(True)
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText("…")
        self.show_token = QCheckBox("Show")
        self.show_token.toggled.connect(lambda on: self.token.setEchoMode(
            QLineEdit.EchoMode.Normal if on else QLineEdit.EchoMode.Password))
        self.copy_token = button("Copy")
        self.copy_token.setToolTip("Copy the token (requests send it as 'Authorization: Bearer <token>')")
        self.copy_token.clicked.connect(self._copy_token)
        token_row = QHBoxLayout()
        token_row.addWidget(self.token, 1)
        token_row.addWidget(self.show_token)
        token_row.addWidget(self.copy_token)
        self.mcp = QPlainTextEdit()
        self.mcp.setReadOnly(True)
        self.mcp.setMaximumHeight(150)
        self.mcp.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.mcp.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.copy_mcp = button("Copy")
        self.copy_mcp.setToolTip("Copy the MCP server entry for an assistant's configuration")
        self.copy_mcp.clicked.connect(lambda: (copy_to_clipboard(self.mcp.toPlainText()),
                                               self.feedback.setText("MCP entry copied.")))
        mcp_row = QHBoxLayout()
        mcp_row.addWidget(self.mcp, 1)
        mcp_row.addWidget(self.copy_mcp, 0, Qt.AlignmentFlag.AlignTop)
        self.feedback = Note()
        form = QFormLayout()
        form.addRow("API token", token_row)
        form.addRow("MCP", mcp_row)
        layout = QVBoxLayout(self)
        layout.addWidget(self.enabled)
        layout.addWidget(self.state)
        layout.addLayout(form)
        layout.addWidget(muted("Paste the MCP entry into an assistant's configuration (Claude Desktop: "
                               "claude_desktop_config.json; other clients use the same mcpServers entry). The "
                               "assistant starts that server itself; it needs neither the HTTP API nor the token. "
                               "See docs/mcp.md."))
        layout.addWidget(self.feedback)
        self._port = 8765
        self._loading = False

    def load(self, info: EngineInfo) -> None:
        self._port = info.settings.api_port
        self.sections.bridge.api_token(self.token.setText)
        self.mcp.setPlainText(self.mcp_config(info.home))
        self._loading = True
        self.enabled.setChecked(info.settings.api_enabled)
        self._loading = False
        if info.settings.api_enabled and not self.server.running:
            self._start()
        elif not info.settings.api_enabled:
            self.state.set("Off. Programs that speak HTTP (scripts, browser extensions) can use your memory "
                           "while it is on; each request needs the token.", "info")

    def mcp_config(self, home: Path) -> str:
        command, args = self.sections.bridge.mcp_command()
        entry: dict[str, Any] = {"command": command, "args": args}
        entry["env"] = {"PERSONAL_LLM_HOME": str(home)}
        return json.dumps({"mcpServers": {"personal-memory": entry}}, indent=2)

    def _toggled(self, on: bool) -> None:
        if self._loading:
            return
        self.sections.save(lambda s: setattr(s, "api_enabled", on))
        if on:
            self._start()
        else:
            self.server.stop()

    def _start(self) -> None:
        bridge = self.sections.bridge
        self.state.set("Starting…", "info")
        self.server.start(bridge.serve_command(self._port), bridge.serve_env())

    def _started(self, url: str) -> None:
        self.state.set(f"Running at {url}/docs (requests need the token below).", "ok")

    def _stopped(self) -> None:
        if not self.enabled.isChecked():
            self.state.set("Off.", "info")

    def _failed(self, message: str) -> None:
        self.state.set(message, "error")

    def _copy_token(self) -> None:
        copy_to_clipboard(self.token.text())
        self.feedback.setText("Token copied.")


# ----------------------------------------------------------------------------------------------------
# backups
# ----------------------------------------------------------------------------------------------------
class BackupScheduler(QObject):
    """Takes the scheduled snapshot when it is due, while the app runs (checked every half hour)."""

    backed_up = Signal(object)

    def __init__(self, bridge: Bridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.running = False
        self.timer = QTimer(self)
        self.timer.setInterval(CHECK_EVERY_MS)
        self.timer.timeout.connect(self.check)
        bridge.opened.connect(self._opened)
        bridge.closed.connect(self.timer.stop)

    def _opened(self, info: EngineInfo) -> None:
        if info.connection is not None:  # a server's backups are its operator's
            self.timer.stop()
            return
        self.timer.start()
        QTimer.singleShot(FIRST_CHECK_MS, self.check)

    def check(self) -> None:
        if self.running or self.bridge.paused or self.bridge.info is None or self.bridge.connection is not None:
            return
        self.bridge.backup_status(self._checked)

    def _checked(self, status: Any) -> None:
        if status.due and not self.running:
            self.run()

    def run(self, progress: Callable[[int, int], None] | None = None, failed: Callable[[str], None] | None = None,
            done: Callable[[Any], None] | None = None) -> None:
        self.running = True

        def finished(snapshot: Any) -> None:
            self.running = False
            self.backed_up.emit(snapshot)
            if done is not None:
                done(snapshot)

        def not_done(message: str) -> None:
            self.running = False
            if failed is not None:
                failed(message)

        self.bridge.backup_now(finished, not_done, progress)


class BackupBox(QGroupBox):
    def __init__(self, sections: SettingsSections) -> None:
        super().__init__("Backups")
        self.sections = sections
        bridge = sections.bridge
        self.scheduler = BackupScheduler(bridge, self)
        self.scheduler.backed_up.connect(lambda _s: self.refresh())
        self.folder = QLabel("…")
        self.folder.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.folder.setWordWrap(True)  # a long path takes a second line instead of widening the page
        self.folder.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # a long path is cut
        self.folder_note = Note()
        self.choose = button("Choose…")
        self.choose.setToolTip("Another disk or a synced folder keeps your memory safe from this disk failing")
        self.choose.clicked.connect(lambda: self.choose_folder())  # not clicked(bool) as the path
        self.open_folder = button("Open")
        self.open_folder.clicked.connect(self._open_folder)
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.folder, 1)
        folder_row.addWidget(self.choose)
        folder_row.addWidget(self.open_folder)
        self.schedule = QComboBox()
        for label, value in SCHEDULES:
            self.schedule.addItem(label, value)
        self.schedule.currentIndexChanged.connect(self._schedule_changed)
        self.last = QLabel("…")
        self.last.setWordWrap(True)
        self.warning = Banner()
        self.now_button = button("Back up now")
        self.now_button.clicked.connect(self.back_up_now)
        self.restore_button = button("Restore…")
        self.restore_button.clicked.connect(self.open_restore)
        self.progress = QProgressBar()
        self.progress.hide()
        actions = QHBoxLayout()
        actions.addWidget(self.progress, 1)
        actions.addStretch(0)
        actions.addWidget(self.restore_button)
        actions.addWidget(self.now_button)
        schedule_row = QHBoxLayout()
        schedule_row.addWidget(self.schedule)
        schedule_row.addStretch(1)
        form = QFormLayout()
        form.addRow("Folder", folder_row)
        form.addRow("Schedule", schedule_row)
        form.addRow("Last backup", self.last)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.folder_note)
        layout.addWidget(self.warning)
        layout.addLayout(actions)
        layout.addWidget(muted("Snapshots are encrypted with your memory's key (the recovery key opens them on "
                               "another computer). Kept: one a day for a week, then one a week for four weeks."))
        self._status: Any = None
        self._loading = False
        self.dialog: QDialog | None = None
        self.clock: Callable[[], float] = time.time
        self.ager = QTimer(self)  # "(5 minutes ago)" keeps counting while the page is open
        self.ager.setInterval(30_000)
        self.ager.timeout.connect(self._age)
        self.ager.start()

    def _age(self) -> None:
        if self._status is not None:
            self.show_status(self._status)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override: the age is current when looked at
        super().showEvent(event)
        self._age()

    def load(self, info: EngineInfo) -> None:
        self._loading = True
        self.schedule.setCurrentIndex(max(self.schedule.findData(info.settings.backup.schedule), 0))
        self._loading = False
        self.refresh()

    def refresh(self) -> None:
        self.sections.bridge.backup_status(self.show_status)

    def show_status(self, status: Any) -> None:
        self._status = status
        self.folder.setText(str(status.folder))
        self.folder.setToolTip(str(status.folder))
        self.folder_note.setText("The folder is set by $PERSONAL_LLM_BACKUP_DIR." if status.from_env else "")
        self.choose.setEnabled(not status.from_env)
        if status.last is None:
            self.last.setText("None yet.")
        else:
            self.last.setText(f"{formatting.when(local_iso(status.last.at))} ({ago(status.last.at, self.clock())}), "
                              f"{size_text(status.last.bytes)}; {formatting.plural(status.count, 'snapshot')} kept.")
        if status.last is None:
            self.warning.set("There is no backup of your memory yet. Back up now, or leave the app running: it "
                             "takes the scheduled one by itself." if status.schedule != "off"
                             else "There is no backup of your memory yet.", "warn")
        elif status.old:
            self.warning.set(f"Your last backup is {ago(status.last.at, self.clock())}: what you stored since is not in any "
                             "backup. Back up now.", "warn")
        else:
            self.warning.set("", "info")
        self.restore_button.setEnabled(status.count > 0)

    def choose_folder(self, path: str | None = None) -> None:
        if path is None:
            start = str(self._status.folder) if self._status is not None else str(Path.home())
            path = QFileDialog.getExistingDirectory(self, "Keep backups in", start)
        if not path:
            return

        def change(s: Any) -> None:
            s.backup.folder = path

        self.sections.save(change, lambda _s: self.refresh())

    def _open_folder(self) -> None:
        if self._status is not None and Path(self._status.folder).is_dir():
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(self._status.folder)))

    def _schedule_changed(self, _index: int) -> None:
        if self._loading:
            return
        value = self.schedule.currentData()

        def change(s: Any) -> None:
            s.backup.schedule = value

        self.sections.save(change, lambda _s: self.refresh())

    def back_up_now(self) -> None:
        if self.scheduler.running:
            return
        self.now_button.setEnabled(False)
        self.progress.setRange(0, 0)
        self.progress.show()
        self.warning.set("Backing up…", "info")

        def progressed(done: int, total: int) -> None:
            self.progress.setRange(0, max(total, 1))
            self.progress.setValue(done)

        def done(snapshot: Any) -> None:
            self.now_button.setEnabled(True)
            self.progress.hide()
            self.refresh()

        def failed(message: str) -> None:
            self.now_button.setEnabled(True)
            self.progress.hide()
            self.warning.set(message, "error")

        self.scheduler.run(progressed, failed, done)

    def open_restore(self) -> RestoreDialog:
        self.dialog = RestoreDialog(self.sections.bridge, self.window())
        self.dialog.restored.connect(lambda _r: self.refresh())
        self.dialog.show()
        return self.dialog


class RestoreDialog(QDialog):
    """Choose a snapshot; it replaces the store after it was verified (the current store is kept aside)."""

    restored = Signal(object)

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.setWindowTitle("Restore a backup")
        self.list = QListWidget()
        self.message = Banner()
        self.restore_button = button("Restore", primary=True)
        self.restore_button.setEnabled(False)
        self.restore_button.clicked.connect(lambda: self.restore())  # asks first (not clicked(bool))
        cancel = button("Close")
        cancel.clicked.connect(self.reject)
        self.list.currentItemChanged.connect(lambda item, _p: self.restore_button.setEnabled(item is not None))
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(cancel)
        buttons.addWidget(self.restore_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 16)
        layout.addWidget(muted("Your memory goes back to the moment of the snapshot. The current store is kept "
                               "beside it (memory.db.before-restore-…) for a week so the restore can be undone, "
                               "then deleted; forgetting anything deletes it sooner, as it still holds what you "
                               "forget."))
        layout.addWidget(self.list, 1)
        layout.addWidget(self.message)
        layout.addLayout(buttons)
        self.setMinimumSize(460, 320)
        grow_to_fit(self)
        bridge.snapshots(self._listed)

    def _listed(self, snaps: list[Any]) -> None:
        self.list.clear()
        for s in snaps:
            item = QListWidgetItem(f"{formatting.when(local_iso(s.at))} · {ago(s.at)} · {size_text(s.bytes)}")
            item.setData(Qt.ItemDataRole.UserRole, s.name)
            self.list.addItem(item)
        if not snaps:
            self.message.set("There are no snapshots in the backup folder.", "info")

    def restore(self, confirm: bool = True) -> None:
        item = self.list.currentItem()
        if item is None:
            return
        if confirm and QMessageBox.question(
                self, "Restore this backup?",
                "Everything stored after this snapshot will not be in your memory (the current store is kept "
                "aside). Restore it?") != QMessageBox.StandardButton.Yes:
            return
        self.restore_button.setEnabled(False)
        self.message.set("Restoring…", "info")
        self.bridge.restore_snapshot(item.data(Qt.ItemDataRole.UserRole), self._done, self._failed)

    def _done(self, result: Any) -> None:
        _snap, _aside, note = result
        self.message.set("Restored." + (f" {note}" if note else ""), "ok")
        self.restored.emit(result)

    def _failed(self, message: str) -> None:
        self.restore_button.setEnabled(True)
        self.message.set(message, "error")


# ----------------------------------------------------------------------------------------------------
# recovery
# ----------------------------------------------------------------------------------------------------
class RecoveryBox(QGroupBox):
    def __init__(self, sections: SettingsSections) -> None:
        super().__init__("Recovery")
        self.sections = sections
        self.reminder = Banner()
        self.show_key = button("Show recovery key…")
        self.show_key.clicked.connect(self.reveal)
        self.passphrase = button("Set a passphrase…")
        self.passphrase.clicked.connect(self.open_passphrase)
        self.feedback = Note()
        row = QHBoxLayout()
        row.addWidget(muted("The recovery key opens your memory on any computer if this one or its keychain is "
                            "lost."), 1)
        row.addWidget(self.show_key)
        row.addWidget(self.passphrase)
        layout = QVBoxLayout(self)
        layout.addWidget(self.reminder)
        layout.addLayout(row)
        layout.addWidget(self.feedback)
        self._has_passphrase = False
        self._confirmed = True
        self.dialog: QDialog | None = None

    def load(self, info: EngineInfo) -> None:
        self._confirmed = info.settings.recovery_confirmed
        self.reminder.set("" if self._confirmed else
                          "Keep your recovery key somewhere safe: without it, losing this computer's keychain "
                          "means losing your memory. Show it, then confirm you kept it.", "warn")
        self.sections.bridge.has_passphrase(self._passphrase_known)

    def _passphrase_known(self, has: bool) -> None:
        self._has_passphrase = has
        self.passphrase.setText("Change passphrase…" if has else "Set a passphrase…")

    def reveal(self) -> None:
        """Re-authenticate (the passphrase, where there is one), then show the key."""
        if self._has_passphrase:
            self.dialog = ReauthDialog(self.sections.bridge, self.window())
            self.dialog.accepted.connect(self._fetch)
            self.dialog.show()
        else:
            box = QMessageBox(QMessageBox.Icon.Question, "Show your recovery key?",
                              "Make sure no one else can see your screen. This computer's keychain, unlocked "
                              "when you logged in, is what lets Personal LLM show it.",
                              QMessageBox.StandardButton.Cancel, self.window())
            show = box.addButton("Show", QMessageBox.ButtonRole.AcceptRole)
            box.buttonClicked.connect(lambda clicked: self._fetch() if clicked is show else None)
            self.dialog = box
            box.open()

    def _fetch(self) -> None:
        self.sections.bridge.show_recovery_key(self._show, lambda m: self.feedback.setText(m))

    def _show(self, result: tuple[str, bool]) -> None:
        key, _new = result
        dialog = RecoveryKeyDialog(key, first_run=not self._confirmed, parent=self.window())
        dialog.confirmed.connect(self.confirm_kept)
        self.dialog = dialog
        dialog.show()

    def confirm_kept(self) -> None:
        self._confirmed = True
        self.reminder.set("", "info")
        self.sections.save(lambda s: setattr(s, "recovery_confirmed", True))

    def open_passphrase(self) -> PassphraseDialog:
        dialog = PassphraseDialog(self.sections.bridge, self._has_passphrase, self.window())
        dialog.accepted.connect(lambda: (self.feedback.setText("Passphrase saved."),
                                         self.sections.bridge.has_passphrase(self._passphrase_known)))
        self.dialog = dialog
        dialog.show()
        return dialog
