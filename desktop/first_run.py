"""The first-run card: what works and what is missing, in plain words, until the user dismisses it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QScrollArea, QVBoxLayout, QWidget

from . import formatting
from .bridge import EngineInfo

if TYPE_CHECKING:
    from .bridge import HealthReport
from .widgets import button

OK, MISSING, WAIT = "✓", "✗", "…"


def lines(info: EngineInfo, health: HealthReport | None) -> list[tuple[str, str]]:
    """(mark, sentence) pairs describing the setup."""
    out: list[tuple[str, str]] = []
    if info.key_source != "keychain":
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
    dismissed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Card")
        title = QLabel("<b>Welcome to Personal LLM</b> — here is what works on this computer:")
        title.setWordWrap(True)
        self.body = QLabel()
        self.body.setWordWrap(True)
        self.body.setTextFormat(Qt.TextFormat.RichText)
        self.body.setOpenExternalLinks(True)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        close = button("Got it")
        close.clicked.connect(self._dismiss)
        head = QHBoxLayout()
        head.addWidget(title, 1)
        head.addWidget(close)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(16, 12, 16, 12)
        layout.addLayout(head)
        self.scroll = QScrollArea()  # a small window keeps most of its height for the page below
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll.setWidget(self.body)
        layout.addWidget(self.scroll)
        self.was_dismissed = False
        self.hide()

    def fit_height(self, window_height: int) -> None:
        """At most about a quarter of the window (the rest scrolls inside the card)."""
        self.scroll.setMaximumHeight(max(48, window_height // 4 - 40))
        self.body.adjustSize()
        self.scroll.setMinimumHeight(min(self.body.sizeHint().height(), self.scroll.maximumHeight()))

    def show_report(self, info: EngineInfo, health: HealthReport | None) -> None:
        rows = []
        for mark, sentence in lines(info, health):
            color = {"✓": "#10B981", "✗": "#DC2626"}.get(mark, "#9DA0AA")
            text = formatting.message_html(sentence)
            rows.append(f"<tr><td style='color:{color}; padding-right:8px'><b>{mark}</b></td><td>{text}</td></tr>")
        self.body.setText("<table cellspacing='4'>" + "".join(rows) + "</table>")
        self.show()

    def _dismiss(self) -> None:
        self.was_dismissed = True
        self.hide()
        self.dismissed.emit()
