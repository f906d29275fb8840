"""Documents: a drop zone, per-file progress and status with cancel, and the list (re-ingest, delete)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QDragEnterEvent, QDropEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QProgressBar,
    QStackedWidget,
    QTextBrowser,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from . import drops, formatting, icons, theme
from .bridge import Bridge
from .widgets import Banner, EmptyState, button, muted, page_title

LIST_COLUMNS = ("Document", "Type", "Size", "Added", "Folder")
STATUS_TEXT = {"added": "Added", "unchanged": "Unchanged", "replaced": "Updated", "failed": "Failed",
               "cancelled": "Cancelled", "waiting": "Waiting", "reading": "Reading…", "done": "Done"}


def _folder_summary(results: list[Any], stopped: bool) -> str:
    """A folder's row once its files are read: "3 added, 1 failed" (and "then cancelled")."""
    counts: dict[str, int] = {}
    for r in results:
        status = str(getattr(r, "status", "done"))
        counts[status] = counts.get(status, 0) + 1
    order = list(STATUS_TEXT)
    text = ", ".join(f"{n} {STATUS_TEXT.get(s, s).lower()}"
                     for s, n in sorted(counts.items(), key=lambda c: order.index(c[0]) if c[0] in order else 99))
    return f"{text}, then cancelled" if stopped else text


LOCAL_HINT = "Text, Markdown, PDF, Word, HTML and more · they stay on this computer, encrypted"
SERVER_HINT = "Text, Markdown, PDF, Word, HTML and more · each file is uploaded to your server"


