"""Conflicts: pairs of facts that disagree, side by side with when each was said; keep one or keep both.

Keeping one archives the other (it stays in Memories → Archived, and can be restored from there); keeping
both tells Personal LLM they do not disagree, so the pair is not flagged again.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QBoxLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from . import formatting
from .bridge import Bridge
from .widgets import Banner, EmptyState, button, muted, page_title, scroller

WIDE = 720  # below this width the two sides are stacked


def said(m: Any) -> str:
    """'said 3 Mar 2026' (the event time when it has one, else when it was stored), in full."""
    moment = formatting.parse_iso(m.at or m.created_at)
    if moment is None:
        return ""
    return f"said {moment.day} {moment:%b %Y, %H:%M}"


class Side(QFrame):
    keep_clicked = Signal(str)
    open_clicked = Signal(str)

    def __init__(self, m: Any, newer: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.uid = m.id
        self.setObjectName("Card")
        when = said(m)
        bits = [("Newer" if newer else "Older") + (f" · {when}" if when else "")]
        if m.project:
            bits.append(f"project {m.project}")
        self.meta = muted(" · ".join(bits))
        self.text = QLabel(m.text)
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.keep = button("Keep this one", primary=newer)
        self.keep.setToolTip("Keep this fact; the other one is archived (not deleted)")
        self.keep.clicked.connect(lambda: self.keep_clicked.emit(self.uid))
        self.open = button("Open")
        self.open.setToolTip("Show it in Memories")
        self.open.clicked.connect(lambda: self.open_clicked.emit(self.uid))
        row = QHBoxLayout()
        row.addWidget(self.open)
        row.addStretch(1)
        row.addWidget(self.keep)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 10)
        layout.addWidget(self.meta)
        layout.addWidget(self.text, 1)
        layout.addLayout(row)


class ConflictCard(QFrame):
    """One pair: the older fact, the newer one, and 'keep both'."""

    resolved = Signal(str, str)  # uid of the pair, what to keep (a uid or "both")
    open_clicked = Signal(str)

    def __init__(self, pair: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.pair = pair
        self.older = Side(pair.a, newer=False)
        self.newer = Side(pair.b, newer=True)
        for side in (self.older, self.newer):
            side.keep_clicked.connect(lambda uid: self.resolved.emit(self.pair.a.id, uid))
            side.open_clicked.connect(self.open_clicked.emit)
        self.sides = QBoxLayout(QBoxLayout.Direction.LeftToRight)
        self.sides.addWidget(self.older, 1)
        self.sides.addWidget(self.newer, 1)
        self.both = button("Keep both")
        self.both.setToolTip("They do not disagree: keep both, and do not ask about this pair again")
        self.both.clicked.connect(lambda: self.resolved.emit(self.pair.a.id, "both"))
        foot = QHBoxLayout()
        foot.addWidget(muted("These two facts seem to disagree."), 1)
        foot.addWidget(self.both)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 8)
        layout.addLayout(self.sides)
        layout.addLayout(foot)

    def set_wide(self, wide: bool) -> None:
        self.sides.setDirection(QBoxLayout.Direction.LeftToRight if wide else QBoxLayout.Direction.TopToBottom)

    def set_busy(self, busy: bool) -> None:
        for b in (self.older.keep, self.newer.keep, self.both):
            b.setEnabled(not busy)


NO_CONFLICTS = ("When tidying up finds two facts that contradict each other (it compares them with the language "
                "model), they wait here for you to choose.")


class ConflictsView(QWidget):
    memory_opened = Signal(str)
    status_posted = Signal(str)
    count_changed = Signal(int)

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.cards: list[ConflictCard] = []
        self.banner = Banner()
        self.list = QWidget()
        self.list_layout = QVBoxLayout(self.list)
        self.list_layout.setContentsMargins(0, 0, 8, 0)
        self.list_layout.setSpacing(12)
        self.list_layout.addStretch(1)
        scroll = scroller(self.list)
        self.empty = EmptyState("No facts disagree.", NO_CONFLICTS)
        self.stack = QStackedWidget()
        self.stack.addWidget(scroll)
        self.stack.addWidget(self.empty)
        self.stack.setCurrentWidget(self.empty)
        self.intro = muted("Keep one (the other is archived, not deleted) or keep both.")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 12)
        layout.setSpacing(10)
        layout.addWidget(page_title("Conflicts"))
        layout.addWidget(self.intro)
        layout.addWidget(self.banner)
        layout.addWidget(self.stack, 1)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(300)
        self._timer.timeout.connect(self.refresh)
        bridge.opened.connect(lambda _info: self.refresh())
        bridge.changed.connect(lambda changes: self._timer.start() if changes.memories else None)

    def refresh(self) -> None:
        self.bridge.conflicts(self._show)

    def _show(self, pairs: list[Any]) -> None:
        for card in self.cards:
            card.deleteLater()
        self.cards = []
        wide = self.width() >= WIDE
        for pair in pairs:
            card = ConflictCard(pair)
            card.set_wide(wide)
            card.resolved.connect(self._resolve)
            card.open_clicked.connect(self.memory_opened.emit)
            self.list_layout.insertWidget(self.list_layout.count() - 1, card)
            self.cards.append(card)
        self.stack.setCurrentIndex(0 if pairs else 1)
        self.intro.setVisible(bool(pairs))
        self.count_changed.emit(len(pairs))

    def _resolve(self, uid: str, keep: str) -> None:
        card = next((c for c in self.cards if c.pair.a.id == uid), None)
        if card is not None:
            card.set_busy(True)

        def done(result: Any) -> None:
            if result.archived:
                self.banner.set("Kept one; the other is archived (Memories → Archived shows it).", "ok")
            else:
                self.banner.set("Kept both; this pair will not be flagged again.", "ok")
            self.refresh()

        def failed(message: str) -> None:
            if card is not None:
                card.set_busy(False)
            self.banner.set(message, "error")

        self.bridge.resolve(uid, keep, done, failed)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        wide = self.width() >= WIDE
        for card in self.cards:
            card.set_wide(wide)
