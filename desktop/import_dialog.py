"""File → Import: bring in your history from elsewhere (a ChatGPT or Claude data export, an Obsidian vault).

The dialog picks the source and its file or folder, runs the import through the bridge (the engine's jobs
thread), shows progress, can cancel, and ends with what was added. Importing the same export again adds
nothing; an export that cannot be read says why and stores nothing.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from .bridge import Bridge

SOURCES = (
    ("chatgpt", "ChatGPT export", "The zip from ChatGPT's Settings → Data controls → Export (or its conversations.json)"),
    ("claude", "Claude export", "The zip from Claude's Settings → Privacy → Export data (or its conversations.json)"),
    ("obsidian", "Obsidian vault", "The vault's folder: notes, their links and tags, and attachments"),
)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def summary(report: Any) -> str:
    """What an import added, in a sentence."""
    if report.source == "obsidian":
        text = f"Added {_plural(report.documents, 'note')} and attachments and {_plural(report.links, 'link')}."
        if report.unchanged:
            text += f" {report.unchanged} were already here."
        if report.failed:
            text += f" {_plural(len(report.failed), 'file')} could not be read."
        return text
    text = f"Added {_plural(report.messages, 'message')} in {_plural(report.conversations, 'conversation')}."
    if report.skipped:
        text += f" {_plural(report.skipped, 'conversation')} were already here."
    if report.empty:
        text += f" {report.empty} empty skipped."
    return text


class ImportDialog(QDialog):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.running = False
        self.report: Any = None
        self.last_progress: tuple[int, int] | None = None
        self.setWindowTitle("Import")
        self.setMinimumWidth(520)

        self.source = QComboBox()
        for key, label, _hint in SOURCES:
            self.source.addItem(label, key)
        self.hint = QLabel()
        self.hint.setWordWrap(True)
        self.hint.setObjectName("Hint")
        self.path = QLineEdit()
        self.path.setPlaceholderText("Choose a file or folder…")
        self.browse = QPushButton("Browse…")
        row = QHBoxLayout()
        row.addWidget(self.path, 1)
        row.addWidget(self.browse)
        self.project = QLineEdit()
        self.project.setPlaceholderText("optional")

        form = QFormLayout()
        form.addRow("Source", self.source)
        form.addRow("", self.hint)
        form.addRow("File", row)
        form.addRow("Project", self.project)

        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.hide()
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.buttons = QDialogButtonBox()
        self.start = self.buttons.addButton("Import", QDialogButtonBox.ButtonRole.AcceptRole)
        self.stop = self.buttons.addButton("Cancel", QDialogButtonBox.ButtonRole.RejectRole)

        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addWidget(self.buttons)

        self.source.currentIndexChanged.connect(self._source_changed)
        self.browse.clicked.connect(self._browse)
        self.path.textChanged.connect(self._update_buttons)
        self.start.clicked.connect(self.run)
        self.stop.clicked.connect(self._stop)
        bridge.import_progressed.connect(self._progressed)
        bridge.import_finished.connect(self._finished)
        bridge.import_failed.connect(self._failed)
        self._source_changed()

    @property
    def source_key(self) -> str:
        return str(self.source.currentData())

    def _source_changed(self) -> None:
        self.hint.setText(next(h for k, _l, h in SOURCES if k == self.source_key))
        self.path.setPlaceholderText("Choose the vault's folder…" if self.source_key == "obsidian"
                                     else "Choose the export (.zip or conversations.json)…")
        self._update_buttons()

    def _update_buttons(self) -> None:
        self.start.setEnabled(not self.running and bool(self.path.text().strip()))
        for w in (self.source, self.path, self.browse, self.project):
            w.setEnabled(not self.running)

    def _browse(self) -> None:
        if self.source_key == "obsidian":
            chosen = QFileDialog.getExistingDirectory(self, "Obsidian vault")
        else:
            chosen, _ = QFileDialog.getOpenFileName(self, "Export", "", "Exports (*.zip *.json);;All files (*)")
        if chosen:
            self.path.setText(chosen)

    def run(self) -> None:
        path = self.path.text().strip()
        if not path or self.running:
            return
        self.running = True
        self.report = None
        self.progress.setRange(0, 0)
        self.progress.show()
        self.status.setText("Importing…")
        self.stop.setText("Cancel")
        self._update_buttons()
        self.bridge.import_history(self.source_key, path, self.project.text().strip() or None)

    def _stop(self) -> None:
        if self.running:
            self.bridge.cancel_import()
            self.status.setText("Stopping after the current item…")
        else:
            self.reject()

    def _progressed(self, done: int, total: int) -> None:
        self.last_progress = (done, total)
        if total > 0:
            self.progress.setRange(0, total)
            self.progress.setValue(done)

    def _done(self, message: str) -> None:
        self.running = False
        self.progress.hide()
        self.status.setText(message)
        self.stop.setText("Close")
        self._update_buttons()

    def _finished(self, report: Any) -> None:
        if not self.running:
            return
        self.report = report
        self._done(summary(report))

    def _failed(self, message: str) -> None:
        if not self.running:
            return
        self._done(message)
