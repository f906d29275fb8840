"""Settings: language model (with a connection test), capture shortcut, data location, encryption, maintenance;
then the sections of desktop/settings_sections.py (appearance, recovery, backups, export/import, API/MCP)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QKeySequenceEdit,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from . import autostart
from .bridge import Bridge, EngineInfo
from .folders_view import FoldersBox
from .hotkey import HotkeyStatus
from .settings_sections import SettingsSections
from .widgets import Banner, button, muted, page_title, scroller

PROVIDERS = (("Ollama (local)", "ollama"), ("OpenAI-compatible server", "openai"), ("None — sources only", "none"))
# The embedding model: the bundled one, words only, or a typed path to a sentence-transformers folder.
EMBEDDING_MODELS = (("all-MiniLM-L6-v2 (bundled, English)", "all-MiniLM-L6-v2"), ("None — match words only", "none"))


WINDOW_SHORTCUTS = {f"Ctrl+{i}" for i in range(1, 6)} | {"Ctrl+N", "Ctrl+K", "Ctrl+F", "Ctrl+Q", "Ctrl+W", "Ctrl+S"}


class ShortcutRecorder(QKeySequenceEdit):
    """Records one global shortcut. Esc gives the old one back; a combination without a modifier, or one the
    window uses itself (Ctrl+1…5 switch pages), is refused with a reason in `problem` — never recorded."""

    problem = Signal(str)  # "" when the recorded shortcut is fine

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMaximumSequenceLength(1)
        self.setClearButtonEnabled(True)
        self._accepted = QKeySequence()

    def set_shortcut(self, text: str) -> None:
        self._accepted = QKeySequence(text)
        self.setKeySequence(self._accepted)

    def shortcut(self) -> str:
        return self._accepted.toString(QKeySequence.SequenceFormat.PortableText)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        key = event.key()
        if key == Qt.Key.Key_Escape and not event.modifiers():
            self.setKeySequence(self._accepted)  # cancel: keep the old shortcut
            self.problem.emit("")
            self.clearFocus()
            return
        if key in (Qt.Key.Key_Control, Qt.Key.Key_Shift, Qt.Key.Key_Alt, Qt.Key.Key_Meta):
            super().keyPressEvent(event)  # a modifier on its own: recording goes on
            return
        combo = QKeySequence(event.keyCombination()).toString(QKeySequence.SequenceFormat.PortableText)
        reason = shortcut_problem(combo)
        if reason:
            self.setKeySequence(self._accepted)
            self.problem.emit(reason)
            return
        super().keyPressEvent(event)
        self._accepted = self.keySequence()
        self.problem.emit("")


def shortcut_problem(text: str) -> str:
    """Why this cannot be the global capture shortcut, or ''."""
    from .hotkey import Combo

    if text in WINDOW_SHORTCUTS:
        return f"{text} is used inside this window; choose another shortcut (the old one is kept)."
    try:
        Combo.parse(text)
    except ValueError as e:
        return f"{text or 'That'} cannot be a global shortcut: {e} (the old one is kept)."
    return ""


class SettingsView(QWidget):
    hotkey_changed = Signal(str)
    saved = Signal(object)  # Settings
    status_posted = Signal(str)  # what became of changes saved when the page was left

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge

        # --- language model
        self.provider = QComboBox()
        for label, value in PROVIDERS:
            self.provider.addItem(label, value)
        self.host = QLineEdit()
        self.provider.currentIndexChanged.connect(lambda _i: self._show_default_host())
        self._show_default_host()
        self.model = QComboBox()
        self.model.setEditable(True)
        self.test_button = button("Test connection")
        self.test_button.clicked.connect(self.test_connection)
        self.test_result = Banner()
        llm = QGroupBox("Language model")
        lf = QFormLayout(llm)
        lf.addRow("Provider", self.provider)
        lf.addRow("Server", self.host)
        lf.addRow("Model", self.model)
        test_row = QHBoxLayout()
        test_row.addWidget(self.test_button)
        test_row.addStretch(1)
        lf.addRow("", test_row)
        lf.addRow("", self.test_result)

        # --- capture shortcut
        self.hotkey = ShortcutRecorder()
        self.hotkey.setToolTip("Click, then press the combination (Esc keeps the current one)")
        self.hotkey_status = Banner()
        self.hotkey_problem = Banner(tone="error")
        self.hotkey.problem.connect(lambda reason: self.hotkey_problem.set(reason, "error"))
        capture = QGroupBox("Quick capture")
        cf = QFormLayout(capture)
        cf.addRow("Global shortcut", self.hotkey)
        cf.addRow("", self.hotkey_problem)
        cf.addRow("", self.hotkey_status)
        self.autostart = QCheckBox("Start Personal LLM in the tray when I log in")
        cf.addRow("", self.autostart)

        # --- data and security
        self.location = QLabel("…")
        self.location.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.location.setWordWrap(True)
        self.open_folder = button("Open folder")
        self.open_folder.clicked.connect(self._open_folder)
        self.encryption = QLabel("…")
        self.encryption.setWordWrap(True)
        self.encryption.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.key_warning = Banner(tone="warn")
        self.embedding_model = QComboBox()
        self.embedding_model.setEditable(True)  # or a folder with a sentence-transformers model
        for label, value in EMBEDDING_MODELS:
            self.embedding_model.addItem(label, value)
        self.embedding_model.setToolTip("The bundled model, none, or the folder of a sentence-transformers model. "
                                        "A change re-embeds everything in the background.")
        self.embedding = QLabel("…")
        self.embedding.setWordWrap(True)
        self._embedding_poll = QTimer(self)  # re-embedding progress while this page is shown
        self._embedding_poll.setInterval(2000)
        self._embedding_poll.timeout.connect(self._poll_embedding)
        self.logs = QLabel("…")
        self.logs.setWordWrap(True)
        self.logs.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        data = QGroupBox("Your data")
        df = QFormLayout(data)
        loc_row = QHBoxLayout()
        loc_row.addWidget(self.location, 1)
        loc_row.addWidget(self.open_folder)
        df.addRow("Location", loc_row)
        df.addRow("Encryption", self.encryption)
        df.addRow("", self.key_warning)
        df.addRow("Search model", self.embedding_model)
        df.addRow("", self.embedding)
        df.addRow("Logs", self.logs)

        self.tidy_button = button("Tidy up now")
        self.tidy_button.setToolTip("Fade unused memories, archive stale ones, roll events up into facts and "
                                    "look for facts that disagree (also runs by itself every few hours)")
        self.tidy_button.clicked.connect(self.tidy_up)
        self.tidy_result = muted("Runs by itself every few hours while the app is open.")
        maintenance = QGroupBox("Maintenance")
        mf = QHBoxLayout(maintenance)
        mf.addWidget(self.tidy_result, 1)
        mf.addWidget(self.tidy_button)

        self.save_button = button("Save settings", primary=True, shortcut="Ctrl+S")
        self.save_button.clicked.connect(self.save)
        self.feedback = muted("")
        bottom = QHBoxLayout()
        bottom.addStretch(1)
        bottom.addWidget(self.feedback)
        bottom.addWidget(self.save_button)

        body = QWidget()
        bl = QVBoxLayout(body)
        bl.setContentsMargins(20, 16, 20, 12)
        bl.setSpacing(14)
        bl.addWidget(page_title("Settings"))
        self.folders = FoldersBox(bridge)
        self.sections = SettingsSections(bridge, self._synced, self)  # appearance, recovery, backups, …
        self.llm_box, self.data_box, self.maintenance_box = llm, data, maintenance
        for box in (self.sections.server, llm, capture, data, self.folders, maintenance, *self.sections.boxes):
            bl.addWidget(box)
        bl.addLayout(bottom)
        bl.addStretch(1)
        scroll = scroller(body)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)

        self._settings: Any = None  # the settings as saved, that the fields show unless the user changed them
        self._autostart_shown = False
        bridge.opened.connect(self.load)
        bridge.settings_changed.connect(self.follow)  # saved by another page, or in the file by another program
        bridge.model_state_changed.connect(self.set_model_state)
        self.setEnabled(False)

    # ------------------------------------------------------------------------------------------------
    def load(self, info: EngineInfo) -> None:
        self.setEnabled(True)
        local = info.connection is None  # on a server, search and answers are the server's
        for box in (self.llm_box, self.data_box, self.maintenance_box):
            box.setVisible(local)  # watched folders say themselves why a profile on a server has none
        s = info.settings
        self._settings = s
        self._show(s, FIELDS)
        self.hotkey_problem.set("")
        self._embedding_poll.start()
        self._autostart_shown = autostart.is_enabled()
        self.autostart.setChecked(self._autostart_shown)
        self.location.setText(str(info.store))
        if info.key_source == "keychain" and info.key_backend_secure:
            self.encryption.setText(f"Encrypted (SQLCipher, AES-256). The key is kept in {info.key_backend}.")
            self.key_warning.set("")
        elif info.key_source == "keychain":
            self.encryption.setText(f"Encrypted (SQLCipher, AES-256). The key is kept in {info.key_backend}.")
            self.key_warning.set(
                f"That is not a system keychain: anyone who can read {info.key_backend.split(' (')[0]} on this "
                "computer can open your memory. Install and unlock a keychain (GNOME Keyring, KWallet, the macOS "
                "Keychain or Windows Credential Manager), or make your memory open with a passphrase instead: quit "
                "the app and run `personal-llm unlock --recovery-key YOUR-RECOVERY-KEY --new-passphrase`.", "warn")
        else:
            self.key_warning.set("")
            self.encryption.setText("Encrypted (SQLCipher, AES-256) with your passphrase. No keychain was available, "
                                    "so you are asked for it when the app starts.")
        self.logs.setText(f"{info.log_dir} (never contains what you stored)")

    def _show_default_host(self) -> None:
        """What an empty Server field means: $OLLAMA_HOST when it is set, else the provider's default."""
        provider = self.provider.currentData()
        env = os.environ.get("OLLAMA_HOST", "").strip()
        if provider == "ollama" and env:
            self.host.setPlaceholderText(f"{env} (from OLLAMA_HOST)")
        elif provider == "openai":
            self.host.setPlaceholderText("http://127.0.0.1:8080 (default)")
        else:
            self.host.setPlaceholderText("http://127.0.0.1:11434 (default)")

    def _show(self, s: Any, keys: Iterable[str]) -> None:
        """Put these saved settings into their fields."""
        keys = set(keys)
        if "llm.provider" in keys:
            self.provider.setCurrentIndex(max(self.provider.findData(s.llm.provider), 0))
        if "llm.host" in keys:
            self.host.setText(s.llm.host or "")
            self._show_default_host()
        if "llm.model" in keys:
            self.model.setCurrentText(s.llm.model)
        if "hotkey" in keys:
            self.hotkey.set_shortcut(s.hotkey)
        if "embedding_model" in keys:
            known = self.embedding_model.findData(s.embedding_model)
            if known >= 0:
                self.embedding_model.setCurrentIndex(known)
            else:
                self.embedding_model.setEditText(s.embedding_model)

    def _page_values(self) -> dict[str, Any]:
        """What the fields say, by setting name (an empty model or shortcut field keeps the saved one)."""
        s = self._settings
        typed = self.embedding_model.currentText().strip()
        known = self.embedding_model.findText(typed)
        return {"llm.provider": self.provider.currentData(), "llm.host": self.host.text().strip() or None,
                "llm.model": self.model.currentText().strip() or s.llm.model,
                "hotkey": self.hotkey.shortcut() or s.hotkey,
                "embedding_model": self.embedding_model.itemData(known) if known >= 0 else (typed or s.embedding_model)}

    def page_changes(self) -> dict[str, Any]:
        """What the user changed on this page, as dotted setting names: all that its Save writes."""
        if self._settings is None:
            return {}
        saved = saved_values(self._settings)
        changes = {k: v for k, v in self._page_values().items() if v != saved[k]}
        if self.autostart.isChecked() != self._autostart_shown:
            changes["autostart"] = self.autostart.isChecked()
        return changes

    def follow(self, settings: Any) -> None:
        """The settings as saved now (by another page, or in settings.json by the CLI or an editor): the fields
        show them, except those the user has changed here and not saved yet."""
        if self._settings is None:
            return
        edited = self.page_changes()
        before, after = saved_values(self._settings), saved_values(settings)
        self._settings = settings
        moved = [k for k in FIELDS if after[k] != before[k] and k not in edited]
        self._show(settings, moved)
        if "hotkey" in moved:
            self.hotkey_changed.emit(settings.hotkey)

    def _synced(self, settings: Any) -> None:
        """A section saved a change (Bridge.settings_changed brings it too)."""
        self.follow(settings)

    def set_model_state(self, state: str, detail: str) -> None:
        self.embedding.setText(detail)

    def _poll_embedding(self) -> None:
        if self.isVisible():
            self.bridge.embedding_status(lambda status: self.set_model_state(*status))

    def set_hotkey_status(self, status: HotkeyStatus) -> None:
        tone = {"active": "ok", "clash": "error", "invalid": "error", "waiting": "info"}.get(status.state, "warn")
        self.hotkey_status.set(status.message, tone)

    def current_settings(self) -> Any:
        """The saved settings with what this page shows: what Test connection tries."""
        if self._settings is None:
            return None
        s = self._settings.model_copy(deep=True)
        values = self._page_values()
        s.llm.provider, s.llm.host, s.llm.model = values["llm.provider"], values["llm.host"], values["llm.model"]
        s.hotkey, s.embedding_model = values["hotkey"], values["embedding_model"]
        s.autostart = self.autostart.isChecked()
        return s

    def tidy_up(self) -> None:
        self.tidy_button.setEnabled(False)
        self.tidy_result.setText("Tidying up…")

        def done(report: Any) -> None:
            self.tidy_button.setEnabled(True)
            self.tidy_result.setText(describe_consolidation(report))

        def failed(message: str) -> None:
            self.tidy_button.setEnabled(True)
            self.tidy_result.setText(message)

        self.bridge.consolidate(done, failed)

    def test_connection(self) -> None:
        s = self.current_settings()
        if s is None:
            return
        self.test_button.setEnabled(False)
        self.test_result.set("Checking…", "info")
        self.bridge.test_connection(s.llm, self._tested)

    def save_pending(self) -> bool:
        """Save what was changed on this page and not saved yet, as the page is left or the app quits: a new
        shortcut or model is kept, never thrown away (as an edited memory is). False when nothing was changed."""
        if self._settings is None or not self.page_changes():
            return False
        self.save(leaving=True)
        return True

    def save(self, *, leaving: bool = False) -> None:
        """Save what the user changed on this page, and only that: every other setting stays as it is in
        settings.json (changed meanwhile by another page, the CLI or an editor, it is kept). `leaving`: the
        page is no longer shown, so the status bar says what became of the changes too."""
        if self._settings is None:
            return
        changes = self.page_changes()
        old_hotkey = self._settings.hotkey
        self.hotkey_problem.set("")  # what was refused was never recorded; the saved shortcut is valid
        if "autostart" in changes and changes["autostart"] != autostart.is_enabled():
            try:
                autostart.set_enabled(changes["autostart"])
            except OSError as e:
                self.test_result.set(f"Could not change start at login: {e.strerror or e}", "error")
                changes.pop("autostart")
                self.autostart.setChecked(autostart.is_enabled())
        self._autostart_shown = self.autostart.isChecked()
        if not changes:
            self.feedback.setText("Nothing to save ✓")
            return
        self.feedback.setText("Saving…")

        def done(saved: Any) -> None:
            self.follow(saved)
            self.feedback.setText("Saved ✓")
            self.saved.emit(saved)
            self.bridge.embedding_status(lambda status: self.set_model_state(*status))  # a new model's state
            if saved.hotkey != old_hotkey:
                self.hotkey_changed.emit(saved.hotkey)
            if leaving:
                self.status_posted.emit("Your changes to the settings were saved.")

        def failed(message: str) -> None:
            self.feedback.setText("")
            self.test_result.set(message, "error")
            if leaving:
                self.status_posted.emit(f"Your changes to the settings were not saved: {message}")

        self.bridge.update_settings(changes, done, failed)

    # ------------------------------------------------------------------------------------------------
    def _tested(self, health: Any) -> None:
        self.test_button.setEnabled(True)
        models = list(getattr(health, "models", ()) or ())
        if models:
            current = self.model.currentText()
            self.model.clear()
            self.model.addItems(models)
            self.model.setCurrentText(current)
        if health.ok:
            self.test_result.set(f"✓ {health.detail}", "ok")
        else:
            self.test_result.set(health.detail, "error")

    def _open_folder(self) -> None:
        if self.bridge.info is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.bridge.info.home)))


FIELDS = ("llm.provider", "llm.host", "llm.model", "hotkey", "embedding_model")  # the settings this page shows


def saved_values(s: Any) -> dict[str, Any]:
    return {"llm.provider": s.llm.provider, "llm.host": s.llm.host, "llm.model": s.llm.model, "hotkey": s.hotkey,
            "embedding_model": s.embedding_model}


def describe_consolidation(report: Any) -> str:
    if report is None or getattr(report, "cancelled", False):
        return "Stopped."
    parts = []
    if report.archived:
        parts.append(f"{len(report.archived)} archived")
    if report.decayed:
        parts.append(f"{report.decayed} faded")
    if report.conflicts:
        parts.append(f"{len(report.conflicts)} disagreement(s) to resolve in Memories → Conflicts")
    text = "Done: " + (", ".join(parts) if parts else "nothing needed tidying") + "."
    if report.waiting:
        text += " Some steps wait for a language model."
    return text
