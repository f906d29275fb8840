"""The main window: a sidebar of screens (Memories, Ask, Documents, Activity, Settings) and a status bar.

Files and folders dropped anywhere on the window are ingested (progress shows in Documents). Closing the
window hides it to the tray when a tray exists (the app decides; see `close_to_tray`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QByteArray, QEvent, QRect, QSettings, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from . import drops, formatting, icons, theme
from .ask_panel import AskPanel
from .audit_view import AuditView
from .bridge import Bridge, EngineInfo

if TYPE_CHECKING:
    from .bridge import HealthReport
from .conflicts_view import ConflictsView
from .documents_view import DocumentsView
from .first_run import FirstRunCard
from .graph_view import GraphView
from .memory_browser import MemoryBrowser
from .pending_deletes import UNDO_SECONDS
from .settings_view import SettingsView
from .status_bar import StatusBar
from .widgets import scroller, usable_area

PAGES = (("Memories", "memories"), ("Ask", "ask"), ("Documents", "documents"), ("Graph", "graph"),
         ("Conflicts", "conflicts"), ("Activity", "activity"), ("Settings", "settings"))
PAGE_KEYS = tuple(key for _label, key in PAGES)


class _WidthFirstLayout(QVBoxLayout):
    """A layout that does not ask for more height as its width shrinks (its wrapped labels would): inside
    a scroll area it then scrolls only when the window is smaller than its minimum size."""

    def hasHeightForWidth(self) -> bool:  # noqa: N802 - Qt override
        return False


class MainWindow(QMainWindow):
    first_painted = Signal()
    hidden_to_tray = Signal()
    capture_requested = Signal()
    quit_requested = Signal()
    pages_built = Signal()
    projects_loaded = Signal(list)  # the projects, each time they are read again (the quick-capture box follows)

    def __init__(self, bridge: Bridge, *, undo_seconds: float = UNDO_SECONDS, state_file: Path | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.close_to_tray = False
        self._painted = False
        self._placed = False
        self._settling_until = 0.0
        self._settle = QTimer(self, singleShot=True, interval=50, timeout=self.keep_on_screen)
        self._state = QSettings(str(state_file), QSettings.Format.IniFormat) if state_file else None
        self.setWindowTitle("Personal LLM")
        self.setWindowIcon(icons.app_icon())
        self.setAcceptDrops(True)

        # Only the first screen is built before the first paint; the others follow right after it
        # (build_pages), which keeps the window's first appearance fast.
        self.memories = MemoryBrowser(bridge, undo_seconds=undo_seconds)
        self._undo_seconds = undo_seconds
        self.pages = QStackedWidget()
        self.pages.addWidget(self.memories)
        self._built = False
        self._shown_row = -1  # the page shown (the sidebar's row)

        self._conflicts = 0  # shown beside "Conflicts" in the sidebar
        self.sidebar = QListWidget()
        self.sidebar.setObjectName("Sidebar")
        self.sidebar.setFixedWidth(self.WIDE_SIDEBAR)
        self.sidebar.setIconSize(QSize(20, 20))
        self.sidebar.setFrameShape(QListWidget.Shape.NoFrame)
        self.sidebar.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.sidebar.currentRowChanged.connect(self._page_selected)
        self.sidebar.itemClicked.connect(lambda _item: self._focus_page())
        self._build_sidebar()

        self.first_run = FirstRunCard()
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.setSpacing(0)
        card_box = QWidget()
        cb = QVBoxLayout(card_box)
        cb.setContentsMargins(20, 12, 20, 0)
        cb.addWidget(self.first_run)
        rl.addWidget(card_box)
        rl.addWidget(self.pages, 1)
        self._card_box = card_box
        card_box.hide()
        self.first_run.dismissed.connect(card_box.hide)
        self.first_run.dismissed.connect(lambda: self._fit_later.start())

        central = QWidget()
        layout = QHBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.sidebar)
        # a window smaller than its usual minimum (a small screen at a large scale: 800x600 at 200% is
        # 400x300) scrolls the page, laid out as in a minimum-size window, instead of squeezing its rows
        # into each other or off the screen; at any larger size the pages fit as they are, no scroll bar
        holder = QWidget()
        hl = _WidthFirstLayout(holder)  # the scroll area sizes it to the window, not to its wrapped text
        hl.setContentsMargins(0, 0, 0, 0)
        hl.addWidget(right)
        holder.setMinimumSize(self.PAGE_MINIMUM)
        self._holder = holder
        self.page_scroll = scroller(holder)
        self._fit_later = QTimer(self, singleShot=True, interval=0, timeout=self._fit_page_height)
        self.memories.installEventFilter(self)
        layout.addWidget(self.page_scroll, 1)
        self.setCentralWidget(central)
        self.status = StatusBar()
        self.setStatusBar(self.status)

        self._wire()
        self._shortcuts()
        self._build_menu()
        self.sidebar.setCurrentRow(0)
        self.restore_geometry()

    # ------------------------------------------------------------------------------------------------
    # size and place: remembered, and always on a screen whatever its size and scale
    # ------------------------------------------------------------------------------------------------
    DEFAULT_SIZE = QSize(1080, 700)
    MINIMUM_SIZE = QSize(640, 420)
    PAGE_MINIMUM = QSize(560, 360)  # below this the page scrolls; beside a labelled sidebar it keeps this width
    WIDE_SIDEBAR = 184
    NARROW_SIDEBAR = 150
    SIDEBAR_ITEM_EXTRA = 48  # beside an item's text and icon: the icon's gap, #Sidebar::item's padding and margin

    def screen_area(self) -> QRect:
        return usable_area(self.screen())

    def restore_geometry(self) -> None:
        """The size and place it had when last closed, kept on a screen; else a size that fits this one."""
        area = self.screen_area()
        self.setMinimumSize(min(self.MINIMUM_SIZE.width(), area.width()),
                            min(self.MINIMUM_SIZE.height(), area.height()))
        saved = self._state.value("window/geometry") if self._state is not None else None
        if isinstance(saved, QByteArray) and self.restoreGeometry(saved):
            self.keep_on_screen()
            return
        size = self.DEFAULT_SIZE.boundedTo(QSize(int(area.width() * 0.92), int(area.height() * 0.92)))
        self.resize(size.expandedTo(self.minimumSize()))
        self.move(area.center().x() - self.width() // 2, area.center().y() - self.height() // 2)
        self.keep_on_screen()

    def keep_on_screen(self) -> None:
        """Shrink to the screen it is on (or the primary one) and move it fully inside."""
        screens = QApplication.screens()
        frame = self.frameGeometry()
        area = next((usable_area(s) for s in screens if usable_area(s).intersects(frame)), self.screen_area())
        extra_w, extra_h = frame.width() - self.width(), frame.height() - self.height()  # the title bar, borders
        width, height = min(self.width(), area.width() - extra_w), min(self.height(), area.height() - extra_h)
        if self.minimumWidth() > width or self.minimumHeight() > height:  # a tiny screen: the frame fits too
            self.setMinimumSize(min(self.minimumWidth(), width), min(self.minimumHeight(), height))
        if (width, height) != (self.width(), self.height()):
            self.resize(width, height)
        frame = self.frameGeometry()
        x = max(area.left(), min(frame.left(), area.right() - frame.width() + 1))
        y = max(area.top(), min(frame.top(), area.bottom() - frame.height() + 1))
        if (x, y) != (frame.left(), frame.top()):  # only when it must: a move made while the window manager
            self.move(x, y)  # had not told the frame yet put the window a title bar lower at every start

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        if not self._placed:  # the frame (title bar, borders) is known once shown: fit it on the screen too
            self._placed = True
            # A window manager frames and places the window after it is shown, on its own time (openbox put
            # it where its bottom and the status bar fell off the screen): look again whenever it moves it
            # in the first seconds.
            self._settling_until = time.monotonic() + self.SETTLE_SECONDS
            QTimer.singleShot(0, self.keep_on_screen)

    SETTLE_SECONDS = 3.0

    @property
    def settling(self) -> bool:
        """Still in its first seconds on screen, when a move made by the window manager puts it back on the
        screen (a late one shrinks it to the screen's size too)."""
        return time.monotonic() < self._settling_until or self._settle.isActive()

    def _placed_by_window_manager(self) -> None:
        if self._placed and time.monotonic() < self._settling_until:
            self._settle.start()

    def moveEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().moveEvent(event)
        self._placed_by_window_manager()

    def save_geometry(self) -> None:
        if self._state is not None:
            self._state.setValue("window/geometry", self.saveGeometry())
            self._state.sync()

    ICONS_ONLY = 56

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._fit_sidebar()
        self.status.fit()  # its parts in the window's width (a bar that needs more runs past the window's edge)
        if self.first_run.isVisible():
            self.first_run.fit_height(self.height())

    def _build_menu(self) -> None:
        """File: capture, add documents, import and export, back up, quit. The keys shown beside an entry are
        the window's own shortcuts (named after a tab, so they are not registered twice)."""
        file_menu = self.menuBar().addMenu("&File")
        file_menu.setToolTipsVisible(True)
        self.capture_action = file_menu.addAction("Quick &capture…\tCtrl+N")
        self.capture_action.triggered.connect(self.capture_requested.emit)
        file_menu.addSeparator()
        self.add_files_action = file_menu.addAction("&Add files…")
        self.add_files_action.triggered.connect(lambda: self._documents()._browse())
        self.add_folder_action = file_menu.addAction("Add a &folder…")
        self.add_folder_action.triggered.connect(lambda: self._documents()._browse_folder())
        file_menu.addSeparator()
        self.import_action = file_menu.addAction("&Import…")
        self.import_action.setToolTip("Import your history: a ChatGPT or Claude export, or an Obsidian vault")
        self.import_action.triggered.connect(self.open_import)
        self.restore_export_action = file_menu.addAction("Import an e&xport…")
        self.restore_export_action.setToolTip("Merge in a file exported from Personal LLM (nothing is added twice)")
        self.restore_export_action.triggered.connect(lambda: self._sections().transfer.open_import())
        self.export_action = file_menu.addAction("&Export…")
        self.export_action.setToolTip("Everything you stored, in one file (encrypted with a passphrase)")
        self.export_action.triggered.connect(lambda: self._sections().transfer.open_export())
        file_menu.addSeparator()
        self.backup_action = file_menu.addAction("&Back up now")
        self.backup_action.setToolTip("An encrypted snapshot in the backup folder (Settings → Backups)")
        self.backup_action.triggered.connect(self.back_up_now)
        self.settings_action = file_menu.addAction("&Settings")
        self.settings_action.triggered.connect(lambda: self.show_page("settings"))
        file_menu.addSeparator()
        self.quit_action = file_menu.addAction("&Quit\tCtrl+Q")
        self.quit_action.triggered.connect(self.quit_requested.emit)

    def _documents(self) -> Any:
        self.build_pages()
        return self.documents

    def _sections(self) -> Any:
        self.build_pages()
        return self.settings.sections

    def back_up_now(self) -> None:
        """File → Back up now: the snapshot Settings → Backups takes, said in the status bar."""
        box = self._sections().backups
        if box.scheduler.running:
            self.status.post("A backup is being made already.")
            return
        self.status.post("Backing up…", 30)
        box.scheduler.run(failed=lambda message: self.status.post(f"The backup failed: {message}", 10),
                          done=lambda snap: self.status.post(f"Backed up ({formatting.size(snap.bytes)})."))

    def open_import(self) -> None:
        from .import_dialog import ImportDialog

        self.import_dialog = ImportDialog(self.bridge, self)
        self.import_dialog.open()

    # ------------------------------------------------------------------------------------------------
    def build_pages(self) -> None:
        """Build Ask, Documents, Activity and Settings (idempotent; before the engine opens)."""
        if self._built:
            return
        self._built = True
        b = self.bridge
        self.ask = AskPanel(b)
        self.documents = DocumentsView(b)
        self.graph = GraphView(b, undo_seconds=self._undo_seconds)
        self.conflicts = ConflictsView(b)
        self.activity = AuditView(b)
        self.settings = SettingsView(b)
        for page in (self.ask, self.documents, self.graph, self.conflicts, self.activity, self.settings):
            self.pages.addWidget(page)
            page.installEventFilter(self)  # its minimum height changed: the scroll area follows
        for page in (self.graph, self.conflicts):
            page.memory_opened.connect(self._reveal_memory)
            page.status_posted.connect(self.status.post)
        self.settings.status_posted.connect(self.status.post)
        self.conflicts.count_changed.connect(self._conflicts_counted)
        b.ingest_progressed.connect(
            lambda p: self.status.set_work(f"Adding documents… {p.files_done}/{p.files_total}"))
        b.ingest_finished.connect(lambda _r: self.status.set_work(""))
        self.documents.status_posted.connect(self.status.post)
        self.ask.memory_opened.connect(self._reveal_memory)
        self.ask.passage_requested.connect(self.show_passage)
        self.activity.memory_opened.connect(self._reveal_memory)
        self.activity.documents_opened.connect(lambda: self.show_page("documents"))
        self._page_selected(self.sidebar.currentRow())
        self.pages_built.emit()

    @property
    def is_built(self) -> bool:
        return self._built

    def show_page(self, name: str) -> None:
        index = PAGE_KEYS.index(name)
        self.sidebar.setCurrentRow(index)

    def bring_to_front(self) -> None:
        if self.isMinimized():
            self.showNormal()
        self.show()
        self.raise_()
        self.activateWindow()

    def open_ask(self) -> None:
        self.bring_to_front()
        self.show_page("ask")
        self.ask.focus_question()

    def ingest(self, paths: list[str]) -> None:
        self.build_pages()
        if self.documents.ingest(paths):
            self.show_page("documents")

    def show_passage(self, source: Any) -> None:
        """A document source (of an answer): its passage inside the app, highlighted, with its page or heading,
        and Open file as a second step that says when it failed."""
        self.build_pages()
        self.documents.show_passages(source.document_id or "", source.document_title
                                     or Path(source.document_path or "").name or "Document",
                                     source.document_path or "", source.id, source.locator, source.text)

    def show_first_run(self, info: EngineInfo, health: HealthReport | None) -> None:
        """The welcome card of a first run, brought up to date; never again once the user dismissed it."""
        if self.first_run.was_dismissed:
            return
        self.first_run.show_report(info, health)
        self.first_run.fit_height(self.height())
        self._card_box.show()
        self._fit_later.start()

    def show_error(self, message: str) -> None:
        QMessageBox.warning(self, "Personal LLM", message)

    # ------------------------------------------------------------------------------------------------
    def _build_sidebar(self) -> None:
        self.sidebar.clear()
        color = theme.text_color()
        for label, icon in PAGES:
            self.sidebar.addItem(QListWidgetItem(icons.line_icon(icon, color), label))
        self._fit_sidebar()

    def _sidebar_label(self, row: int) -> str:
        label, key = PAGES[row]
        return f"{label} ({self._conflicts})" if key == "conflicts" and self._conflicts else label

    def _fit_sidebar(self) -> None:
        """The sidebar is as wide as its longest label (a count included), so no label is ever cut short
        ("C…"); when the page beside it would drop below its minimum width, it shows icons only and each
        icon's tooltip names its page."""
        bar = self.sidebar
        labels = [self._sidebar_label(i) for i in range(bar.count())]
        for i, label in enumerate(labels):
            bar.item(i).setToolTip(f"{label} (Ctrl+{i + 1})")
        metrics = bar.fontMetrics()
        # an item's width: its text, the icon and the gap beside it, the style sheet's padding and margin
        text_need = max((metrics.horizontalAdvance(label) for label in labels), default=0)
        need = text_need + bar.iconSize().width() + self.SIDEBAR_ITEM_EXTRA + 2 * bar.frameWidth()
        if bar.count() and bar.count() * bar.sizeHintForRow(0) > bar.height():  # a short window: it scrolls
            need += bar.verticalScrollBar().sizeHint().width()
        page_minimum = self.PAGE_MINIMUM.width()
        holder = getattr(self, "_holder", None)
        if holder is not None and holder.minimumHeight() > self.page_scroll.viewport().height():
            page_minimum += self.page_scroll.verticalScrollBar().sizeHint().width()  # the page scrolls
        with_labels = self.width() - need >= page_minimum
        width = max(need, self.WIDE_SIDEBAR if self.width() >= 1000 else self.NARROW_SIDEBAR) if with_labels \
            else self.ICONS_ONLY
        if width > need and self.width() - width < page_minimum:
            width = need
        bar.setFixedWidth(width)
        for i, label in enumerate(labels):
            text = label if with_labels else ""
            if bar.item(i).text() != text:
                bar.item(i).setText(text)

    def _wire(self) -> None:
        b = self.bridge
        b.opened.connect(self._opened)
        b.changed.connect(self._engine_changed)
        b.model_state_changed.connect(self.status.set_model_state)
        b.failed.connect(self.show_error)
        self.memories.status_posted.connect(self.status.post)
        self.memories.passages.passage_requested.connect(self.show_passage)
        b.paused_changed.connect(self.status.set_paused)
        self.status.resume_clicked.connect(lambda: b.set_paused(False))

    def _shortcuts(self) -> None:
        for i in range(len(PAGES)):
            QShortcut(QKeySequence(f"Ctrl+{i + 1}"), self, activated=lambda i=i: self._go_to(i))
        QShortcut(QKeySequence("Ctrl+N"), self, activated=self.capture_requested.emit)
        QShortcut(QKeySequence("Ctrl+K"), self, activated=self.open_ask)
        QShortcut(QKeySequence.StandardKey.Find, self,
                  activated=lambda: (self.show_page("memories"), self.memories.focus_search()))
        QShortcut(QKeySequence.StandardKey.Quit, self, activated=self.quit_requested.emit)
        QShortcut(QKeySequence.StandardKey.Close, self, activated=self.close)

    def _go_to(self, row: int) -> None:
        self.sidebar.setCurrentRow(row)
        self._focus_page()

    def _focus_page(self) -> None:
        """Chosen by click or shortcut, a page takes the keyboard: Memories its search, Ask its question."""
        key = PAGES[self.sidebar.currentRow()][1]
        if key == "memories":
            self.memories.focus_search()
        elif key == "ask" and self._built:
            self.ask.focus_question()

    def _page_selected(self, row: int) -> None:
        if self._built and self._shown_row == PAGE_KEYS.index("settings") != row:
            self.settings.save_pending()  # left with changes not saved: they are kept, as a memory's edit is
        self._shown_row = row
        if row > 0:
            self.build_pages()
        if 0 <= row < self.pages.count():
            self.pages.setCurrentIndex(row)
            self._fit_page_height()

    def _fit_page_height(self) -> None:
        """The page area is at least as tall as the page shown needs (the welcome card above it included): a
        window shorter than that scrolls the page instead of squeezing it, which laid the Graph's drawing
        over its list of facts at 720x450."""
        page = self.pages.currentWidget()
        need = page.minimumSizeHint().height() if page is not None else 0
        if self._card_box.isVisible():
            need += self._card_box.sizeHint().height()
        height = max(self.PAGE_MINIMUM.height(), need)
        if self._holder.minimumHeight() != height:
            self._holder.setMinimumHeight(height)
            self._fit_sidebar()

    def eventFilter(self, watched, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.LayoutRequest and watched is self.pages.currentWidget():
            self._fit_later.start()
        return super().eventFilter(watched, event)

    def _opened(self, _info: EngineInfo) -> None:
        self._refresh_projects()
        self._refresh_counts()

    def _engine_changed(self, changes: Any) -> None:
        if changes.memories or changes.documents:
            self._refresh_projects()
            self._refresh_counts()

    def _refresh_projects(self) -> None:
        def done(projects: list[str]) -> None:
            self.memories.set_projects(projects)
            if self._built:
                self.ask.set_projects(projects)
            self.projects_loaded.emit(projects)

        self.bridge.projects(done)

    def _refresh_counts(self) -> None:
        def done(stats: Any) -> None:
            parts = [formatting.plural(stats.memories, "memory").replace("memorys", "memories")]
            if stats.documents:
                parts.append(formatting.plural(stats.documents, "document"))
            if stats.conflicts:
                parts.append(f"{stats.conflicts} to resolve")
            self.status.set_count(" · ".join(parts))

        self.bridge.stats(done)

    def _conflicts_counted(self, n: int) -> None:
        self._conflicts = n
        self._fit_sidebar()

    def _reveal_memory(self, uid: str) -> None:
        self.show_page("memories")
        self.memories.reveal(uid)

    # ------------------------------------------------------------------------------------------------
    # Qt overrides
    # ------------------------------------------------------------------------------------------------
    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.PaletteChange:
            self._build_sidebar_icons()
        return super().event(event)

    def _build_sidebar_icons(self) -> None:
        color = theme.text_color()
        for i, (_label, icon) in enumerate(PAGES):
            item = self.sidebar.item(i)
            if item is not None:
                item.setIcon(icons.line_icon(icon, color))

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().paintEvent(event)
        if not self._painted:
            self._painted = True
            self.first_painted.emit()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self.save_geometry()
        if self.close_to_tray:
            event.ignore()
            self.hide()
            self.hidden_to_tray.emit()
        else:
            event.accept()
            self.quit_requested.emit()

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt override
        if drops.local_paths(event.mimeData()):
            event.acceptProposedAction()

    def dragMoveEvent(self, event) -> None:  # noqa: N802 - Qt override
        if drops.local_paths(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt override
        paths = drops.local_paths(event.mimeData())
        if paths:
            event.acceptProposedAction()
            self.ingest(paths)

