"""Watched folders in Settings: add, remove, pause or resume a folder, and each folder's status.

Everything goes through the bridge; the engine's watcher (started by the bridge when the store opens)
does the indexing, and its writes arrive as `changed`, which refreshes the list.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from .bridge import Bridge
from .widgets import Banner, button, muted

COLUMNS = ("Folder", "Project", "State", "Files", "Pending", "Errors")


def folder_state(f: Any) -> str:
    if not f.available:
        return "Unavailable (documents kept)"
    if f.paused:
        return "Paused"
    if f.scan_interrupted:
        return "Scan to finish"
    if f.scanned_at is None:
        return "Not scanned yet"
    return "Watched"


class FoldersBox(QGroupBox):
    """The "Watched folders" section (a group box for the Settings page)."""

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__("Watched folders", parent)
        self.bridge = bridge
        self.list = QTreeWidget()
        self.list.setHeaderLabels(list(COLUMNS))
        self.list.setRootIsDecorated(False)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.list.setMinimumHeight(110)
        # the path takes the width the counts leave (it was a fixed 100 px column beside an empty last one),
        # and a path longer than that loses its middle, not its end (the whole path is its tooltip)
        header = self.list.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for i in range(1, len(COLUMNS)):
            header.setSectionResizeMode(i, QHeaderView.ResizeMode.ResizeToContents)
        self.list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.list.itemSelectionChanged.connect(self._selection_changed)
        self.project = QLineEdit()
        self.project.setPlaceholderText("Project for a new folder (optional)")
        self.add_button = button("Add folder…")
        self.add_button.clicked.connect(self._choose_folder)
        self.pause_button = button("Pause")
        self.pause_button.clicked.connect(self._toggle_pause)
        self.remove_button = button("Stop watching", danger=True)
        self.remove_button.clicked.connect(self._remove_selected)
        self.feedback = Banner()
        self.watching = muted("")
        row = QHBoxLayout()
        row.addWidget(self.project, 1)
        row.addWidget(self.add_button)
        row.addWidget(self.pause_button)
        row.addWidget(self.remove_button)
        self.body = QWidget()  # what a profile that has watched folders shows
        layout = QVBoxLayout(self.body)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(muted("Files in these folders are kept indexed: new and changed files are added, "
                               "deleted ones are forgotten. Hidden files, links and very large files are skipped."))
        layout.addWidget(self.list)
        layout.addLayout(row)
        layout.addWidget(self.watching)
        layout.addWidget(self.feedback)
        self.not_here = muted("")  # why this profile has none (a profile on a server)
        self.not_here.setWordWrap(True)
        self.not_here.hide()
        outer = QVBoxLayout(self)
        outer.addWidget(self.not_here)
        outer.addWidget(self.body)
        self._folders: list[Any] = []
        self._indexing: str | None = None  # the folder just added, while its first scan runs
        self._refresh_soon = QTimer(self)
        self._refresh_soon.setSingleShot(True)
        self._refresh_soon.setInterval(300)
        self._refresh_soon.timeout.connect(self.refresh)
        bridge.opened.connect(self._opened)
        bridge.changed.connect(self._engine_changed)
        self._selection_changed()

    def _opened(self, info: Any) -> None:
        reason = info.unavailable.get("folders")
        self.not_here.setText(reason or "")
        self.not_here.setVisible(reason is not None)
        self.body.setVisible(reason is None)
        self.refresh()

    # ------------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        info = self.bridge.info
        if info is not None and "folders" not in info.unavailable:
            self.bridge.watch_status(self._populate)

    def add_folder(self, path: str, project: str | None = None) -> None:
        self.bridge.watch_add(path, project=project or None, done=self._added, failed=self._failed)

    def selected_path(self) -> str | None:
        items = self.list.selectedItems()
        return items[0].data(0, Qt.ItemDataRole.UserRole) if items else None

    # ------------------------------------------------------------------------------------------------
    def _engine_changed(self, changes: Any) -> None:
        if getattr(changes, "action", "") in ("watch", "ingest", "forget"):
            self._refresh_soon.start()

    def _populate(self, status: Any) -> None:
        selected = self.selected_path()
        self._folders = list(status.folders)
        self.list.clear()
        for f in self._folders:
            errors = f.failed + len(f.errors)
            item = QTreeWidgetItem([f.path, f.project or "", folder_state(f), str(f.files), str(f.pending),
                                    str(errors)])
            item.setData(0, Qt.ItemDataRole.UserRole, f.path)
            item.setToolTip(0, f.path)
            if f.errors:
                item.setToolTip(5, "\n".join(f"{e.path}: {e.error}" for e in f.errors[:10]))
            self.list.addTopLevelItem(item)
            if f.path == selected:
                item.setSelected(True)
        added = next((f for f in self._folders if f.path == self._indexing), None)
        if added is None:
            self._indexing = None
        elif added.scanned_at is not None and not added.pending and not added.scan_interrupted:
            self._indexing = None
            self.feedback.set(f"Watching {added.path}: {added.files} file{'' if added.files == 1 else 's'} "
                              "indexed.", "ok")
        self.watching.setText("" if status.watching or not self._folders else
                              "Another copy of the app or `personal-llm serve` may be watching; none runs now.")
        self._selection_changed()

    def _selection_changed(self) -> None:
        path = self.selected_path()
        folder = next((f for f in self._folders if f.path == path), None)
        self.pause_button.setEnabled(folder is not None)
        self.remove_button.setEnabled(folder is not None)
        self.pause_button.setText("Resume" if folder is not None and folder.paused else "Pause")

    def _choose_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Watch a folder")
        if path:
            self.add_folder(path, self.project.text().strip() or None)

    def _toggle_pause(self) -> None:
        path = self.selected_path()
        folder = next((f for f in self._folders if f.path == path), None)
        if folder is not None:
            self.bridge.watch_pause(folder.path, not folder.paused, done=lambda _f: self.refresh(),
                                    failed=self._failed)

    def _remove_selected(self) -> None:
        path = self.selected_path()
        if path is not None:
            self.bridge.watch_remove(path, done=self._removed, failed=self._failed)

    def _added(self, folder: Any) -> None:
        self.project.clear()
        self._indexing = folder.path
        self.feedback.set(f"Watching {folder.path}; its files are being indexed.", "ok")
        self.refresh()

    def _removed(self, removed: Any) -> None:
        self.feedback.set(f"No longer watching {removed.path}; its {removed.kept} document(s) stay in "
                          "memory (forget them in Documents).", "ok")
        self.refresh()

    def _failed(self, message: str) -> None:
        self.feedback.set(message, "error")
