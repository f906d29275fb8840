"""First run: where the memory lives (this computer, or a server: `WhereDialog`); the card saying what works
and what is missing, in plain words, until the user dismisses it; and the recovery key, shown once, with
copy/save/print and a confirmation that it was kept."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from . import formatting
from .bridge import Bridge, EngineInfo

if TYPE_CHECKING:
    from .bridge import HealthReport
from .widgets import Banner, button, muted, scroller, usable_area

OK, MISSING, WAIT = "✓", "✗", "…"


def lines(info: EngineInfo, health: HealthReport | None) -> list[tuple[str, str]]:
    """(mark, sentence) pairs describing the setup."""
    out: list[tuple[str, str]] = []
    if info.connection is not None:
        c = info.connection
        out.append((OK if c.reachable is not False else MISSING,
                    f"Your memory is on your server at {c.url}" + (
                        "." if c.reachable is not False else f", which cannot be reached now: {c.detail}")))
    elif info.key_source != "keychain":
        out.append((OK, f"Your encrypted memory store is ready at {info.store} (opened with your passphrase)."))
    elif info.key_backend_secure:
        out.append((OK, f"Your encrypted memory store is ready at {info.store} (key in "
                         f"{info.key_backend or 'your system keychain'})."))
    else:
        out.append((MISSING, f"Your memory store at {info.store} is encrypted, but its key is in "
                             f"{info.key_backend}, not a system keychain: see Settings → Your data."))
    if health is None:
        out.append((WAIT, "Checking the search model and the language model…"))
        return out
    mark = {"ready": OK, "loading": WAIT}.get(health.embedding, MISSING)
    out.append((mark, health.embedding_detail))
    model = info.settings.llm.model
    if health.llm_ok:
        out.append((OK, f"{health.llm_detail} Ask gives written answers with sources."))
    elif info.settings.llm.provider == "ollama":
        out.append((MISSING, f"Ollama not running or not ready ({health.llm_detail.rstrip('.')}) — answers will "
                             "show sources only. Install it from https://ollama.com and run "
                             f"`ollama pull {model}`."))
    else:
        out.append((MISSING, f"{health.llm_detail} Answers will show sources only until a model is reachable."))
    return out


class FirstRunCard(QFrame):
    """The welcome card over every page. In a window shorter than FULL_FROM it is one line ('2 of 3 work;
    1 needs a look') with Details, so the page below keeps its room; the details are shown whole, never in a
    small scroll box (a window too short for them scrolls the page)."""

    dismissed = Signal()
    FULL_FROM = 820  # px of window height: the report is shown whole from here

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Card")
        self.title = QLabel()
        self.title.setWordWrap(True)
        self.body = QLabel()
        self.body.setWordWrap(True)
        self.body.setTextFormat(Qt.TextFormat.RichText)
        self.body.setOpenExternalLinks(True)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.details = button("Details")
        self.details.setCheckable(True)
        self.details.toggled.connect(lambda _on: self.fit_height(self._window_height))
        close = button("Got it")
        close.clicked.connect(self._dismiss)
        head = QHBoxLayout()
        head.addWidget(self.title, 1)
        head.addWidget(self.details, 0, Qt.AlignmentFlag.AlignTop)
        head.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(16, 12, 16, 12)
        layout.addLayout(head)
        layout.addWidget(self.body)
        self._lines: list[tuple[str, str]] = []
        self._window_height = 10_000
        self.was_dismissed = False
        self.hide()

    @property
    def compact(self) -> bool:
        return self.body.isHidden()

    def fit_height(self, window_height: int) -> None:
        """The whole report in a tall window or when Details is on; one line of summary otherwise."""
        self._window_height = window_height
        full = window_height >= self.FULL_FROM
        self.details.setVisible(not full)
        self.body.setVisible(full or self.details.isChecked())
        self.details.setText("Hide details" if self.details.isChecked() else "Details")
        self._set_title()
        self._hold_body()

    def _hold_body(self) -> None:
        """The report keeps the height its lines need at the card's width (the window's page layout does not
        ask labels for it, and would squeeze them): a short window scrolls the page instead."""
        margins = self.layout().contentsMargins()
        width = self.width() - margins.left() - margins.right()
        self.body.setMinimumHeight(self.body.heightForWidth(width) if self.body.isVisible() and width > 0 else 0)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        if event.oldSize().width() != event.size().width():
            self._hold_body()

    def _set_title(self) -> None:
        title = "<b>Welcome to Personal LLM</b> — "
        if not self.compact:
            self.title.setText(title + "here is what works on this computer:")
            return
        works = sum(mark == OK for mark, _ in self._lines)
        missing = sum(mark == MISSING for mark, _ in self._lines)
        summary = f"{works} of {len(self._lines)} things work here"
        if missing:
            summary += f"; {missing} need{'s' if missing == 1 else ''} a look"
        self.title.setText(title + summary + ".")

    def show_report(self, info: EngineInfo, health: HealthReport | None) -> None:
        rows = []
        self._lines = lines(info, health)
        for mark, sentence in self._lines:
            color = {"✓": "#10B981", "✗": "#DC2626"}.get(mark, "#9DA0AA")
            text = formatting.message_html(sentence)
            rows.append(f"<tr><td style='color:{color}; padding-right:8px'><b>{mark}</b></td><td>{text}</td></tr>")
        self.body.setText("<table cellspacing='4'>" + "".join(rows) + "</table>")
        self._set_title()
        self.show()

    def _dismiss(self) -> None:
        self.was_dismissed = True
        self.hide()
        self.dismissed.emit()


RECOVERY_NOTE = ("Keep it away from this computer: on paper, in a password manager, or printed. With it, your memory "
                 "opens on any computer if this one, or its keychain, is lost (“Open with recovery key”, or "
                 "<code>personal-llm unlock --recovery-key …</code>). Anyone who has it and a copy of your files can "
                 "read them.")


class RecoveryKeyDialog(QDialog):
    """The recovery key, shown once at first run (and on request in Settings): copy, save, print, and —
    at first run — a confirmation that it was kept before the dialog can be closed."""

    confirmed = Signal()

    def __init__(self, key: str, *, first_run: bool = True, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.key = key
        self.setWindowTitle("Your recovery key")
        self.setModal(False)  # the window stays usable; Settings → Recovery reminds until it is confirmed
        intro = QLabel("<b>Write down, save or print your recovery key.</b>" if first_run
                       else "<b>Your recovery key</b>")
        intro.setWordWrap(True)
        self.key_label = QLabel(key)
        self.key_label.setObjectName("RecoveryKey")
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        font.setPointSizeF(font.pointSizeF() * 1.35)
        self.key_label.setFont(font)
        self.key_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.key_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.key_label.setWordWrap(True)
        note = QLabel(RECOVERY_NOTE)
        note.setWordWrap(True)
        note.setTextFormat(Qt.TextFormat.RichText)
        self.copy_button = button("Copy")
        self.copy_button.clicked.connect(self.copy)
        self.save_button = button("Save to a file…")
        self.save_button.clicked.connect(lambda: self.save())  # not clicked(bool) as the path
        self.print_button = button("Print…")
        self.print_button.clicked.connect(self.print_key)
        actions = QHBoxLayout()
        actions.addWidget(self.copy_button)
        actions.addWidget(self.save_button)
        actions.addWidget(self.print_button)
        actions.addStretch(1)
        self.feedback = muted("")
        self.kept = QCheckBox("I have kept my recovery key somewhere safe")
        self.kept.setVisible(first_run)
        self.done_button = button("Done", primary=True)
        self.done_button.setEnabled(not first_run)
        self.kept.toggled.connect(self.done_button.setEnabled)
        self.done_button.clicked.connect(self._done)
        screen = (parent.screen() if parent is not None else None) or QGuiApplication.primaryScreen()
        area = usable_area(screen)
        narrow = area.width() < 560  # a small screen, or a large scale: Done goes under the checkbox
        bottom = QVBoxLayout() if narrow else QHBoxLayout()
        bottom.addWidget(self.kept, 1)
        bottom.addWidget(self.done_button, 0, Qt.AlignmentFlag.AlignRight)
        body = QWidget()
        bl = QVBoxLayout(body)
        bl.setContentsMargins(0, 0, 0, 0)
        bl.setSpacing(12)
        bl.addWidget(intro)
        bl.addWidget(self.key_label)
        bl.addWidget(note)
        bl.addLayout(actions)
        bl.addWidget(self.feedback)
        scroll = scroller(body, across=False)  # on a screen too short for it the text scrolls; Done stays
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 16)
        layout.setSpacing(12)
        layout.addWidget(scroll, 1)
        layout.addLayout(bottom)
        room = QSize(area.width() - 24, area.height() - 48)  # its frame and title bar fit on the screen too
        self.setMinimumWidth(min(440, room.width()))
        self.setMaximumSize(room)
        width = min(max(440, self.sizeHint().width()), room.width())
        inner = bl.totalHeightForWidth(width - 40) if bl.hasHeightForWidth() else body.sizeHint().height()
        height = inner + bottom.sizeHint().height() + 16 + 16 + 12 + 4  # margins, spacing, a little air
        self.resize(QSize(width, height).boundedTo(room))
        self._first_run = first_run

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.key)
        self.feedback.setText("Copied. Paste it where you keep it, then clear your clipboard.")

    def save(self, path: str | None = None) -> None:
        if path is None:
            path, _ = QFileDialog.getSaveFileName(self, "Save the recovery key",
                                                  str(Path.home() / "personal-llm-recovery-key.txt"),
                                                  "Text files (*.txt)")
        if not path:
            return
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(self.sheet_text())
        except OSError as e:
            self.feedback.setText(f"Could not save it: {e.strerror or e}.")
            return
        self.feedback.setText(f"Saved to {path}. Move it off this computer (a USB stick, a password manager).")

    def sheet_text(self) -> str:
        return ("Personal LLM recovery key\n\n"
                f"    {self.key}\n\n"
                "It opens your memory on any computer if this one or its keychain is lost:\n"
                "the app's “Open with recovery key”, or `personal-llm unlock --recovery-key KEY`.\n"
                "Keep it private: with a copy of your files it opens them.\n")

    def print_key(self) -> None:
        from PySide6.QtGui import QTextDocument
        from PySide6.QtPrintSupport import QPrintDialog, QPrinter

        printer = QPrinter()
        if QPrintDialog(printer, self).exec() != QDialog.DialogCode.Accepted:
            return
        doc = QTextDocument()
        doc.setPlainText(self.sheet_text())
        doc.print_(printer)
        self.feedback.setText("Sent to the printer.")

    def _done(self) -> None:
        if self._first_run:
            self.confirmed.emit()
        self.accept()

    def reject(self) -> None:
        """At first run, closing without the confirmation asks once more: the key is not shown again by
        itself (Settings → Recovery shows it)."""
        if self._first_run and not self.kept.isChecked() and self.isVisible():
            answer = QMessageBox.question(
                self, "Close without keeping the key?",
                "Without the recovery key, a lost keychain means a lost memory. You can show it later in "
                "Settings → Recovery. Close anyway?")
            if answer != QMessageBox.StandardButton.Yes:
                return
        super().reject()


NO_KEYCHAIN_NOTE = ("No keychain is available on this computer, so a passphrase protects what Personal LLM keeps on "
                    "it: your encrypted memory, or, with a server, your token and the captures waiting to be sent. "
                    "You type it when Personal LLM starts.")
FINGERPRINT_NOTE = ("No authority this computer trusts vouches for this server's certificate (a home server's own, "
                    "self-signed one). Its SHA-256 fingerprint is:")


WHERE_WIDTH = 560


class WhereDialog(QDialog):
    """The first run's choice, before anything is made: keep the memory on this computer, or connect to a
    server (its address and a token; the fingerprint of a self-signed certificate shown to be trusted).
    `chosen` follows once the choice is made (for a server: once the server and the token were checked).
    Without a keychain a passphrase protects either choice, which the note under the question says: the
    local store's is chosen next (the app asks for it as it creates the store), a server profile's here (it
    seals the token and the key of the outbox, where captures wait while the server is away)."""

    chosen = Signal(str)  # local | server

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.setWindowTitle("Welcome to Personal LLM")
        self.setModal(True)
        intro = QLabel("<b>Where should your memory live?</b>")
        intro.setWordWrap(True)
        self.local = QRadioButton("Keep my memory on this computer")
        self.local.setChecked(True)
        local_note = muted("An encrypted file on this computer; nothing leaves it.")
        self.server = QRadioButton("Connect to a server")
        server_note = muted("Your own Personal LLM server: the same memory on every device. Without a network you "
                            "can still capture; it is sent when the server is back.")
        self.address = QLineEdit()
        self.address.setPlaceholderText("https://memory.example.org:8765")
        self.token = QLineEdit()
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText("pllm_… (from `personal-llm server add-user`)")
        self.fingerprint_note = muted(FINGERPRINT_NOTE)
        self.fingerprint = QLabel("")
        self.fingerprint.setObjectName("Fingerprint")
        self.fingerprint.setWordWrap(True)
        self.fingerprint.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.fingerprint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.trust = QCheckBox("It is my server's fingerprint: trust this certificate")
        self.problem = Banner(tone="error")
        form = QFormLayout()
        form.setContentsMargins(24, 0, 0, 0)
        form.addRow("Address", self.address)
        form.addRow("Token", self.token)
        self.needs_passphrase = not bridge.keychain_available()  # then a passphrase protects the token
        self.passphrase = QLineEdit()
        self.passphrase.setEchoMode(QLineEdit.EchoMode.Password)
        self.passphrase.setPlaceholderText("at least 8 characters")
        self.again = QLineEdit()
        self.again.setEchoMode(QLineEdit.EchoMode.Password)
        self.passphrase_note = muted(NO_KEYCHAIN_NOTE)  # under the question: it is about either choice
        self.passphrase_note.setVisible(self.needs_passphrase)
        if self.needs_passphrase:
            form.addRow("Passphrase", self.passphrase)
            form.addRow("Again", self.again)
        self.server_form = QWidget()
        sf = QVBoxLayout(self.server_form)
        sf.setContentsMargins(0, 0, 0, 0)
        sf.addLayout(form)
        for w in (self.fingerprint_note, self.fingerprint, self.trust):
            w.setContentsMargins(24, 0, 0, 0)
            sf.addWidget(w)
        self._show_fingerprint(None)
        self.go = button("Continue", primary=True)
        self.go.clicked.connect(self._go)
        self.quit_button = button("Quit")
        self.quit_button.clicked.connect(self.reject)
        self.local.toggled.connect(self._choice_changed)
        self.address.textEdited.connect(lambda _t: self._show_fingerprint(None))
        body = QWidget()
        bl = QVBoxLayout(body)
        bl.setContentsMargins(0, 0, 0, 0)
        bl.setSpacing(8)
        bl.addWidget(intro)
        self.passphrase_note.setContentsMargins(0, 0, 0, 6)
        bl.addWidget(self.passphrase_note)
        bl.addWidget(self.local)
        local_note.setContentsMargins(24, 0, 0, 6)
        bl.addWidget(local_note)
        bl.addWidget(self.server)
        server_note.setContentsMargins(24, 0, 0, 0)
        bl.addWidget(server_note)
        bl.addWidget(self.server_form)
        bl.addWidget(self.problem)
        bl.addStretch(1)
        buttons = QHBoxLayout()
        buttons.addWidget(self.quit_button)
        buttons.addStretch(1)
        buttons.addWidget(self.go)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 16)
        self.scroll = scroller(body, across=False)
        layout.addWidget(self.scroll, 1)
        layout.addLayout(buttons)
        self._body, self._buttons = body, buttons
        self._choice_changed()
        screen = (parent.screen() if parent is not None else None) or QGuiApplication.primaryScreen()
        area = usable_area(screen)
        self._room = QSize(area.width() - 24, area.height() - 48)
        self.setMaximumSize(self._room)
        self.resize(QSize(min(WHERE_WIDTH, self._room.width()), 400).boundedTo(self._room))
        self._fit()

    def _fit(self) -> None:
        """As tall as what it shows (a problem, a fingerprint included), where the screen has room; else it
        scrolls, and a problem just said is scrolled into view."""
        layout = self.layout()
        margins = layout.contentsMargins()
        inner = self.width() - margins.left() - margins.right()
        body = self._body
        tall = (body.heightForWidth(inner) if body.hasHeightForWidth() else body.sizeHint().height()) \
            + margins.top() + margins.bottom() + layout.spacing() + self._buttons.sizeHint().height()
        if tall > self.height():
            self.resize(QSize(self.width(), tall).boundedTo(self._room))
        if self.problem.isVisibleTo(self):  # once laid out with it
            QTimer.singleShot(0, lambda: self.scroll.ensureWidgetVisible(self.problem))

    def _say(self, text: str, tone: str = "error") -> None:
        self.problem.set(text, tone)
        self._fit()

    def _choice_changed(self, _on: bool = False) -> None:
        server = self.server.isChecked()
        self.server_form.setEnabled(server)
        self.go.setText("Connect" if server else "Continue")
        self.problem.set("")
        if server:
            self.address.setFocus()

    def _show_fingerprint(self, fingerprint: str | None) -> None:
        self._fingerprint = fingerprint
        self.fingerprint.setText(formatting.fingerprint_lines(fingerprint) if fingerprint else "")
        for w in (self.fingerprint_note, self.fingerprint, self.trust):
            w.setVisible(fingerprint is not None)
        self.trust.setChecked(False)

    def _go(self) -> None:
        if self.local.isChecked():
            self.chosen.emit("local")
            self.accept()
            return
        url, token = self.address.text().strip(), self.token.text().strip()
        if not url or not token:
            self._say("Give the server's address and your token.")
            return
        if self._fingerprint is not None and not self.trust.isChecked():
            self._say("Compare the fingerprint with your server's, then tick the box to trust it.")
            return
        passphrase = None
        if self.needs_passphrase:
            passphrase = self.passphrase.text()
            if problem := self.bridge.passphrase_problem(passphrase):
                self._say(problem)
                return
            if self.again.text() != passphrase:
                self._say("The two passphrases differ; type the same one twice.")
                return
        self._say("Checking the server and the token…", "info")
        self.go.setEnabled(False)
        self.bridge.connect_server(url, token, self._fingerprint, self._connected, self._refused,
                                   passphrase=passphrase)

    def _connected(self, _memories: int) -> None:
        self.go.setEnabled(True)
        self.chosen.emit("server")
        self.accept()

    def _refused(self, message: str, fingerprint: str | None) -> None:
        self.go.setEnabled(True)
        if fingerprint is not None and fingerprint != self._fingerprint:
            self._show_fingerprint(fingerprint)
            self._say("Check the certificate's fingerprint below before connecting.", "info")
            return
        self._say(message)