class DropZone(QFrame):
    """A dashed area that takes files and folders (the whole window accepts drops too)."""

    paths_dropped = Signal(list)
    browse_clicked = Signal()
    folder_clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("DropZone")
        self.setAcceptDrops(True)
        icon = QLabel()
        icon.setPixmap(icons.line_icon("drop", theme.muted_color(), 32).pixmap(32, 32))
        icon.setAlignment(Qt.AlignmentFlag.AlignCenter)
        title = QLabel("Drop files or folders here to add them to your memory")
        title.setWordWrap(True)
        self.hint = hint = muted(LOCAL_HINT)
        self.browse = button("Add files…")
        self.browse.setToolTip("Choose files to add")
        self.browse.clicked.connect(self.browse_clicked.emit)
        self.browse_folder = button("Add a folder…")
        self.browse_folder.setToolTip("Choose a folder: everything supported inside it is added")
        self.browse_folder.clicked.connect(self.folder_clicked.emit)
        words = QVBoxLayout()
        words.setSpacing(2)
        words.addWidget(title)
        words.addWidget(hint)
        buttons = QVBoxLayout()
        buttons.setSpacing(4)
        buttons.addWidget(self.browse)
        buttons.addWidget(self.browse_folder)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(14, 10, 14, 10)
        layout.setSpacing(12)
        layout.addWidget(icon)
        layout.addLayout(words, 1)
        layout.addLayout(buttons)

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
        self._cancelling = False  # Cancel was pressed during the current run
        self._queue: list[tuple[list[str], str | None]] = []
        self._rows: dict[str, QTreeWidgetItem] = {}
        self._docs: dict[str, Any] = {}

        self.drop_zone = DropZone()
        self.drop_zone.paths_dropped.connect(self.ingest)
        self.drop_zone.browse_clicked.connect(self._browse)
        self.drop_zone.folder_clicked.connect(self._browse_folder)
        self.viewer: PassageView | None = None

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
        self.job.setHeaderLabels(["File", "Status", "Passages"])
        self.job.setRootIsDecorated(False)
        self.job.setMaximumHeight(180)
        self.job.setWordWrap(True)  # a failure's reason is shown whole, on as many lines as it needs
        self.job.setUniformRowHeights(False)
        jh = self.job.header()
        jh.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        jh.resizeSection(0, 200)
        jh.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        jh.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        jh.setStretchLastSection(False)
        self.job_box = QWidget()
        jb = QVBoxLayout(self.job_box)
        jb.setContentsMargins(0, 0, 0, 0)
        jb.addLayout(progress_row)
        jb.addWidget(self.job)
        self.job_box.hide()

        self.list = QTreeWidget()
        self.list.setHeaderLabels(list(LIST_COLUMNS))
        self.list.setRootIsDecorated(False)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        lh = self.list.header()
        lh.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in (1, 2, 3):
            lh.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        lh.setSectionResizeMode(4, QHeaderView.ResizeMode.Interactive)
        lh.resizeSection(4, 200)
        lh.setStretchLastSection(False)
        lh.setMinimumSectionSize(lh.fontMetrics().horizontalAdvance("Document") + 24)
        self.list.itemSelectionChanged.connect(self._selection_changed)
        self.list.itemActivated.connect(lambda item, _col: self.view_document(item.data(0, Qt.ItemDataRole.UserRole)))
        self.list.setToolTip("Double-click a document to read its passages")
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
    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        """The wide columns (a file's name in the ingest list, a document's folder) give way in a narrow
        window, so that no column runs off the list."""
        super().resizeEvent(event)
        QTimer.singleShot(0, self._fit_columns)  # once the lists have their new width

    def _fit_columns(self) -> None:
        for tree, col in ((self.list, 4), (self.job, 0)):
            header, width = tree.header(), tree.viewport().width()
            if width <= 0:
                continue
            stretch = QHeaderView.ResizeMode.Stretch
            others = sum(header.minimumSectionSize() if header.sectionResizeMode(i) == stretch else header.sectionSize(i)
                         for i in range(header.count()) if i != col and not header.isSectionHidden(i))
            header.resizeSection(col, max(80, min(200, width - others)))

    def ingest(self, paths: list[str], project: str | None = None) -> bool:
        if self.running:
            self._queue.append((paths, project))
            self.status_posted.emit("Queued; it starts when the current files are done.")
            return True
        self.running = True
        self._cancelling = False
        self.banner.set("")
        self.job.clear()
        self._rows = {}
        for p in paths:
            self._row(p, "waiting")
        self.progress.setRange(0, 0)
        self.progress_label.setText(f"Adding {formatting.plural(len(paths), 'item')}…")
        self.cancel.setEnabled(True)
        self.cancel.show()
        self.job_box.show()
        self.ingest_started.emit(len(paths))
        self.bridge.ingest(paths, project)
        return True

    def cancel_ingest(self) -> None:
        self._cancelling = True
        self.cancel.setEnabled(False)
        self.progress_label.setText("Cancelling…")
        self.bridge.cancel_ingest()

    def refresh(self) -> None:
        self.bridge.list_documents(self._populate, with_failed=True)

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
        self.drop_zone.hint.setText(LOCAL_HINT if info.connection is None else SERVER_HINT)
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
            item.setToolTip(1, wrapped_tip(error))
            item.setText(1, f"Failed: {error}")
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
        passages = int(getattr(p, "chunks_done", 0) or 0)
        self.progress_label.setText(
            f"{p.files_done} of {formatting.plural(int(p.files_total), 'file')}"
            + (f" · {formatting.plural(passages, 'passage')}" if passages else ""))

    def _finished(self, results: list[Any]) -> None:
        self.running = False
        self.cancel.setEnabled(False)
        self.cancel.hide()  # nothing left to cancel
        self.progress.setRange(0, 1)
        self.progress.setValue(1)
        counts: dict[str, int] = {}
        for r in results:
            status = str(getattr(r, "status", "done"))
            counts[status] = counts.get(status, 0) + 1
            self._row(str(r.path), status, getattr(r, "chunks", None), getattr(r, "error", None))
        for path, item in self._rows.items():
            if item.text(1) in (STATUS_TEXT["waiting"], STATUS_TEXT["reading"]):
                # a folder has no result of its own: it is done when its files are, cancelled only by Cancel
                inside = [r for r in results if Path(str(r.path)).is_relative_to(path)] if Path(path).is_dir() else []
                if inside:
                    item.setText(1, _folder_summary(inside, stopped=self._cancelling))
                else:
                    self._row(path, "cancelled" if self._cancelling else "done")
        summary = ", ".join(f"{n} {STATUS_TEXT.get(s, s).lower()}" for s, n in counts.items()) or "cancelled"
        self.progress_label.setText(f"Finished: {summary}.")
        if counts.get("failed"):
            self.banner.set("Some files could not be added; the reason is beside each one. Nothing was changed "
                            "for them.", "warn")
        self.ingest_done.emit(list(results))
        self.status_posted.emit(f"Documents: {summary}.")
        self.refresh()
        if self._queue:
            paths, project = self._queue.pop(0)
            self.ingest(paths, project)

    def _populate(self, documents: list[Any]) -> None:
        selected = set(self._selected_ids())
        self.list.clear()
        self._docs = {}
        for d in documents:
            uid = self._id(d)
            self._docs[uid] = d
            path = str(getattr(d, "path", "") or "")
            item = QTreeWidgetItem([document_name(d), file_type(d), formatting.size(int(getattr(d, "size", 0) or 0)),
                                    formatting.when(getattr(d, "created_at", None)),
                                    str(Path(path).parent) if path else "(no file)"])
            item.setData(0, Qt.ItemDataRole.UserRole, uid)
            item.setToolTip(0, wrapped_tip(f"{path or document_name(d)} · {formatting.plural(d.chunks, 'passage')}"
                                           + (f" · project {d.project}" if getattr(d, "project", None) else "")))
            item.setToolTip(4, path or NO_FILE)
            if getattr(d, "error", None):  # could not be ingested: listed with why, nothing to read
                item.setText(1, "Failed")
                tip = wrapped_tip(f"{d.error}. Add the file again to retry, or delete the entry.")
                for column in range(item.columnCount()):
                    item.setForeground(column, theme.muted_color())
                    item.setToolTip(column, tip)
            self.list.addTopLevelItem(item)
            item.setSelected(uid in selected)
        self.list_stack.setCurrentWidget(self.list if documents else self.empty)
        self._selection_changed()

    def view_document(self, uid: str | None, passage_id: str | None = None, locator: str | None = None) -> None:
        """Read a document's passages inside the app (one highlighted), with Open file as a second step."""
        doc = self._docs.get(uid or "")
        if doc is None:
            return
        if getattr(doc, "error", None):
            self.status_posted.emit(f"{document_name(doc)} could not be ingested: {doc.error}")
            return
        self.show_passages(uid or "", document_name(doc), str(getattr(doc, "path", "") or ""), passage_id, locator)

    def show_passages(self, document_id: str, title: str, path: str, passage_id: str | None = None,
                      locator: str | None = None, text: str | None = None) -> PassageView:
        if self.viewer is None:
            self.viewer = PassageView(self.bridge, self)
        self.viewer.show_document(document_id, title, path, passage_id, locator, text)
        return self.viewer

    @staticmethod
    def _id(doc: Any) -> str:
        return str(getattr(doc, "id", None) or getattr(doc, "uid", ""))

    @staticmethod
    def _title(doc: Any) -> str:
        return document_name(doc)

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
        exts = " ".join(f"*{e}" for e in self.bridge.supported_extensions())
        files, _ = QFileDialog.getOpenFileNames(self, "Add documents", start_folder(),
                                                f"Supported files ({exts});;All files (*)")
        if files:
            self.ingest(files)

    def _browse_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder", start_folder())
        if folder:
            self.ingest([folder])


