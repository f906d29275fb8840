"""Dialogs about the store's secrets: open with the recovery key (when this computer's keychain lost the key,
or the passphrase is forgotten), change or set the passphrase, and re-authentication before a secret is shown.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QDialog, QFormLayout, QHBoxLayout, QLabel, QLineEdit, QVBoxLayout, QWidget

from .bridge import Bridge
from .widgets import Banner, button, grow_to_fit, muted


def _password_field(placeholder: str = "") -> QLineEdit:
    field = QLineEdit()
    field.setEchoMode(QLineEdit.EchoMode.Password)
    field.setPlaceholderText(placeholder)
    return field


def length_hint(bridge: Bridge, field: QLineEdit) -> QLabel:
    """A line under a new passphrase: the rule first, then how the typed one measures up."""
    hint = muted(PASSPHRASE_RULE)

    def typed(text: str) -> None:
        problem = bridge.passphrase_problem(text) if text else ""
        hint.setText(f"Too short: {len(text)} of at least {MIN_CHARS} characters." if problem else
                     "Long enough. A few unrelated words are stronger than one word with symbols." if text
                     else PASSPHRASE_RULE)

    field.textChanged.connect(typed)
    return hint


MIN_CHARS = 8  # the engine's rule (Bridge.passphrase_problem says why one is refused)
PASSPHRASE_RULE = f"At least {MIN_CHARS} characters; a few unrelated words are strong and easy to remember."


class OpenWithRecoveryDialog(QDialog):
    """Shown instead of a failure when the store's key cannot be found (a reset keychain, a new computer)
    or its passphrase is forgotten: the recovery key opens it and writes a new keychain entry — or, with
    no keychain here, protects it with a new passphrase. `opened` follows through the bridge."""

    unlocked = Signal(str)  # the engine's sentence about what was done
    quit_requested = Signal()

    def __init__(self, bridge: Bridge, reason: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.setWindowTitle("Open your memory")
        self.setModal(True)
        self.needs_passphrase = not bridge.keychain_available()
        title = QLabel("<b>Personal LLM cannot find the key to your memory on this computer.</b>")
        title.setWordWrap(True)
        self.reason = why = muted(reason)
        why.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.key = QLineEdit()
        self.key.setPlaceholderText("XXXX-XXXX-XXXX-XXXX-XXXX-XXXX-XXXX-XXXX")
        self.new_passphrase = _password_field("a new passphrase")
        self.again = _password_field("the same again")
        form = QFormLayout()
        form.addRow("Recovery key", self.key)
        if self.needs_passphrase:
            form.addRow(muted("There is no keychain on this computer, so choose a passphrase to open your memory "
                              "with from now on."))
            form.addRow("New passphrase", self.new_passphrase)
            form.addRow("", length_hint(bridge, self.new_passphrase))
            form.addRow("Again", self.again)
        self.error = Banner()
        self.open_button = button("Open with recovery key", primary=True)
        self.open_button.clicked.connect(self.submit)
        quit_button = button("Quit")
        quit_button.clicked.connect(self._quit)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(quit_button)
        buttons.addWidget(self.open_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 16)
        layout.setSpacing(10)
        layout.addWidget(title)
        layout.addWidget(why)
        layout.addWidget(muted("Your recovery key was shown when your memory was made (you may have printed or "
                               "saved it). It opens the store, and this computer keeps its key from then on."))
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addLayout(buttons)
        self.setMinimumWidth(480)
        grow_to_fit(self)

    def submit(self) -> None:
        key = self.key.text().strip()
        if not key:
            self.error.set("Type or paste your recovery key.", "error")
            return
        phrase = None
        if self.needs_passphrase:
            phrase = self.new_passphrase.text()
            if not phrase:
                self.error.set("Choose a passphrase.", "error")
                return
            if problem := self.bridge.passphrase_problem(phrase):
                self.error.set(problem, "error")
                return
            if phrase != self.again.text():
                self.error.set("The two passphrases differ.", "error")
                return
        self.open_button.setEnabled(False)
        self.error.set("Opening…", "info")
        self.bridge.unlock_with_recovery(key, phrase, self._done, self._failed)

    def _done(self, message: str) -> None:
        self.unlocked.emit(message)
        self.accept()

    def _failed(self, message: str) -> None:
        self.open_button.setEnabled(True)
        self.error.set(message, "error")

    def _quit(self) -> None:
        self.reject()
        self.quit_requested.emit()

    def reject(self) -> None:
        super().reject()


class PassphraseDialog(QDialog):
    """Set or change the passphrase: the current one first (when there is one), the new one twice."""

    def __init__(self, bridge: Bridge, has_passphrase: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.has_passphrase = has_passphrase
        self.setWindowTitle("Change passphrase" if has_passphrase else "Set a passphrase")
        self.current = _password_field()
        self.new = _password_field()
        self.again = _password_field()
        form = QFormLayout()
        if has_passphrase:
            form.addRow("Current passphrase", self.current)
        form.addRow("New passphrase", self.new)
        form.addRow("", length_hint(bridge, self.new))
        form.addRow("Again", self.again)
        self.message = Banner()
        self.ok = button("Change passphrase" if has_passphrase else "Set passphrase", primary=True)
        self.ok.clicked.connect(self.submit)
        cancel = button("Cancel")
        cancel.clicked.connect(self.reject)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(cancel)
        buttons.addWidget(self.ok)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 16)
        layout.addWidget(muted("The passphrase opens your memory where there is no keychain. The store is not "
                               "re-encrypted: its key is wrapped again, and the old passphrase stops working."
                               if has_passphrase else
                               "A passphrase is a second way to open your memory, besides this computer's "
                               "keychain and your recovery key."))
        layout.addLayout(form)
        layout.addWidget(self.message)
        layout.addLayout(buttons)
        self.setMinimumWidth(420)
        grow_to_fit(self)

    def submit(self) -> None:
        new = self.new.text()
        if not new:
            self.message.set("Choose a new passphrase.", "error")
            return
        if problem := self.bridge.passphrase_problem(new):
            self.message.set(problem, "error")
            return
        if new != self.again.text():
            self.message.set("The two new passphrases differ.", "error")
            return
        self.ok.setEnabled(False)
        self.message.set("Checking…", "info")
        if self.has_passphrase:
            self.bridge.check_passphrase(self.current.text(), self._checked)
        else:
            self._checked(True)

    def _checked(self, ok: bool) -> None:
        if not ok:
            self.ok.setEnabled(True)
            self.message.set("That is not the current passphrase; nothing was changed.", "error")
            return
        self.bridge.change_passphrase(self.new.text(), self._changed, self._failed)

    def _changed(self, message: str) -> None:
        self.message.set(message, "ok")
        self.accept()

    def _failed(self, message: str) -> None:
        self.ok.setEnabled(True)
        self.message.set(message, "error")


class ReauthDialog(QDialog):
    """The passphrase again before a secret (the recovery key) is shown."""

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.setWindowTitle("Confirm it is you")
        self.phrase = _password_field()
        self.message = Banner()
        self.ok = button("Show recovery key", primary=True)
        self.ok.clicked.connect(self.submit)
        cancel = button("Cancel")
        cancel.clicked.connect(self.reject)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(cancel)
        buttons.addWidget(self.ok)
        form = QFormLayout()
        form.addRow("Passphrase", self.phrase)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 16)
        layout.addWidget(muted("Type your passphrase to see the recovery key."))
        layout.addLayout(form)
        layout.addWidget(self.message)
        layout.addLayout(buttons)
        self.setMinimumWidth(380)
        grow_to_fit(self)

    def submit(self) -> None:
        self.ok.setEnabled(False)
        self.bridge.check_passphrase(self.phrase.text(), self._checked)

    def _checked(self, ok: bool) -> None:
        self.ok.setEnabled(True)
        if ok:
            self.accept()
        else:
            self.message.set("That passphrase does not open your memory.", "error")
