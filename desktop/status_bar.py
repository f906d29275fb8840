"""The status bar: search model state, memory count, background work, the server of a profile that lives on
one (reachable or not, and the writes waiting to send), and short messages."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QLabel, QPushButton, QStatusBar, QWidget

from .icons import line_icon

MODEL_TEXT = {"ready": "● Semantic search ready", "loading": "◌ Loading search model…",
              "failed": "● Word search only", "off": "● Word search only"}
PAUSED_COLOR = "#D97706"
MODEL_COLOR = {"ready": "#10B981", "loading": "#9DA0AA", "failed": "#D97706", "off": "#9DA0AA"}


class StatusBar(QStatusBar):
    resume_clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizeGripEnabled(False)
        # the pause sign is drawn (icons/pause.svg): U+23F8 is missing from many fonts (a box with a code)
        self.paused_icon = QLabel()
        self.paused_icon.setPixmap(line_icon("pause", PAUSED_COLOR, 16).pixmap(16, 16))
        self.paused_icon.setStyleSheet("padding: 0 0 0 8px;")
        self.paused = QLabel("Paused: nothing runs in the background")
        self.paused.setStyleSheet(f"color: {PAUSED_COLOR}; padding-left: 2px;")
        self.resume = QPushButton("Resume")
        self.resume.setToolTip("Start the background work again (embedding, tidying up)")
        self.resume.clicked.connect(self.resume_clicked.emit)
        self.addWidget(self.paused_icon)
        self.addWidget(self.paused)
        self.addWidget(self.resume)
        self.set_paused(False)
        self.model = QLabel("◌ Opening your memory…")
        self.work = QLabel("")
        self.count = QLabel("")
        self.llm = QLabel("")
        self.server = QLabel("")
        self.server.hide()
        self.addPermanentWidget(self.server)
        self.addPermanentWidget(self.work)
        self.addPermanentWidget(self.count)
        self.addPermanentWidget(self.llm)
        self.addPermanentWidget(self.model)
        self.model_state = "opening"

    def set_model_state(self, state: str, detail: str) -> None:
        self.model_state = state
        self.model.setText(MODEL_TEXT.get(state, state))
        self.model.setStyleSheet(f"color: {MODEL_COLOR.get(state, '#9DA0AA')};")
        self.model.setToolTip(detail)

    def set_llm(self, ok: bool | None, detail: str) -> None:
        if ok:
            self.llm.setText("● Answers ready")
            self.llm.setStyleSheet("color: #10B981;")
        else:
            self.llm.setText("● Sources only (no language model)")
            self.llm.setStyleSheet("color: #D97706;")
        self.llm.setToolTip(detail)

    def set_connection(self, connection: Any) -> None:
        """A server profile's connection (engine Connection): "● Server" when it answers, "● Offline" when
        not, and how many writes wait to be sent."""
        if connection is None:
            self.server.hide()
            return
        waiting = f" · {connection.waiting} waiting to send" if connection.waiting else ""
        if connection.reachable is False:
            self.server.setText("● Offline" + waiting)
            self.server.setStyleSheet(f"color: {PAUSED_COLOR};")
            self.server.setToolTip(connection.detail or f"{connection.url} cannot be reached.")
        else:
            self.server.setText("● Server" + waiting)
            self.server.setStyleSheet("color: #10B981;" if connection.reachable else "color: #9DA0AA;")
            self.server.setToolTip(f"Your memory is on {connection.url}.")
        self.server.show()

    def set_count(self, text: str) -> None:
        self.count.setText(text)

    def set_work(self, text: str) -> None:
        self.work.setText(text)

    def post(self, message: str, seconds: float = 4.0) -> None:
        self.showMessage(message, int(seconds * 1000))

    def set_paused(self, paused: bool) -> None:
        self.paused_icon.setVisible(paused)
        self.paused.setVisible(paused)
        self.resume.setVisible(paused)