def document_name(doc: Any) -> str:
    """One naming rule everywhere: the document's title, else its file name (never 'untitled')."""
    title = str(getattr(doc, "title", "") or "").strip()
    path = str(getattr(doc, "path", "") or "")
    if title and title.lower() not in ("untitled", "untitled document", "none"):
        return title
    return Path(path).name or title or "Pasted text"


def file_type(doc: Any) -> str:
    path = str(getattr(doc, "path", "") or "")
    ext = Path(path).suffix.lstrip(".").upper()
    if ext:
        return ext
    mime = str(getattr(doc, "mime", "") or "")
    return {"text/plain": "Text", "text/markdown": "Markdown", "application/pdf": "PDF"}.get(mime, mime or "Text")


def wrapped_tip(text: str) -> str:
    """A tooltip that wraps (Qt wraps rich-text tooltips at a readable width; plain ones run on one line)."""
    import html

    return f"<p>{html.escape(text)}</p>"


def start_folder() -> str:
    """Where the file dialog opens: ~/Documents when there is one, else the home folder."""
    home = Path.home()
    documents = home / "Documents"
    return str(documents if documents.is_dir() else home)


# a document without a path: text or a file's bytes sent to the app (the HTTP API's upload, MCP, an import), not
# only pasted text (an uploaded PDF was listed as "(pasted text)")
NO_FILE = "Sent to Personal LLM as text or as an uploaded file, not read from a file on this computer"


