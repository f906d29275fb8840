"""The status bar: search model state, memory count, background work, the server of a profile that lives on
one (reachable or not, and the writes waiting to send), and short messages."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QLabel, QPushButton, QStatusBar, QWidget

from .icons import line_icon

MODEL_TEXT = {"ready": "● Semantic search ready", "loading": "◌ Loading search model…",
              "failed": "● Word search only", "off": "● Word search only"}
# in a narrow window (a small screen, a large scale) the same, short, so that none runs off the bar
SHORT_TEXT = {"● Semantic search ready": "● Semantic", "◌ Loading search model…": "◌ Loading model…",
              "● Word search only": "● Words only", "● Sources only (no language model)": "● Sources only",
              "● Answers ready": "● Answers", "Paused: nothing runs in the background": "Paused"}
PAUSED_COLOR = "#D97706"
MODEL_COLOR = {"ready": "#10B981", "loading": "#9DA0AA", "failed": "#D97706", "off": "#9DA0AA"}


class StatusBar(QStatusBar):
    resume_clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizeGripEnabled(False)
        self._full: dict[QLabel, str] = {}  # each label's whole text, when it shows a short one
        self._level = 0  # how much is shortened to fit the window (`_apply`)
        # the pause sign is drawn (icons/pause.svg): U+23F8 is missing from many fonts (a box with a code)
        self.paused_icon = QLabel()
        self.paused_icon.setPixmap(line_icon("pause", PAUSED_COLOR, 16).pixmap(16, 16))
        self.paused_icon.setStyleSheet("padding: 0 0 0 8px;")
        self.paused = QLabel("Paused: nothing runs in the background")
        self.paused.setStyleSheet(f"color: {PAUSED_COLOR}; padding-left: 2px;")
        self.paused.setToolTip(self.paused.text())
        self._full[self.paused] = self.paused.text()
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
        for label in (self.paused, self.server, self.work, self.count, self.llm, self.model):
            label.setMinimumWidth(1)  # the bar never asks for more than its window (`fit` shortens what does not fit)
        self.addPermanentWidget(self.server)
        self.addPermanentWidget(self.work)
        self.addPermanentWidget(self.count)
        self.addPermanentWidget(self.llm)
        self.addPermanentWidget(self.model)
        self.model_state = "opening"

    def _set(self, label: QLabel, text: str) -> None:
        self._full[label] = text
        label.setText(text)
        self.fit()

    def full_text(self, label: QLabel) -> str:
        return self._full.get(label, label.text())

    def fit(self) -> None:
        """Whole texts when they fit the window's width; else the short ones (each has its tooltip); else
        without the count too (the Memories page shows it)."""
        if not hasattr(self, "model"):  # still being built
            return
        shown = [w for w in (self.paused_icon, self.paused, self.resume, self.server, self.work, self.count,
                             self.llm, self.model) if not w.isHidden()]
        whole = sum(w.sizeHint().width() if w not in self._full else
                    w.fontMetrics().horizontalAdvance(self._full[w]) + 8 for w in shown)
        self._apply(0 if whole + self.SPACING * (len(shown) + 1) <= self._room() else 1)

    def _room(self) -> int:
        # the window's width: a bar whose parts need more is not made wider than its window (see __init__)
        return self.window().width() if self.window() is not self else self.width()

    def _apply(self, level: int) -> None:
        """0: whole texts; 1: short ones; 2: short ones and no count; 3: and the pause sign without its word
        (its tooltip says it). Then, once laid out, a part still narrower than its text takes the next level."""
        self._level = level
        for label in (self.paused, self.model, self.llm):
            full = self._full.get(label, label.text())
            label.setText(full if level == 0 else SHORT_TEXT.get(full, full))
        self.count.setVisible(bool(self.count.text()) and level < 2)
        self.paused.setVisible(self.paused_icon.isVisibleTo(self) and level < 3)
        if level < 3:
            QTimer.singleShot(0, self._check)

    def _check(self) -> None:
        parts = [w for w in (self.paused, self.resume, self.server, self.work, self.count, self.llm, self.model)
                 if w.isVisible()]
        if any(w.width() + self.SLACK < w.sizeHint().width() for w in parts) and self._level < 3:
            self._apply(self._level + 1)

    SPACING = 12  # between two widgets of the bar, and at its ends
    SLACK = 2  # the bar lays a part out 2 pixels narrower than its hint, its text still whole

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self.fit()

    def set_model_state(self, state: str, detail: str) -> None:
        self.model_state = state
        self._set(self.model, MODEL_TEXT.get(state, state))
        self.model.setStyleSheet(f"color: {MODEL_COLOR.get(state, '#9DA0AA')};")
        self.model.setToolTip(detail)

    def set_llm(self, ok: bool | None, detail: str) -> None:
        if ok:
            self._set(self.llm, "● Answers ready")
            self.llm.setStyleSheet("color: #10B981;")
        else:
            self._set(self.llm, "● Sources only (no language model)")
            self.llm.setStyleSheet("color: #D97706;")
        self.llm.setToolTip(detail)

    def set_connection(self, connection: Any) -> None:
        """A server profile's connection (engine Connection): "● Server" when it answers, "● Offline" when
        not, and how many writes wait to be sent."""
        if connection is None:
            self.server.hide()
            self.model.show()
            return
        self.model.hide()  # search runs on the server: its state is the server's ("● Server")
        waiting = f" · {connection.waiting} waiting to send" if connection.waiting else ""
        if getattr(connection, "token_refused", False):
            self.server.setText("● Token refused" + waiting)
            self.server.setStyleSheet("color: #DC2626;")
            self.server.setToolTip(f"{connection.detail} Settings → Where your memory is → Use a new token.")
        elif connection.reachable is False:
            self.server.setText("● Offline" + waiting)
            self.server.setStyleSheet(f"color: {PAUSED_COLOR};")
            self.server.setToolTip(connection.detail or f"{connection.url} cannot be reached.")
        else:
            self.server.setText("● Server" + waiting)
            self.server.setStyleSheet("color: #10B981;" if connection.reachable else "color: #9DA0AA;")
            self.server.setToolTip(f"Your memory is on {connection.url}.")
        self.server.show()
        self.fit()

    def set_count(self, text: str) -> None:
        self.count.setText(text)
        self.fit()

    def set_work(self, text: str) -> None:
        self.work.setText(text)
        self.fit()

    def post(self, message: str, seconds: float = 4.0) -> None:
        self.showMessage(message, int(seconds * 1000))

    def set_paused(self, paused: bool) -> None:
        self.paused_icon.setVisible(paused)
        self.paused.setVisible(paused)
        self.resume.setVisible(paused)
        self.fit()
