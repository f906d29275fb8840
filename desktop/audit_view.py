"""The activity log: every write, edit and delete the engine recorded (who, what, which id, when)."""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QStackedWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from . import formatting
from .bridge import Bridge
from .widgets import EmptyState, button, muted, page_title

ACTIONS = {"remember": "Remembered", "update": "Edited", "forget": "Forgot", "forget_document": "Deleted document",
           "merge_duplicate": "Merged a duplicate", "create_store": "Created the store", "ingest": "Added document",
           "resolve": "Resolved a conflict", "consolidate": "Consolidated",
           "embedding_space_changed": "Changed the embedding model"}


class AuditView(QWidget):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self._dirty = True
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["When", "Who", "What", "Item", "Details"])
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        header = self.tree.header()
        header.setSectionResizeMode(4, QHeaderView.ResizeMode.Stretch)
        for col, width in ((0, 130), (1, 90), (2, 170), (3, 140)):
            header.resizeSection(col, width)
        self.empty = EmptyState("No activity yet.", "Every change to your memory is listed here.")
        self.stack = QStackedWidget()
        self.stack.addWidget(self.tree)
        self.stack.addWidget(self.empty)
        self.refresh_button = button("Refresh", shortcut="F5")
        self.refresh_button.clicked.connect(self.refresh)
        top = QHBoxLayout()
        top.addWidget(page_title("Activity"))
        top.addStretch(1)
        top.addWidget(self.refresh_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 12)
        layout.setSpacing(10)
        layout.addLayout(top)
        layout.addWidget(muted("What changed in your memory, newest first. Memory text is never shown here."))
        layout.addWidget(self.stack, 1)
        bridge.changed.connect(self._engine_changed)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override: refresh lazily, when looked at
        super().showEvent(event)
        if self._dirty:
            self.refresh()

    def refresh(self) -> None:
        if self.bridge.info is None:
            return
        self._dirty = False
        self.bridge.audit_log(self._populate)

    def _engine_changed(self, _changes: Any) -> None:
        self._dirty = True
        if self.isVisible():
            self.refresh()

    def _populate(self, entries: list[Any]) -> None:
        self.tree.clear()
        for e in entries:
            detail = ", ".join(f"{k}: {json.dumps(v)}" for k, v in sorted((e.detail or {}).items()))
            item = QTreeWidgetItem([formatting.when(e.at), e.actor, ACTIONS.get(e.action, e.action.replace("_", " ")),
                                    e.target or "", detail])
            item.setToolTip(0, e.at)
            self.tree.addTopLevelItem(item)
        self.stack.setCurrentWidget(self.tree if entries else self.empty)