def open_file(path: str) -> str | None:
    """Open a file with the system's application; None when that worked, else why not (in words)."""
    if not path:
        return f"{NO_FILE}; there is no file to open."
    if not Path(path).exists():
        return f"The file is no longer at {path}."
    if not QDesktopServices.openUrl(QUrl.fromLocalFile(path)):
        return f"No application on this computer opened {Path(path).name}."
    return None


class PassageView(QDialog):
    """A document's passages, read inside the app: the cited one highlighted and scrolled to, with its page
    or heading; Open file opens the original with the system's application and says if that failed."""

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.setWindowTitle("Document — Personal LLM")
        self.resize(640, 520)
        self.title = QLabel()
        self.title.setObjectName("PageTitle")
        self.title.setWordWrap(True)
        self.where = muted("")
        self.text = QTextBrowser()
        self.text.setOpenLinks(False)
        self.open_button = button("Open file")
        self.open_button.clicked.connect(self.open_file)
        self.result = muted("")
        close = button("Close")
        close.clicked.connect(self.close)
        bottom = QHBoxLayout()
        bottom.addWidget(self.result, 1)
        bottom.addWidget(self.open_button)
        bottom.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.title)
        layout.addWidget(self.where)
        layout.addWidget(self.text, 1)
        layout.addLayout(bottom)
        self.path = ""
        self._generation = 0

    def show_document(self, document_id: str, title: str, path: str, passage_id: str | None = None,
                      locator: str | None = None, text: str | None = None) -> None:
        self._generation += 1
        generation = self._generation
        self.path = path
        self.setWindowTitle(f"{title} — Personal LLM")  # the whole document, not one passage
        self.title.setText(title)
        self.where.setText(" · ".join(p for p in (locator, path) if p))
        self.result.setText("")
        self.result.setStyleSheet("")
        self.open_button.setEnabled(bool(path))
        self.text.setHtml(self._html([(passage_id or "", text or "", locator)], passage_id) if text else "…")
        self.show()
        self.raise_()
        self.activateWindow()
        if document_id:
            self.bridge.document_passages(
                document_id, lambda ps: generation == self._generation and self._loaded(ps, passage_id),
                lambda message: generation == self._generation and self.result.setText(message))

    def _loaded(self, passages: list[Any], passage_id: str | None) -> None:
        self.text.setHtml(self._html([(p.id, p.text, p.locator or p.heading) for p in passages], passage_id))
        if passage_id:
            self.text.scrollToAnchor(passage_id)
        found = next((p for p in passages if p.id == passage_id), None)
        if found is not None and (found.locator or found.heading):
            self.where.setText(" · ".join(x for x in (found.locator or found.heading, self.path) if x))

    @staticmethod
    def _html(passages: list[tuple[str, str, str | None]], highlight: str | None) -> str:
        import html

        out = []
        for uid, text, where in passages:
            body = html.escape(text).replace("\n", "<br>")
            head = f"<div style='color:#6B7280; font-size:small'>{html.escape(where)}</div>" if where else ""
            style = " style='background-color:#FEF3C7; color:#111827'" if uid and uid == highlight else ""
            out.append(f"<a name='{html.escape(uid)}'></a>{head}<p{style}>{body}</p>")
        return "".join(out)

    def highlighted(self) -> str | None:
        """The highlighted passage's text (tests read this)."""
        import re

        m = re.search(r"background-color:#fef3c7[^>]*>(.*?)</p>", self.text.toHtml(), re.S | re.I)
        return re.sub(r"<[^>]+>", "", m[1]) if m else None

    def open_file(self) -> bool:
        failure = open_file(self.path)
        if failure is None:
            self.result.setStyleSheet("")
            self.result.setText(f"Opened {Path(self.path).name} in its application.")
            return True
        self.result.setStyleSheet("color: #DC2626;")
        self.result.setText(failure)
        return False
