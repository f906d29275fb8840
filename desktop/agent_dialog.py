"""The question an agent's step waits on: "Organiser wants to run forget_memory(id=…) — allow it?".

Shown for a `sensitive` tool (always) and for a `write` tool the agent may not run on its own. It names
the agent, the tool, what the tool does and every argument. "Don't allow" is the default button, so a
stray Enter never deletes anything.
"""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPlainTextEdit, QVBoxLayout, QWidget

from .widgets import button, muted

PERMISSIONS = {
    "sensitive": "Sensitive: asked every time, whatever the agent's settings.",
    "write": "Changes your memory. This agent asks before each change.",
    "read_only": "Only reads.",
}


def arguments_text(arguments: dict[str, Any]) -> str:
    """One line per argument, values as JSON (strings quoted), so nothing is hidden or reworded."""
    if not arguments:
        return "(no arguments)"
    return "\n".join(f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())


class AgentConfirmDialog(QDialog):
    """Ask whether one tool call may run. `answered(call_id, approve)` is emitted once."""

    answered = Signal(str, bool)

    def __init__(self, request: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.request = request
        self._sent = False
        self.setWindowTitle("Allow this step?")
        self.setModal(True)
        self.setMinimumWidth(440)

        self.title = QLabel(f"<b>{_html(request.agent)}</b> wants to run <b>{_html(request.tool)}</b>")
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setWordWrap(True)
        self.description = muted(request.description)
        self.description.setWordWrap(True)
        self.permission = QLabel(PERMISSIONS.get(request.permission, request.permission))
        self.permission.setWordWrap(True)
        self.permission.setProperty("tone", "warn" if request.permission == "sensitive" else "info")
        self.arguments = QPlainTextEdit(arguments_text(dict(request.arguments)))
        self.arguments.setReadOnly(True)
        lines = self.arguments.toPlainText().count("\n") + 1
        self.arguments.setFixedHeight(min(160, 16 + lines * self.fontMetrics().lineSpacing() * 2))

        self.allow_button = button("Allow", danger=request.permission == "sensitive")
        self.deny_button = button("Don't allow", primary=True)
        self.deny_button.setDefault(True)
        self.deny_button.setAutoDefault(True)
        self.allow_button.setAutoDefault(False)
        self.allow_button.clicked.connect(lambda: self._answer(True))
        self.deny_button.clicked.connect(lambda: self._answer(False))
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.deny_button)
        row.addWidget(self.allow_button)

        layout = QVBoxLayout(self)
        layout.setSpacing(10)
        layout.addWidget(self.title)
        layout.addWidget(self.description)
        layout.addWidget(self.permission)
        layout.addWidget(muted("With these arguments:"))
        layout.addWidget(self.arguments)
        layout.addLayout(row)

    def _answer(self, approve: bool) -> None:
        if not self._sent:
            self._sent = True
            self.answered.emit(self.request.call_id, approve)
        self.accept() if approve else self.reject()

    def reject(self) -> None:  # Escape or the window's close button: not allowed
        if not self._sent:
            self._sent = True
            self.answered.emit(self.request.call_id, False)
        super().reject()

    def dismiss(self) -> None:
        """Close without answering (the run was stopped)."""
        self._sent = True
        super().reject()


def _html(text: str) -> str:
    import html

    return html.escape(text)
