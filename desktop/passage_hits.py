"""Search in Memories also looks in the documents: the passages that match, under the search box, each
opening the document at that passage (the text read from a picture by OCR included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QListWidget, QListWidgetItem, QVBoxLayout, QWidget

from . import formatting
from .bridge import Bridge
from .widgets import muted

SHOWN = 3  # passages listed; the reader shows the rest of each document


class PassageHits(QFrame):
    """'In your documents': the best passages for the search, one line each; a click opens the passage."""

    passage_requested = Signal(object)  # the Hit, as an answer's source is

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self._generation = 0
        self.hits: list[Any] = []
        self.title = muted("")
        self.list = QListWidget()
        self.list.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.itemActivated.connect(self._open)
        self.list.itemClicked.connect(self._open)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(self.title)
        layout.addWidget(self.list)
        self.hide()

    def search(self, query: str, project: str | None = None) -> None:
        """Look for `query` in the documents' passages (words and meaning, as Ask does); '' hides the list."""
        self._generation += 1
        generation = self._generation
        if not query or self.bridge.info is None:
            self._show([])
            return
        self.bridge.recall(query, lambda hits: generation == self._generation and self._show(hits), k=SHOWN,
                           kind="chunk", include_chunks=True, project=project or None,
                           failed=lambda _message: generation == self._generation and self._show([]))

    def _show(self, hits: list[Any]) -> None:
        self.hits = [h for h in hits if h.kind == "chunk"][:SHOWN]
        self.list.clear()
        for hit in self.hits:
            name = hit.document_title or Path(hit.document_path or "").name or "Pasted text"
            where = f"{name} · {hit.locator}" if hit.locator else name
            item = QListWidgetItem(f"{where} — {formatting.one_line(hit.passage or hit.text, 200)}")
            item.setToolTip(f"Open {name} at this passage")
            item.setData(Qt.ItemDataRole.UserRole, hit.id)
            self.list.addItem(item)
        n = len(self.hits)
        self.title.setText("In your documents: the best passage (click to read it)" if n == 1 else
                           f"In your documents: the {n} best passages (click one to read it)")
        if n:
            rows = sum(self.list.sizeHintForRow(i) for i in range(n))
            self.list.setFixedHeight(rows + 2 * self.list.frameWidth() + 4)
        self.setVisible(bool(n))

    def _open(self, item: QListWidgetItem) -> None:
        uid = item.data(Qt.ItemDataRole.UserRole)
        hit = next((h for h in self.hits if h.id == uid), None)
        if hit is not None:
            self.passage_requested.emit(hit)
