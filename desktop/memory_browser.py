"""The memory browser: search as you type, filter by kind/project/time/state, edit, delete with undo."""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from PySide6.QtCore import (
    QAbstractTableModel,
    QEvent,
    QItemSelection,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSize,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QColor, QKeyEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QCalendarWidget,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QSplitter,
    QStackedWidget,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
    QWidgetAction,
)

from . import formatting, icons, theme
from .bridge import ACTIVITY_SOURCE, Bridge
from .passage_hits import PassageHits
from .pending_deletes import UNDO_SECONDS, PendingDeletes
from .widgets import Banner, EmptyState, UndoBar, button, muted, page_title, refill_editable, scroller

SEARCH_DEBOUNCE_MS = 180
OPENED_AFTER_MS = 1500
LIST_PAGE = 200  # memories read at a time; the next page as the user scrolls near the end
FETCH_WHEN_ROWS_LEFT = 40  # ... this many rows before it
REFRESH_AT_MOST = 5000  # rows read again when many memories change at once (deeper, the list starts again at the top)
LIVE_AT_MOST = 200  # memories changed by one write that the list updates one by one (more: it reads its rows again)
LIVE_AFTER_MS = 80  # writes coming in a burst are shown together
SEARCH_PAGE = 100  # search results at a time (the best first); more when scrolled to their end
SEARCH_MAX = 1000
TIME_FILTERS = (("Any time", None), ("Today", 1), ("Past 7 days", 7), ("Past 30 days", 30), ("Past year", 365))
SHOW_FILTERS = (("Active", "active"), ("Archived", "archived"), ("Conflicts", "conflicts"), ("All", "all"))
PROJECT_FILTER_MAX = 160  # px: the widest the project filter asks to be; the four filters fit a 640-wide window
KIND_FILTERS = (("All kinds", None), ("Facts", "fact"), ("Events", "episodic"), ("How-tos", "procedural"))
ALL_PROJECTS = "All projects"
NO_PROJECT = "No project"


@dataclass(frozen=True)
class Row:
    id: str
    kind: str
    text: str
    project: str | None
    when: str | None
    created_at: str | None
    archived: bool
    conflict_with: str | None
    importance: float = 0.5
    conflict: str | None = None
    passage: str | None = None  # a search hit on a long memory: the part that matched
    source: str = "user"
    waiting: bool | str = False  # written here, waiting to be sent to the server (a str: why the server refused it)

    @classmethod
    def of(cls, item: Any) -> Row:
        """From an engine Memory or Hit."""
        return cls(id=item.id, kind=item.kind, text=item.text, project=item.project,
                   when=item.at or item.created_at, created_at=item.created_at,
                   archived=bool(item.archived), conflict_with=item.conflict_with,
                   importance=float(item.importance), conflict=getattr(item, "conflict", None),
                   passage=getattr(item, "passage", None), source=getattr(item, "source", "user"),
                   waiting=(getattr(item, "meta", None) or {}).get("waiting") or False)


