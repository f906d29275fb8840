"""Documents: a drop zone, per-file progress and status with cancel, and the list (re-ingest, delete)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QProgressBar,
    QStackedWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from . import drops, formatting, icons, theme
from .bridge import Bridge
from .widgets import Banner, EmptyState, button, muted, page_title

STATUS_TEXT = {"added": "Added", "unchanged": "Unchanged", "replaced": "Updated", "failed": "Failed",
               "cancelled": "Cancelled", "waiting": "Waiting", "reading": "Reading…", "done": "Done"}


class DropZone(QFrame):
    """A dashed area that takes files and folders (the whole window accepts drops too)."""

    paths_dropped = Signal(list)
    browse_clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("DropZone")
        self.setAcceptDrops(True)
        self.setMinimumHeight(120)
        icon = QLabel()
        icon.setPixmap(icons.line_icon("drop", theme.muted_color(), 32).pixmap(32, 32))
        icon.setAlignment(Qt.AlignmentFlag.AlignCenter)
        title = QLabel("Drop files or folders here to add them to your memory")
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        hint = muted("Text, Markdown, PDF, Word, HTML and more · they stay on this computer, encrypted")
        hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.browse = button("Choose files…")
        self.browse.clicked.connect(self.browse_clicked.emit)
        layout = QVBoxLayout(self)
        layout.addWidget(icon)
        layout.addWidget(title)
        layout.addWidget(hint)
        layout.addWidget(self.browse, 0, Qt.AlignmentFlag.AlignCenter)

    def _set_active(self, active: bool) -> None:
        self.setProperty("active", active)
        self.style().unpolish(self)
        self.style().polish(self)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt override
        if drops.local_paths(event.mimeData()):
            event.acceptProposedAction()
            self._set_active(True)

    def dragMoveEvent(self, event) -> None:  # noqa: N802 - Qt override
        event.acceptProposedAction()

    def dragLeaveEvent(self, event) -> None:  # noqa: N802 - Qt override
        self._set_active(False)

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt override
        self._set_active(False)
        paths = drops.local_paths(event.mimeData())
        if paths:
            event.acceptProposedAction()
            self.paths_dropped.emit(paths)


class DocumentsView(QWidget):
    ingest_started = Signal(int)  # number of paths
    ingest_done = Signal(list)  # IngestResults
    status_posted = Signal(str)

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.running = False
        self._queue: list[tuple[list[str], str | None]] = []
        self._rows: dict[str, QTreeWidgetItem] = {}
        self._docs: dict[str, Any] = {}

        self.drop_zone = DropZone()
        self.drop_zone.paths_dropped.connect(self.ingest)
        self.drop_zone.browse_clicked.connect(self._browse)

        self.progress = QProgressBar()
        self.progress.setTextVisible(False)
        self.progress_label = muted("")
        self.cancel = button("Cancel")
        self.cancel.clicked.connect(self.cancel_ingest)
        progress_row = QHBoxLayout()
        progress_row.addWidget(self.progress_label, 1)
        progress_row.addWidget(self.progress, 2)
        progress_row.addWidget(self.cancel)
        self.job = QTreeWidget()
        self.job.setHeaderLabels(["File", "Status", "Chunks"])
        self.job.setRootIsDecorated(False)
        self.job.setMaximumHeight(160)
        self.job.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.job_box = QWidget()
        jb = QVBoxLayout(self.job_box)
        jb.setContentsMargins(0, 0, 0, 0)
        jb.addLayout(progress_row)
        jb.addWidget(self.job)
        self.job_box.hide()

        self.list = QTreeWidget()
        self.list.setHeaderLabels(["Document", "Project", "Chunks", "Added"])
        self.list.setRootIsDecorated(False)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.list.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.list.itemSelectionChanged.connect(self._selection_changed)
        self.empty = EmptyState("No documents yet.", "Drop notes, PDFs or whole folders above; answers will cite them.")
        self.list_stack = QStackedWidget()
        self.list_stack.addWidget(self.list)
        self.list_stack.addWidget(self.empty)
        self.list_stack.setCurrentWidget(self.empty)

        self.reingest = button("Re-ingest")
        self.reingest.clicked.connect(self._reingest)
        self.delete = button("Delete…", danger=True)
        self.delete.clicked.connect(self.delete_selected)
        actions = QHBoxLayout()
        actions.addStretch(1)
        actions.addWidget(self.reingest)
        actions.addWidget(self.delete)
        self.banner = Banner()

        self.available = QWidget()
        al = QVBoxLayout(self.available)
        al.setContentsMargins(0, 0, 0, 0)
        al.setSpacing(10)
        al.addWidget(self.drop_zone)
        al.addWidget(self.banner)
        al.addWidget(self.job_box)
        al.addWidget(self.list_stack, 1)
        al.addLayout(actions)
        self.unavailable = EmptyState("Adding documents isn't available in this version yet.",
                                      "Facts you capture are stored and searchable already.")
        self.stack = QStackedWidget()
        self.stack.addWidget(self.available)
        self.stack.addWidget(self.unavailable)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 12)
        layout.setSpacing(10)
        layout.addWidget(page_title("Documents"))
        layout.addWidget(self.stack, 1)

        QShortcut(QKeySequence.StandardKey.Delete, self.list, activated=self.delete_selected,
                  context=Qt.ShortcutContext.WidgetShortcut)
        bridge.opened.connect(self._opened)
        bridge.changed.connect(self._engine_changed)
        bridge.ingest_progressed.connect(self._progressed)
        bridge.ingest_finished.connect(self._finished)
        self._selection_changed()

    # ------------------------------------------------------------------------------------------------
    def ingest(self, paths: list[str], project: str | None = None) -> bool:
        if self.running:
            self._queue.append((paths, project))
            self.status_posted.emit("Queued; it starts when the current files are done.")
            return True
        self.running = True
        self.banner.set("")
        self.job.clear()
        self._rows = {}
        for p in paths:
            self._row(p, "waiting")
        self.progress.setRange(0, 0)
        self.progress_label.setText(f"Adding {formatting.plural(len(paths), 'item')}…")
        self.cancel.setEnabled(True)
        self.job_box.show()
        self.ingest_started.emit(len(paths))
        self.bridge.ingest(paths, project)
        return True

    def cancel_ingest(self) -> None:
        self.cancel.setEnabled(False)
        self.progress_label.setText("Cancelling…")
        self.bridge.cancel_ingest()

    def refresh(self) -> None:
        self.bridge.list_documents(self._populate)

    def delete_selected(self) -> None:
        docs = [self._docs[i] for i in self._selected_ids() if i in self._docs]
        if not docs:
            return
        names = ", ".join(self._title(d) for d in docs[:3]) + ("…" if len(docs) > 3 else "")
        answer = QMessageBox.question(
            self, "Delete documents",
            f"Delete {names}?\n\nIts passages and everything derived from them are removed from your memory. "
            "The file itself stays where it is.")
        if answer != QMessageBox.StandardButton.Yes:
            return
        for d in docs:
            self.bridge.forget(self._id(d), done=lambda _r: self.status_posted.emit("Document deleted."))

    # ------------------------------------------------------------------------------------------------
    def _opened(self, info: Any) -> None:
        self.stack.setCurrentIndex(0)
        self.refresh()

    def _engine_changed(self, changes: Any) -> None:
        if changes.documents and not self.running:
            self.refresh()

    def _row(self, path: str, status: str, chunks: int | None = None, error: str | None = None) -> QTreeWidgetItem:
        item = self._rows.get(path)
        if item is None:
            item = QTreeWidgetItem([Path(path).name or path, "", ""])
            item.setToolTip(0, path)
            self.job.addTopLevelItem(item)
            self._rows[path] = item
        item.setText(1, STATUS_TEXT.get(status, status.title()))
        item.setText(2, "" if chunks is None else str(chunks))
        if error:
            item.setToolTip(1, error)
            item.setText(1, f"Failed — {error}")
        return item

    def _progressed(self, p: Any) -> None:
        total = int(getattr(p, "bytes_total", 0) or 0)
        if total:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * min(1.0, (getattr(p, "bytes_done", 0) or 0) / total)))
        elif getattr(p, "files_total", 0):
            self.progress.setRange(0, int(p.files_total))
            self.progress.setValue(int(p.files_done))
        current = getattr(p, "current_file", None)
        if current:
            self._row(str(current), "reading")
        self.progress_label.setText(
            f"{p.files_done} of {formatting.plural(int(p.files_total), 'file')} · "
            f"{formatting.plural(int(getattr(p, 'chunks_done', 0) or 0), 'passage')}")

    def _finished(self, results: list[Any]) -> None:
        self.running = False
        self.cancel.setEnabled(False)
        self.progress.setRange(0, 1)
        self.progress.setValue(1)
        counts: dict[str, int] = {}
        for r in results:
            status = str(getattr(r, "status", "done"))
            counts[status] = counts.get(status, 0) + 1
            self._row(str(r.path), status, getattr(r, "chunks", None), getattr(r, "error", None))
        for path, item in self._rows.items():
            if item.text(1) in (STATUS_TEXT["waiting"], STATUS_TEXT["reading"]):
                self._row(path, "cancelled" if not results or len(results) < len(self._rows) else "done")
        summary = ", ".join(f"{n} {STATUS_TEXT.get(s, s).lower()}" for s, n in counts.items()) or "cancelled"
        self.progress_label.setText(f"Finished: {summary}.")
        if counts.get("failed"):
            self.banner.set("Some files could not be added; hover over “Failed” to see why. Nothing was changed "
                            "for them.", "warn")
        self.ingest_done.emit(list(results))
        self.status_posted.emit(f"Documents: {summary}.")
        self.refresh()
        if self._queue:
            paths, project = self._queue.pop(0)
            self.ingest(paths, project)

    def _populate(self, documents: list[Any]) -> None:
        self.list.clear()
        self._docs = {}
        for d in documents:
            uid = self._id(d)
            self._docs[uid] = d
            chunks = getattr(d, "chunks", None)
            item = QTreeWidgetItem([self._title(d), getattr(d, "project", None) or "",
                                    "" if chunks is None else str(chunks),
                                    formatting.when(getattr(d, "created_at", None) or getattr(d, "added_at", None))])
            item.setData(0, Qt.ItemDataRole.UserRole, uid)
            item.setToolTip(0, str(getattr(d, "path", "") or ""))
            self.list.addTopLevelItem(item)
        self.list_stack.setCurrentWidget(self.list if documents else self.empty)
        self._selection_changed()

    @staticmethod
    def _id(doc: Any) -> str:
        return str(getattr(doc, "id", None) or getattr(doc, "uid", ""))

    @staticmethod
    def _title(doc: Any) -> str:
        return str(getattr(doc, "title", None) or Path(str(getattr(doc, "path", "") or "")).name or "Untitled")

    def _selected_ids(self) -> list[str]:
        return [i.data(0, Qt.ItemDataRole.UserRole) for i in self.list.selectedItems()]

    def _selection_changed(self) -> None:
        has = bool(self._selected_ids())
        self.reingest.setEnabled(has)
        self.delete.setEnabled(has)

    def _reingest(self) -> None:
        paths = [str(getattr(self._docs[i], "path", "")) for i in self._selected_ids() if i in self._docs]
        missing = [p for p in paths if not p or not Path(p).exists()]
        if missing:
            self.banner.set(f"{len(missing)} file(s) are no longer where they were added from.", "warn")
        present = [p for p in paths if p and Path(p).exists()]
        if present:
            self.ingest(present)

    def _browse(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, "Add documents")
        if files:
            self.ingest(files)