class MemoryModel(QAbstractTableModel):
    """The Memories list's rows, newest first (or a search's, best first): only the rows read so far, with the
    next page read when the view asks for it (`canFetchMore`/`fetchMore` → `more_wanted`). The view draws only
    the rows in sight, so a list of 100,000 costs what a list of 100 does."""

    HEADERS = ("Memory", "Kind", "Project", "When")
    more_wanted = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.rows: list[Row] = []
        self._keys: list[float] = []  # each row's place in the listing: minus its time, ascending like the rows
        self._at: dict[str, int] | None = {}  # uid → row number; None until asked for again after a move
        self.more = False  # the store holds more rows than these (the view may ask for them)
        self.projects: set[str] = set()  # the projects of the rows read (the Project column's width)
        self._now = datetime.now().astimezone()
        self._warn = QColor("#D97706")

    # ---- Qt's model interface -------------------------------------------------------------------------------
    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008,N802
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008,N802
        return 0 if parent.isValid() else len(self.HEADERS)

    def headerData(self, section: int, orientation: Qt.Orientation,  # noqa: N802 - Qt override
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self.HEADERS[section]
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self.rows):
            return None
        r, col = self.rows[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if col == 0:
                return "…" + formatting.one_line(r.passage) if r.passage else formatting.one_line(r.text)
            if col == 1:
                return "⚠ Conflict" if r.conflict_with else "Archived" if r.archived else formatting.kind_label(r.kind)
            if col == 2:
                return r.project or ""
            if r.waiting:
                return "Not sent" if isinstance(r.waiting, str) else "Waiting to send"
            return formatting.when(r.when, self._now)
        if role == Qt.ItemDataRole.UserRole:
            return r.id
        if role == Qt.ItemDataRole.ToolTipRole and col == 0:
            return r.conflict or (r.passage or r.text)[:1000]
        if role == Qt.ItemDataRole.ToolTipRole and col == 2:
            return r.project  # shown whole where the column cuts it
        if role == Qt.ItemDataRole.ToolTipRole and col == 3 and r.waiting:
            return (f"The server refused it: {r.waiting}" if isinstance(r.waiting, str) else
                    "Kept on this computer, encrypted, until the server can be reached; then sent.")
        if role == Qt.ItemDataRole.ForegroundRole:
            if col == 3 and r.waiting:
                return self._warn
            if col == 1 and r.conflict_with:
                return self._warn
            if r.archived and col in (0, 1):
                return theme.muted_color()
        return None

    def canFetchMore(self, parent: QModelIndex | QPersistentModelIndex) -> bool:  # noqa: N802 - Qt override
        return not parent.isValid() and self.more

    def fetchMore(self, parent: QModelIndex | QPersistentModelIndex) -> None:  # noqa: N802 - Qt override
        if not parent.isValid() and self.more:
            self.more_wanted.emit()

    # ---- the browser's ----------------------------------------------------------------------------------------
    def row_of(self, uid: str) -> int | None:
        if self._at is None:
            self._at = {r.id: i for i, r in enumerate(self.rows)}
        return self._at.get(uid)

    def get(self, uid: str) -> Row | None:
        i = self.row_of(uid)
        return None if i is None else self.rows[i]

    def reset(self, rows: list[Row], keys: list[float] | None = None) -> None:
        self.beginResetModel()
        self._now = datetime.now().astimezone()  # once a reset: asking for the local time zone costs
        self.rows = list(rows)
        self.projects = {r.project for r in rows if r.project}
        self._keys = keys if keys is not None else [order(r) for r in rows]
        self._at = None
        self.endResetModel()

    def append(self, rows: list[Row], keys: list[float] | None = None) -> None:
        keys = keys if keys is not None else [order(r) for r in rows]
        fresh = [(r, k) for r, k in zip(rows, keys, strict=True) if self.row_of(r.id) is None]
        if not fresh:
            return
        start = len(self.rows)
        self.projects.update(r.project for r, _ in fresh if r.project)
        self.beginInsertRows(QModelIndex(), start, start + len(fresh) - 1)
        for r, k in fresh:
            self.rows.append(r)
            self._keys.append(k)
            if self._at is not None:
                self._at[r.id] = len(self.rows) - 1
        self.endInsertRows()

    def remove(self, uid: str) -> bool:
        i = self.row_of(uid)
        if i is None:
            return False
        self.beginRemoveRows(QModelIndex(), i, i)
        del self.rows[i]
        del self._keys[i]
        self._at = None
        self.endRemoveRows()
        return True

    def put(self, row: Row) -> None:
        """A row changed or new in the listing (newest first): in place when its time is the same, else moved to
        where its time puts it — unless that is past the rows read so far (the next page brings it)."""
        i = self.row_of(row.id)
        key = order(row)
        if row.project:
            self.projects.add(row.project)
        if i is not None and self._keys[i] == key:
            self.rows[i] = row
            self.dataChanged.emit(self.index(i, 0), self.index(i, len(self.HEADERS) - 1))
            return
        if i is not None:
            self.remove(row.id)
        at = bisect.bisect_left(self._keys, key)  # before the rows of the same time: a newer row sorts first
        if at == len(self.rows) and self.more:
            return
        self.beginInsertRows(QModelIndex(), at, at)
        self.rows.insert(at, row)
        self._keys.insert(at, key)
        self._at = None
        self.endInsertRows()


def order(row: Row) -> float:
    """A row's place in the listing (newest first): minus its time, so the rows' keys ascend."""
    try:
        return -datetime.fromisoformat((row.when or "").replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


@dataclass(frozen=True)
class Page:
    """A page of the listing as the list shows it: its rows, their places, the listing's total, where it goes on."""

    rows: list[Row]
    keys: list[float]
    total: int | None
    next: str | None


def rows_of(page: Any) -> Page:
    """An engine MemoryPage as rows and their places (on the reader thread: the UI thread only shows them)."""
    rows = [Row.of(m) for m in page.memories]
    return Page(rows, [order(r) for r in rows], page.total, page.next)


class MemoryBrowser(QWidget):
    count_changed = Signal(int)
    status_posted = Signal(str)

    def __init__(self, bridge: Bridge, undo_seconds: float = UNDO_SECONDS, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.pending = PendingDeletes(undo_seconds, self)
        self.pending.expired.connect(self._forget)
        self._generation = 0
        self._reveal: str | None = None
        self._current: Row | None = None
        self._loaded = False
        # the list is read a page at a time, the next one as the user scrolls near its end (any size of store)
        self._total = 0  # how many the listing (or, searching, the store under these filters) holds
        self._next: str | None = None  # where the next page starts; None: the last page is shown
        self._fetching = False
        self._listing_key: tuple[Any, ...] | None = None  # the filters of the rows shown
        self._search_k = SEARCH_PAGE
        self._searching = ""
        self._changed: set[str] = set()  # memories another write changed, to show (LIVE_AFTER_MS after the first)
        self._reading = False  # the rows are being read again: changes are shown once they are in
        self._live = QTimer(self, singleShot=True, interval=LIVE_AFTER_MS)
        self._live.timeout.connect(self._show_changes)

        self.search = SearchField()
        self.search.setPlaceholderText("Search your memories…  (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        self.search.addAction(icons.line_icon("search", theme.muted_color()), QLineEdit.ActionPosition.LeadingPosition)
        self.search.textChanged.connect(self._search_changed)
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(SEARCH_DEBOUNCE_MS)
        self._debounce.timeout.connect(self.refresh)
        self.passages = PassageHits(bridge)  # the documents' passages that match the search
        self._debounce.timeout.connect(lambda: self.passages.search(self.search.text().strip()))

        self.kind = self._combo(KIND_FILTERS)
        self.project = QComboBox()
        self.project.addItem(ALL_PROJECTS, None)
        self.project.currentIndexChanged.connect(lambda _i: self.refresh())
        self.period = self._combo(TIME_FILTERS)
        self.show_filter = self._combo(SHOW_FILTERS)
        filters = QHBoxLayout()
        filters.setSpacing(8)
        for w in (self.kind, self.project, self.period, self.show_filter):
            filters.addWidget(w)
        filters.addStretch(1)
        for combo in (self.kind, self.period, self.show_filter):  # never cut their own words
            combo.setMinimumWidth(combo.sizeHint().width())
        self.count = muted("")
        self.count.setWordWrap(False)
        # under a search found (partly) by words alone: why (the model loading, memories waiting for vectors)
        self.words_only = muted("")
        self.words_only.setObjectName("WordsOnly")
        self.words_only.setWordWrap(True)
        self.words_only.hide()

        self.model = MemoryModel(self)
        self.model.more_wanted.connect(self._fetch_more)
        # a table, not a tree: a tree lays out every row again at each page added (seconds at 100,000)
        self.tree = QTableView()
        self.tree.setModel(self.model)
        self.tree.setShowGrid(False)
        self.tree.setWordWrap(False)
        self.tree.setCornerButtonEnabled(False)
        rows = self.tree.verticalHeader()
        rows.hide()
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)  # one height: no row is asked its own
        rows.setDefaultSectionSize(self.tree.fontMetrics().height() + 10)
        self.tree.setHorizontalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.tree.setAlternatingRowColors(False)
        self.tree.setTabKeyNavigation(False)  # Tab leaves the list, as it did the tree
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.tree.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in (1, 2, 3):  # as wide as their longest value (and their title), never cut: _fit_columns
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Fixed)
        header.setStretchLastSection(False)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        header.setHighlightSections(False)
        header.setMinimumSectionSize(header.fontMetrics().horizontalAdvance("Memory") + 24)
        self._projects_fitted: set[str] = set()
        self._project_room: int | None = None
        self._fit_columns()
        self.tree.selectionModel().selectionChanged.connect(lambda _new, _old: self._selection_changed())
        # a memory shown in the editor for a moment counts as opened (not each row the arrow keys pass over)
        self._open_timer = QTimer(self, singleShot=True, interval=OPENED_AFTER_MS)
        self._open_timer.timeout.connect(self._opened)
        self.tree.installEventFilter(self)  # Ctrl+C copies the selected memories (the view's own copy: one cell)
        self.tree.verticalScrollBar().valueChanged.connect(lambda _v: self._maybe_fetch_more())
        self.tree.verticalScrollBar().rangeChanged.connect(lambda _lo, _hi: self._maybe_fetch_more())
        self.empty = EmptyState()
        self.list_stack = QStackedWidget()
        self.list_stack.addWidget(self.tree)
        self.list_stack.addWidget(self.empty)

        self.editor = MemoryEditor()
        self.editor.save_clicked.connect(self._save)
        self.editor.delete_clicked.connect(self.delete_selected)
        self.editor.keep_clicked.connect(self._keep)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.list_stack)
        splitter.addWidget(self.editor)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        self.editor.setMinimumWidth(250)
        splitter.setSizes([700, 300])
        splitter.setChildrenCollapsible(False)
        self.splitter = splitter
        # Narrow (a small window, a large scale): the list keeps the width and the editor becomes a drawer
        # over its right side, opened by choosing a memory and closed with Esc or ✕.
        self.drawer = QFrame(self)
        self.drawer.setObjectName("Drawer")
        self.drawer.setFrameShape(QFrame.Shape.StyledPanel)
        self.drawer.setAutoFillBackground(True)
        self.drawer_close = QToolButton()
        self.drawer_close.setText("✕")
        self.drawer_close.setToolTip("Close (Esc)")
        self.drawer_close.clicked.connect(self.close_drawer)
        drawer_head = QHBoxLayout()
        drawer_head.addWidget(muted("Memory"), 1)
        drawer_head.addWidget(self.drawer_close)
        self._drawer_layout = QVBoxLayout(self.drawer)
        self._drawer_layout.setContentsMargins(10, 8, 10, 8)
        self._drawer_layout.addLayout(drawer_head)
        self._drawer_scroll = scroller(across=False)  # a short window scrolls the editor instead of squeezing it
        self._drawer_layout.addWidget(self._drawer_scroll, 1)
        self.drawer.hide()
        self.compact = False
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self.drawer, activated=self.close_drawer,
                  context=Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.tree.activated.connect(lambda _index: self.open_drawer())
        self.tree.clicked.connect(lambda _index: self.open_drawer())

        self.undo_bar = UndoBar()
        self.undo_bar.undo_clicked.connect(self.undo_delete)
        self.banner = Banner()

        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 12)
        layout.setSpacing(10)
        # the count sits beside the title, not at the end of the filters: with it there, the filters needed
        # more than the page has in a window of the minimum size (640 wide) and were drawn over each other
        title_row = QHBoxLayout()
        title_row.addWidget(page_title("Memories"))
        title_row.addStretch(1)
        title_row.addWidget(self.count, 0, Qt.AlignmentFlag.AlignBottom)
        layout.addLayout(title_row)
        layout.addWidget(self.banner)
        layout.addWidget(self.search)
        layout.addLayout(filters)
        layout.addWidget(self.words_only)
        layout.addWidget(self.passages)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.undo_bar)

        QShortcut(QKeySequence.StandardKey.Delete, self.tree, activated=self.delete_selected,
                  context=Qt.ShortcutContext.WidgetShortcut)

        bridge.opened.connect(lambda _info: self.refresh())
        bridge.changed.connect(self._engine_changed)
        self._show_empty("Opening your memory…", "")

    # ------------------------------------------------------------------------------------------------
    # public
    # ------------------------------------------------------------------------------------------------
    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def reveal(self, uid: str) -> None:
        """Show one memory (from a clicked source): clear filters, select it, open it in the editor."""
        self._reveal = uid
        for combo in (self.kind, self.project, self.period):
            combo.blockSignals(True)
            combo.setCurrentIndex(0)
            combo.blockSignals(False)
        self.show_filter.blockSignals(True)
        self.show_filter.setCurrentIndex(3)  # All: it may be archived
        self.show_filter.blockSignals(False)
        self.search.blockSignals(True)
        self.search.clear()
        self.search.blockSignals(False)
        self.refresh()

    def visible_ids(self) -> list[str]:
        return [r.id for r in self.model.rows]

    def select(self, uid: str) -> bool:
        i = self.model.row_of(uid)
        if i is None:
            return False
        index = self.model.index(i, 0)
        self.tree.setCurrentIndex(index)  # selects that row alone, as a click does
        self.tree.scrollTo(index)
        return True

    def set_projects(self, projects: list[str]) -> None:
        current = self.project.currentData()
        self.project.blockSignals(True)
        self.project.clear()
        self.project.addItem(ALL_PROJECTS, None)
        self.project.addItem(NO_PROJECT, "")
        for p in projects:
            self.project.addItem(p, p)
        index = self.project.findData(current)
        self.project.setCurrentIndex(max(index, 0))
        self.project.blockSignals(False)
        # a long project name is cut short rather than pushing the filters over each other
        self.project.setMinimumWidth(min(self.project.sizeHint().width(), PROJECT_FILTER_MAX))
        self.editor.set_projects(projects)

    def refresh(self, search_k: int | None = None) -> None:
        """Read the list again (a filter changed, or many memories did): as many rows as are shown now (at least a
        page, at most REFRESH_AT_MOST), so the place the user scrolled to and the selection stay. `search_k`:
        that many search results (the rows shown stay, the deeper ones are added)."""
        if self.bridge.info is None:
            return
        self._generation += 1
        self._live.stop()
        self._changed.clear()  # the rows read now hold them; those changed meanwhile are read once they are in
        self._reading = True
        generation = self._generation
        query, kind, project, days, show, since, archived = self._filters()
        key = (query, kind, project, days, show)
        same = key == self._listing_key
        shown = min(self.model.rowCount(), REFRESH_AT_MOST) if same else 0
        self._listing_key = key
        self._fetching = False

        if query:
            deeper = search_k is not None and same
            self._search_k = search_k or max(SEARCH_PAGE, shown)
            k = self._search_k

            def done(items: list[Any]) -> None:
                if generation != self._generation:
                    return  # a newer search is on its way
                rows = [r for r in (Row.of(i) for i in items) if self._wanted(r, show, since, project)]
                if not deeper:  # until its count comes: what it found (not the listing's total)
                    self._total = len(rows)
                self._searching, self._fetching, self._reading = query, False, False
                self._next = None
                self.model.more = len(items) >= k and k < SEARCH_MAX
                if deeper and self.model.rows:
                    self.model.append(rows, [0.0] * len(rows))  # the best ones are shown: the next ones go under
                    self._show_count()
                else:
                    self._populate(rows, query, [0.0] * len(rows))
                if len(items) >= k:  # there may be more than were asked for: how many hold the words
                    self.bridge.count_matches(query, counted, project=project or None, kind=kind, since=since,
                                              include_archived=show in ("archived", "all", "conflicts"),
                                              failed=lambda _message: counted(None))
                else:
                    counted(len(rows))

            def counted(total: int | None) -> None:
                if generation == self._generation:
                    self._total = total if total is not None else self.model.rowCount()
                    self._show_count()

            def words_only(caveat: str) -> None:
                if generation == self._generation:
                    self.words_only.setText(caveat)
                    self.words_only.setVisible(bool(caveat))

            self.bridge.recall(query, done, k=k, project=project or None, kind=kind, since=since,
                               include_archived=show in ("archived", "all", "conflicts"),
                               failed=self._search_failed, words_only=words_only)
        else:
            self.words_only.hide()
            def paged(page: Any) -> None:
                if generation != self._generation:
                    return
                rows, keys = page.rows, page.keys
                self._total, self._next, self._searching, self._reading = page.total, page.next, "", False
                wanted = [(r, k) for r, k in zip(rows, keys, strict=True) if self._wanted(r, show, since, project)]
                self.model.more = page.next is not None
                self._populate([r for r, _ in wanted], query, [k for _, k in wanted])
                if self._changed:
                    self._live.start()

            self.bridge.memory_page(paged, kind=kind, project=project, archived=archived,
                                    conflicts_only=show == "conflicts", limit=max(LIST_PAGE, shown), since=since,
                                    convert=rows_of, failed=self._search_failed)

    def _filters(self) -> tuple[str, str | None, str | None, int | None, str, float | None, bool | None]:
        """(query, kind, project, days, show, since, archived) as the filters stand."""
        days = self.period.currentData()
        show = self.show_filter.currentData()
        return (self.search.text().strip(), self.kind.currentData(), self.project.currentData(), days, show,
                time.time() - days * 86400 if days else None,
                {"active": False, "archived": True, "conflicts": None, "all": None}[show])

    def _maybe_fetch_more(self) -> None:
        """Near the end of the rows read (before the view reaches it and asks): the next page."""
        if not self.model.more or self._fetching or not self._loaded:
            return
        bar = self.tree.verticalScrollBar()
        if bar.maximum() - bar.value() <= FETCH_WHEN_ROWS_LEFT * max(1, bar.singleStep()):
            self._fetch_more()

    def _fetch_more(self) -> None:
        """The next page of the listing (or the next results of the search), added under the rows shown."""
        if self._fetching or self.bridge.info is None or not self._loaded or not self.model.more:
            return
        if self._searching:
            self._fetching = True  # until the deeper search is shown
            self.refresh(search_k=min(SEARCH_MAX, self._search_k + SEARCH_PAGE))  # the same search, more results
            self._fetching = True
            return
        if self._next is None:
            return
        self._fetching = True
        generation = self._generation
        _query, kind, project, _days, show, since, archived = self._filters()

        def more(page: Any) -> None:
            if generation != self._generation:
                return
            self._fetching = False
            self._next = page.next
            self.model.more = page.next is not None
            rows, keys = page.rows, page.keys
            wanted = [(r, k) for r, k in zip(rows, keys, strict=True) if self._wanted(r, show, since, project)]
            self.model.append([r for r, _ in wanted], [k for _, k in wanted])
            self._show_count()
            self._maybe_fetch_more()  # the view may still not be full (filters kept few of the page)

        def failed(message: str) -> None:
            if generation == self._generation:
                self._fetching = False
            self.banner.set(message, "error")

        self.bridge.memory_page(more, kind=kind, project=project, archived=archived,
                                conflicts_only=show == "conflicts", limit=LIST_PAGE, after=self._next,
                                since=since, with_total=False, convert=rows_of, failed=failed)

    def delete_selected(self) -> None:
        rows = [row for uid in self._selected_ids() if (row := self.model.get(uid)) is not None]
        if not rows:
            return
        # One memory: no question, the undo bar is the safety net. Several at once: asked first as well.
        if len(rows) > 1 and not self.confirm(
                "Delete memories", f"Delete {len(rows)} memories?",
                "Anything derived from them (links in the knowledge graph, summaries made from them) goes too. "
                f"You can undo for {self.pending.seconds:g} seconds."):
            return
        self.delete_now([r.id for r in rows])

    def confirm(self, title: str, question: str, detail: str) -> bool:
        box = QMessageBox(QMessageBox.Icon.Question, title, question, QMessageBox.StandardButton.Cancel, self)
        box.setInformativeText(detail)
        delete = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
        box.setDefaultButton(delete)
        box.exec()
        return box.clickedButton() is delete

    def delete_now(self, uids: list[str]) -> None:
        """Hide at once, forget when the undo window closes."""
        for uid in uids:
            self.pending.schedule(uid)
        self._hide_ids(set(uids))
        what = "Memory deleted." if len(uids) == 1 else f"{len(uids)} memories deleted."
        self.undo_bar.show_for(what, self.pending.seconds)

    def undo_delete(self) -> None:
        restored: list[str] = []
        while self.pending.uids:
            restored += self.pending.undo()
        self.undo_bar.hide()
        if restored:
            self.status_posted.emit("Delete undone.")
            self.refresh()

    def flush_deletes(self) -> None:
        """At quit: carry out the deletes still waiting in their undo window (blocking, bounded)."""
        uids = self.pending.take_all()
        if uids:
            self.bridge.forget_now(uids)

    # ------------------------------------------------------------------------------------------------
    # layout: side by side when there is room, else the editor in a drawer
    # ------------------------------------------------------------------------------------------------
    COMPACT_BELOW = 860  # px of this page's width

    def set_compact(self, compact: bool) -> None:
        if compact == self.compact:
            return
        self.compact = compact
        if compact:
            self.editor.setMinimumWidth(0)
            self._drawer_scroll.setWidget(self.editor)
            self.editor.show()
        else:
            self.drawer.hide()
            self._drawer_scroll.takeWidget()
            self.splitter.addWidget(self.editor)
            self.editor.setMinimumWidth(250)
            self.editor.show()
            self.splitter.setSizes([max(1, self.width() * 3 // 5), max(1, self.width() * 2 // 5)])

    def open_drawer(self) -> None:
        if self.compact and self.editor.row is not None:
            self._place_drawer()
            self.drawer.show()
            self.drawer.raise_()

    def close_drawer(self) -> None:
        if self.drawer.isVisible():
            self.save_edit()
            self.drawer.hide()
            self.tree.setFocus()

    def _place_drawer(self) -> None:
        area = self.rect().adjusted(0, 8, -8, -8)
        width = min(area.width(), max(320, int(area.width() * 0.66)))
        self.drawer.setGeometry(area.right() - width + 1, area.top(), width, area.height())

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self.set_compact(self.width() < self.COMPACT_BELOW)
        if self.drawer.isVisible():
            self._place_drawer()

    # ------------------------------------------------------------------------------------------------
    # internals
    # ------------------------------------------------------------------------------------------------
    def _combo(self, options: tuple[tuple[str, Any], ...]) -> QComboBox:
        combo = QComboBox()
        for label, value in options:
            combo.addItem(label, value)
        combo.currentIndexChanged.connect(lambda _i: self.refresh())
        return combo

    def _wanted(self, row: Row, show: str, since: float | None, project: str | None) -> bool:
        if row.id in self.pending:
            return False
        if show == "active" and row.archived:
            return False
        if show == "archived" and not row.archived:
            return False
        if show == "conflicts" and not row.conflict_with:
            return False
        if project == "" and row.project:
            return False
        if since is not None:
            moment = formatting.parse_iso(row.when)
            if moment is not None and moment.timestamp() < since:
                return False
        return True

    def _listed(self, row: Row) -> bool:
        """Whether the listing under the filters now (no search) holds this memory: what the engine's listing
        filters, for a memory changed by a write."""
        _query, kind, project, _days, show, since, _archived = self._filters()
        if row.source == ACTIVITY_SOURCE or (kind and row.kind != kind) or (project and row.project != project):
            return False
        return self._wanted(row, show, since, project)

    def _fit_columns(self) -> None:
        """Kind, Project and When as wide as their longest value and their title, never cut: measured from the
        values they can hold and the projects of the rows read, not by asking the rows (ResizeToContents asks
        1,000 rows of the model for each column at every page read: seconds a page)."""
        new = self.model.projects - self._projects_fitted
        room = max(100, self.tree.viewport().width() // 5)  # a long project name gives way to the memory's text
        if new or not self._projects_fitted or room != self._project_room:
            self._project_room = room
            cell, head = self.tree.fontMetrics(), self.tree.horizontalHeader().fontMetrics()
            pad = 24

            def wide(col: int, values: Any) -> int:
                return max([head.horizontalAdvance(MemoryModel.HEADERS[col]),
                            *(cell.horizontalAdvance(v) for v in values)]) + pad

            header = self.tree.horizontalHeader()
            if not self._projects_fitted:
                months = [datetime(2000, m, 28).strftime("%b") for m in range(1, 13)]
                header.resizeSection(1, wide(1, ["⚠ Conflict", "Archived", *formatting.KIND_LABELS.values()]))
                header.resizeSection(3, wide(3, ["Today 00:00", "Yesterday 00:00", "Waiting to send",
                                                 *(f"28 {m} 2000" for m in months)]))
            self._projects_fitted |= new | {""}
            header.resizeSection(2, min(wide(2, self._projects_fitted), room))

    def _show_count(self) -> None:
        """'3,009 memories', or while not all are read '200 of 3,009 memories'; searching, '100 of 3,009
        matches' (the memories holding its words, or what it found when that is more). Memories waiting out
        their undo are not counted (they are not in the rows)."""
        self._fit_columns()
        shown = self.model.rowCount()
        waiting = sum(1 for uid in self.pending.uids if self.model.row_of(uid) is None)
        total = max(shown, self._total - (0 if self._searching else waiting))
        if self._searching:
            matches = formatting.plural(total, "match").replace("matchs", "matches")
            text = f"{shown:,} of {matches}" if shown < total else matches
        elif shown < total:
            text = f"{shown:,} of {formatting.plural(total, 'memory').replace('memorys', 'memories')}"
        else:
            text = formatting.plural(shown, "memory").replace("memorys", "memories")
        self.count.setText(text)
        self.count.setMinimumWidth(self.count.sizeHint().width())  # the filters give way, never the count
        more = "Scroll down for more." if self.model.more else "Narrow the search to see the others." \
            if self._searching else ""
        self.count.setToolTip(more if shown < total else "")
        if not self._searching:
            self.count_changed.emit(total)

    def _populate(self, rows: list[Row], query: str, keys: list[float] | None = None) -> None:
        """Show these rows instead of those shown: the selection, and the place scrolled to, stay."""
        self._loaded = True
        keep = self._selected_ids()
        selected = self._reveal or (self._current.id if self._current else None)
        if selected and selected not in keep:
            keep = [selected]
        bar = self.tree.verticalScrollBar()
        scrolled = bar.value()
        blocker = self.tree.selectionModel().blockSignals(True)
        self.model.reset(rows, keys)
        self.tree.selectionModel().blockSignals(blocker)
        self._show_count()
        if rows:
            self.list_stack.setCurrentWidget(self.tree)
        elif query:
            self._show_empty(f"No memories match “{query}”.", "Try fewer or different words, or clear the filters.")
        elif self.show_filter.currentData() == "conflicts":
            self._show_empty("No conflicting memories.", "When two facts disagree, both show up here to resolve.")
        elif self.show_filter.currentData() == "archived":
            self._show_empty("Nothing archived.", "Memories you don't use fade and are archived, never deleted.")
        elif any(c.currentIndex() for c in (self.kind, self.project, self.period)):
            self._show_empty("No memories match these filters.", "")
        else:
            self._show_empty("Nothing remembered yet.",
                             "Press the capture shortcut anywhere (Ctrl+Shift+Space) or use Quick capture "
                             "in the tray menu to store a fact. Drop documents on this window to add them.")
        if self._reveal and self.select(self._reveal):
            pass
        elif selected and self.model.row_of(selected) is not None:
            self._select_ids(keep, current=selected)
            bar.setValue(scrolled)
        elif selected and self._reveal:
            self.bridge.get(selected, lambda m: self.editor.load(Row.of(m)))
        else:
            self.save_edit()  # the memory left the list (a filter, another program): keep the edit anyway
            self.editor.clear()
            self._current = None
            bar.setValue(scrolled)
        self._reveal = None

    def _select_ids(self, uids: list[str], current: str) -> None:
        """Select these rows again (after the rows were read again), the current one last: one selection change."""
        selection = QItemSelection()
        for uid in uids:
            i = self.model.row_of(uid)
            if i is not None:
                selection.select(self.model.index(i, 0), self.model.index(i, self.model.columnCount() - 1))
        model = self.tree.selectionModel()
        blocker = model.blockSignals(True)
        at = self.model.row_of(current)
        if at is not None:
            model.setCurrentIndex(self.model.index(at, 0), QItemSelectionModel.SelectionFlag.NoUpdate)
        model.blockSignals(blocker)
        model.select(selection, QItemSelectionModel.SelectionFlag.ClearAndSelect)

    def _show_empty(self, title: str, hint: str) -> None:
        self.empty.set_text(title, hint)
        self.list_stack.setCurrentWidget(self.empty)

    def _hide_ids(self, uids: set[str]) -> None:
        for uid in uids:
            self.model.remove(uid)
        self._show_count()
        if self._current and self._current.id in uids:
            self._current = None
            self.editor.clear()
        if not self.model.rows:
            self._show_empty("Nothing to show.", "")

    def _selected_ids(self) -> list[str]:
        rows = sorted(index.row() for index in self.tree.selectionModel().selectedRows())
        return [self.model.rows[i].id for i in rows if i < len(self.model.rows)]

    def _selection_changed(self) -> None:
        ids = self._selected_ids()
        row = self.model.get(ids[0]) if len(ids) == 1 else None
        editing = self.editor.row
        same = row is not None and editing is not None and row.id == editing.id  # a refresh re-selected it
        if editing is not None and self.editor.is_dirty():
            if same:
                self._current = row  # keep what the user is typing
                return
            self.save_edit()  # another row, or none: what was typed is saved, never thrown away
        self._current = row
        if row is None:
            self.editor.clear(multiple=len(ids) > 1)
            self._open_timer.stop()
            self.drawer.hide()
        else:
            self.editor.load(row, can_resolve=True)  # the store's newest values
            if not same:  # opening it may count as a use; the same one shown again after a refresh never does
                self._open_timer.start()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.tree and event.type() == QEvent.Type.Resize:
            QTimer.singleShot(0, self._fit_columns)  # once the view has its new width
        if (watched is self.tree and event.type() == QEvent.Type.KeyPress
                and cast(QKeyEvent, event).matches(QKeySequence.StandardKey.Copy)):
            self.copy_selected()
            return True
        return super().eventFilter(watched, event)

    def _opened(self) -> None:
        if self._current is not None:
            self.bridge.mark_used([self._current.id], "opened")

    def copy_selected(self) -> None:
        """Ctrl+C in the list: the selected memories' text to the clipboard (a use of each)."""
        rows = [row for uid in self._selected_ids() if (row := self.model.get(uid)) is not None]
        if not rows:
            return
        ids = [r.id for r in rows]
        QApplication.clipboard().setText("\n".join(r.text for r in rows))
        self.bridge.mark_used(ids, "copied")
        self.status_posted.emit(f"Copied {len(ids)} memor{'y' if len(ids) == 1 else 'ies'}")

    def _search_changed(self, _text: str) -> None:
        self._debounce.start()

    def _search_failed(self, message: str) -> None:
        self._reading = False
        self._show_empty(message, "")

    def _engine_changed(self, changes: Any) -> None:
        """A write (this app's or another program's): the memories it changed are read and shown in place; a
        search runs again; a write of many (an import, a consolidation) reads the rows shown again."""
        if not (changes.memories or changes.action in ("consolidate", "resolve", "import")):
            return
        if (self._searching or self.search.text().strip() or not self._loaded
                or changes.action in ("consolidate", "resolve", "import") or "*" in changes.memories
                or len(self._changed | changes.memories) > LIVE_AT_MOST):
            self._live.stop()
            self._changed.clear()
            self._debounce.start()
            return
        if self._debounce.isActive():
            return  # the whole list is read again in a moment
        self._changed |= changes.memories
        if not self._live.isActive() and not self._reading:
            self._live.start()

    def _show_changes(self) -> None:
        """The memories changed since the last time, each read again: shown in place, moved, added where its
        time puts it, or taken out; then the count, from the store."""
        uids, self._changed = sorted(self._changed), set()
        if not uids or self.bridge.info is None:
            return
        generation = self._generation
        _query, kind, project, _days, show, since, archived = self._filters()

        def found(memories: dict[str, Any]) -> None:
            if generation != self._generation:
                return  # the list was read again meanwhile
            current = self._current.id if self._current else None
            for uid in uids:
                memory = memories.get(uid)
                row = Row.of(memory) if memory is not None else None
                if row is None or not self._listed(row):
                    self.model.remove(uid)
                else:
                    self.model.put(row)
            if current in uids:
                self._selection_changed()  # its newest values in the editor (unless typed in), or it left
            if self.model.rows:
                self.list_stack.setCurrentWidget(self.tree)
            self._show_count()
            self.bridge.memory_page(counted, kind=kind, project=project, archived=archived,
                                    conflicts_only=show == "conflicts", limit=1, since=since)

        def counted(page: Any) -> None:
            if generation == self._generation:
                self._total = page.total
                self._show_count()
                if not self.model.rows:
                    self._populate([], "")

        self.bridge.memories_by_id(uids, found)

    def _save(self, fields: dict[str, Any]) -> None:
        if self._current is None:
            return
        self.bridge.update(self._current.id, done=lambda _m: self.editor.saved(),
                           failed=self.editor.failed, **fields)

    def save_edit(self) -> bool:
        """Save the editor's unsaved changes (leaving the memory for another one, or the page). False when
        there was nothing to save; a date the app cannot read keeps the edit open instead."""
        editing = self.editor.row
        if editing is None or not self.editor.is_dirty():
            return False
        fields = self.editor.changes()
        if fields is None:  # the date could not be read: keep the typed text in the banner's care
            self.banner.set("Your edit was not saved: the date in When could not be read.", "error")
            return False
        uid, preview = editing.id, formatting.one_line(fields.get("text", editing.text), 60)

        def failed(message: str) -> None:
            self.banner.set(f"Your edit to “{preview}” could not be saved: {message}", "error")

        self.bridge.update(uid, done=lambda _m: self.status_posted.emit(f"Saved your edit to “{preview}”."),
                           failed=failed, **fields)
        self.editor.mark_clean()
        return True

    def _keep(self) -> None:
        if self._current is None or not self._current.conflict_with:
            return
        self.bridge.resolve(self._current.id, keep=self._current.id,
                            done=lambda _r: self.status_posted.emit("Conflict resolved."))

    def _forget(self, uid: str) -> None:
        self.bridge.forget(uid, failed=lambda message: self.banner.set(message, "error"))


class SearchField(QLineEdit):
    """The search box; Esc clears it."""

    def keyPressEvent(self, event) -> None:  # noqa: N802 - Qt override
        if event.key() == Qt.Key.Key_Escape and self.text():
            self.clear()
            return
        super().keyPressEvent(event)


class MemoryEditor(QWidget):
    """The right-hand pane: one memory's text and fields, Save, Delete."""

    save_clicked = Signal(dict)
    delete_clicked = Signal()
    keep_clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.placeholder = EmptyState("Select a memory", "Its text, kind, project and date appear here to edit.")
        self.text = QPlainTextEdit()
        self.text.setPlaceholderText("What to remember")
        self.text.setMinimumHeight(72)
        self.kind = QComboBox()
        for value in ("fact", "episodic", "procedural"):
            self.kind.addItem(formatting.kind_label(value), value)
        self.project = QComboBox()
        self.project.setEditable(True)
        self.at = QLineEdit()
        self.at.setPlaceholderText("Optional: 2024-05-01, last friday, 3 march…")
        self.at.setToolTip("When it happened, for events: a date as you would say it ('next tuesday', "
                           "'3 march 14:30') or picked from the calendar")
        self.pick_date = QToolButton()
        # a drawn calendar (a font's emoji was cut off by the button), without the menu arrow beside it
        self.pick_date.setIcon(icons.line_icon("calendar", theme.text_color(), 16))
        self.pick_date.setIconSize(QSize(16, 16))
        self.pick_date.setStyleSheet("QToolButton { padding: 3px 6px; } QToolButton::menu-indicator { image: none; }")
        self.pick_date.setToolTip("Pick a date")
        self.pick_date.setAccessibleName("Pick a date")
        self.pick_date.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.calendar = QCalendarWidget()
        self.calendar.clicked.connect(self._date_picked)
        calendar_menu = QMenu(self.pick_date)
        calendar_action = QWidgetAction(calendar_menu)
        calendar_action.setDefaultWidget(self.calendar)
        calendar_menu.addAction(calendar_action)
        self.pick_date.setMenu(calendar_menu)
        when_row = QHBoxLayout()
        when_row.setContentsMargins(0, 0, 0, 0)
        when_row.addWidget(self.at, 1)
        when_row.addWidget(self.pick_date)
        self.importance = QDoubleSpinBox()
        self.importance.setRange(0.0, 1.0)
        self.importance.setSingleStep(0.05)
        self.importance.setDecimals(2)
        self.archived = QCheckBox("Archived")
        self.archived.setToolTip("Archived memories are kept but left out of search and answers")
        self.meta = muted("")
        self.conflict = Banner(tone="warn")
        self.keep = button("Keep this one")
        self.keep.clicked.connect(self.keep_clicked.emit)
        self.save = button("&Save", primary=True, shortcut="Ctrl+S")
        self.save.clicked.connect(self._emit_save)
        self.delete = button("&Delete", danger=True)
        self.delete.setToolTip("Delete this memory (Undo appears for a few seconds)")
        self.delete.clicked.connect(self.delete_clicked.emit)
        self.feedback = muted("")

        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("Kind", self.kind)
        form.addRow("Project", self.project)
        form.addRow("When", when_row)
        form.addRow("Importance", self.importance)
        form.addRow("", self.archived)
        buttons = QHBoxLayout()
        buttons.addWidget(self.delete)
        buttons.addStretch(1)
        buttons.addWidget(self.feedback)
        buttons.addWidget(self.save)

        self.form_widget = QWidget()
        fl = QVBoxLayout(self.form_widget)
        fl.setContentsMargins(0, 0, 0, 0)
        fl.addWidget(self.conflict)
        fl.addWidget(self.keep, 0, Qt.AlignmentFlag.AlignLeft)
        fl.addWidget(self.text, 1)
        fl.addLayout(form)
        fl.addWidget(self.meta)
        fl.addLayout(buttons)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.placeholder)
        self.stack.addWidget(self.form_widget)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 0, 0, 0)
        layout.addWidget(self.stack)
        self.row: Row | None = None
        self._loaded_at = ""
        self._loaded_importance = 0.0  # as the box shows it (rounded): only a change of that is an edit
        self._before_save: Row | None = None
        self._before_save_at = ""
        self._before_save_importance = 0.0
        self.clear()

    def set_projects(self, projects: list[str]) -> None:
        refill_editable(self.project, ["", *projects])  # reloaded on every change, perhaps mid-typing

    def load(self, row: Row, can_resolve: bool = False) -> None:
        self.row = row
        self.text.setPlainText(row.text)
        self.kind.setCurrentIndex(max(self.kind.findData(row.kind), 0))
        self.project.setCurrentText(row.project or "")
        self.at.setText(formatting.editable_when(row.when) if row.when and row.when != row.created_at else "")
        self._loaded_at = self.at.text().strip()
        self.archived.setChecked(row.archived)
        self.importance.setValue(row.importance)
        self._loaded_importance = self.importance.value()
        self.meta.setText(f"Created {formatting.when(row.created_at)}")
        self.meta.setToolTip(row.id)
        self.conflict.set(row.conflict or (f"This disagrees with {row.conflict_with}." if row.conflict_with else ""),
                          "warn")
        self.keep.setVisible(bool(row.conflict_with) and can_resolve)
        self._set_feedback("")
        self.stack.setCurrentWidget(self.form_widget)

    def clear(self, multiple: bool = False) -> None:
        self.row = None
        if multiple:
            self.placeholder.set_text("Several memories selected", "Press Delete to delete them all.")
        else:
            self.placeholder.set_text("Select a memory", "Its text, kind, project and date appear here to edit.")
        self.stack.setCurrentWidget(self.placeholder)

    def saved(self) -> None:
        self._set_feedback("Saved ✓")

    def failed(self, message: str) -> None:
        if self._before_save is not None and self.row is not None and self._before_save.id == self.row.id:
            self.row = self._before_save  # not saved: the fields count as unsaved changes again
            self._loaded_at = self._before_save_at
            self._loaded_importance = self._before_save_importance
        self._set_feedback(message, error=True)

    def is_dirty(self) -> bool:
        """The fields differ from the memory as loaded (what leaving it would otherwise throw away)."""
        if self.row is None or self.stack.currentWidget() is not self.form_widget:
            return False
        return self.changes(strict=False) != {}

    def changes(self, strict: bool = True) -> dict[str, Any] | None:
        """The changed fields, as `update` takes them; None when When holds something that is not a date
        (strict) — not strict, a changed When counts as a change whatever it holds."""
        row = self.row
        if row is None:
            return {}
        fields: dict[str, Any] = {}
        if self.text.toPlainText() != row.text:
            fields["text"] = self.text.toPlainText()
        if self.kind.currentData() != row.kind:
            fields["kind"] = self.kind.currentData()
        if (self.project.currentText().strip() or None) != (row.project or None):
            fields["project"] = self.project.currentText().strip() or None
        if self.archived.isChecked() != row.archived:
            fields["archived"] = self.archived.isChecked()
        if self.importance.value() != self._loaded_importance:  # not the stored value: the box rounds it
            fields["importance"] = round(self.importance.value(), 2)
        at = self.at.text().strip()
        if at != self._loaded_at:
            if not at:
                fields["at"] = None
            else:
                parsed = formatting.natural_date(at)
                if parsed is None and strict:
                    return None
                fields["at"] = parsed or at
        return fields

    def mark_clean(self) -> None:
        """The edit was handed over for saving: the fields now count as the memory's."""
        if self.row is None:
            return
        from dataclasses import replace

        fields = self.changes(strict=False) or {}
        self._before_save, self._before_save_at = self.row, self._loaded_at
        self._before_save_importance = self._loaded_importance
        self.row = replace(self.row, text=fields.get("text", self.row.text), kind=fields.get("kind", self.row.kind),
                           project=fields.get("project", self.row.project),
                           archived=fields.get("archived", self.row.archived),
                           importance=fields.get("importance", self.row.importance))
        self._loaded_at = self.at.text().strip()
        self._loaded_importance = self.importance.value()

    def _date_picked(self, picked: Any) -> None:
        self.at.setText(picked.toString("yyyy-MM-dd"))
        self.pick_date.menu().hide()

    def _set_feedback(self, text: str, error: bool = False) -> None:
        self.feedback.setText(formatting.one_line(text, 60))
        self.feedback.setToolTip(text)
        self.feedback.setStyleSheet("color: #DC2626;" if error else "")

    def _emit_save(self) -> None:
        if self.row is None:
            return
        fields = self.changes()
        if fields is None:
            self._set_feedback(f"“{self.at.text().strip()}” is not a date I can read; try 2024-05-01 or "
                               "'last friday', or pick one.", error=True)
            self.at.setFocus()
            return
        if not fields:
            self._set_feedback("No changes to save.")
            return
        self._set_feedback("Saving…")
        self.save_clicked.emit(fields)
        self.mark_clean()


