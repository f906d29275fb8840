"""The Graph page: the entities your memories and documents mention and how they relate.

Start from an entity (the best connected ones are listed), a name typed in the search box, or a memory
(words that name no entity find memories; choosing one shows the entities it is about). The
neighbourhood, 1 or 2 hops, is drawn around it; its facts are listed below. Choosing a fact (in the
list or on the drawing) shows the memories and passages it was taken from; from there a source opens in
Memories, or is forgotten (with a few seconds to undo, like every delete), which removes the fact with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QEvent, QPointF, QRectF, QStringListModel, Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QPainter, QPainterPath, QPainterPathStroker, QPalette, QPen
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QCompleter,
    QFrame,
    QGraphicsEllipseItem,
    QGraphicsItem,
    QGraphicsLineItem,
    QGraphicsScene,
    QGraphicsSimpleTextItem,
    QGraphicsView,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QSplitter,
    QStackedWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from . import formatting, theme
from .bridge import Bridge
from .pending_deletes import UNDO_SECONDS, PendingDeletes
from .widgets import EmptyState, UndoBar, button, muted, page_title, scroller

WIDE = 1000  # from this width on, the sources sit beside the drawing instead of below it
NARROW = 720  # below this width the list of starting points folds away
EDGE = Qt.ItemDataRole.UserRole + 1


@dataclass
class Fact:
    index: int
    src: int
    dst: int
    rel: str
    text: str
    sources: list[str]


class _EdgeLine(QGraphicsLineItem):
    """A fact on the drawing; easy to click (its shape is wider than the line)."""

    def __init__(self, fact: Fact, a: QPointF, b: QPointF) -> None:
        super().__init__(a.x(), a.y(), b.x(), b.y())
        self.fact = fact
        self.setAcceptHoverEvents(True)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip(fact.text)

    def shape(self) -> QPainterPath:
        path = QPainterPath(self.line().p1())
        path.lineTo(self.line().p2())
        stroker = QPainterPathStroker()
        stroker.setWidth(12)
        return stroker.createStroke(path)


class GraphCanvas(QGraphicsView):
    """The neighbourhood drawn in rings: what you started from in the middle, 1 hop, then 2 hops out."""

    entity_clicked = Signal(str)
    fact_clicked = Signal(int)  # index into the facts

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setScene(QGraphicsScene(self))
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setMinimumHeight(100)  # the page fits a 720x450 window (a 1440x900 screen at scale 2) unscrolled
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._lines: dict[int, _EdgeLine] = {}
        self._selected: int | None = None
        self._drawn: tuple[list[Any], list[Fact]] = ([], [])

    def draw(self, nodes: list[Any], facts: list[Fact]) -> None:
        """Lay the nodes out to the view's size (text stays at its size; nothing is scaled)."""
        keep = self._selected
        self._drawn = (nodes, facts)
        scene = self.scene()
        scene.clear()
        self._lines = {}
        self._selected = None
        if not nodes:
            return
        pos = self._layout(nodes, self.viewport().width(), self.viewport().height())
        pal = QApplication.palette()
        text = pal.color(QPalette.ColorRole.Text)
        muted = theme.muted_color()
        accent = QColor(theme.ACCENT)
        drawn: set[tuple[int, int]] = set()
        for f in facts:
            if f.src not in pos or f.dst not in pos:
                continue
            a, b = pos[f.src], pos[f.dst]
            line = _EdgeLine(f, a, b)
            line.setPen(QPen(muted, 1.4))
            line.setZValue(0)
            scene.addItem(line)
            self._lines[f.index] = line
            key = (min(f.src, f.dst), max(f.src, f.dst))
            if key not in drawn and math.dist((a.x(), a.y()), (b.x(), b.y())) > 70:  # one label per pair, if room
                drawn.add(key)
                label = QGraphicsSimpleTextItem(formatting.one_line(f.rel, 28))
                label.setBrush(QBrush(muted))
                font = label.font()
                font.setPointSizeF(max(8.0, font.pointSizeF() * 0.9))
                label.setFont(font)
                mid = (a + b) / 2
                r = label.boundingRect()
                label.setPos(mid.x() - r.width() / 2, mid.y() - r.height() / 2)
                label.setZValue(1)
                back = scene.addRect(label.sceneBoundingRect().adjusted(-2, 0, 2, 0), QPen(Qt.PenStyle.NoPen),
                                     QBrush(pal.color(QPalette.ColorRole.Base)))
                back.setZValue(0.5)
                scene.addItem(label)
        for n in nodes:
            p = pos[n.id]
            radius = 9 if n.hops == 0 else 6
            dot = QGraphicsEllipseItem(p.x() - radius, p.y() - radius, 2 * radius, 2 * radius)
            dot.setBrush(QBrush(accent if n.hops == 0 else pal.color(QPalette.ColorRole.Base)))
            dot.setPen(QPen(accent, 2))
            dot.setZValue(2)
            dot.setData(0, n.name)
            dot.setCursor(Qt.CursorShape.PointingHandCursor)
            dot.setToolTip(f"{n.name}" + (f" ({n.type})" if n.type else "") + " — click to start from here")
            scene.addItem(dot)
            name = QGraphicsSimpleTextItem(formatting.one_line(n.name, 32))
            name.setBrush(QBrush(text))
            if n.hops == 0:
                font = name.font()
                font.setBold(True)
                name.setFont(font)
            r = name.boundingRect()
            name.setPos(p.x() - r.width() / 2, p.y() + radius + 2)
            name.setZValue(3)
            name.setData(0, n.name)
            scene.addItem(name)
        w, h = self.viewport().width(), self.viewport().height()
        scene.setSceneRect(QRectF(-w / 2, -h / 2, w, h).united(scene.itemsBoundingRect().adjusted(-8, -8, 8, 8)))
        self.centerOn(0, 0)
        if keep is not None:
            self.select(keep)

    @staticmethod
    def _layout(nodes: list[Any], width: int, height: int) -> dict[int, QPointF]:
        """What you started from in the middle, then a ring per hop, as wide and tall as the view allows."""
        rings: dict[int, list[Any]] = {}
        for n in nodes:
            rings.setdefault(n.hops, []).append(n)
        outer = max(rings) or 1
        rx, ry = max(60.0, width / 2 - 70), max(40.0, height / 2 - 30)
        pos: dict[int, QPointF] = {}
        for hops, members in rings.items():
            if hops == 0:
                sx, sy = (0.0, 0.0) if len(members) == 1 else (rx * 0.22, ry * 0.22)
            else:
                sx, sy = rx * hops / outer, ry * hops / outer
            for i, n in enumerate(members):
                angle = 2 * math.pi * i / len(members) - math.pi / 2 + 0.5 * hops
                pos[n.id] = QPointF(sx * math.cos(angle), sy * math.sin(angle))
        return pos

    def select(self, index: int | None) -> None:
        muted, accent = theme.muted_color(), QColor(theme.ACCENT)
        if self._selected in self._lines:
            self._lines[self._selected].setPen(QPen(muted, 1.4))
        self._selected = index
        if index in self._lines:
            self._lines[index].setPen(QPen(accent, 3))

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        if self._drawn[0]:
            self.draw(*self._drawn)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self._drawn[0]:
            self.draw(*self._drawn)  # light ⇄ dark: the drawing takes the new colours

    def mousePressEvent(self, event) -> None:  # noqa: N802 - Qt override
        item: QGraphicsItem | None = self.itemAt(event.position().toPoint())
        if isinstance(item, QGraphicsSimpleTextItem) and item.data(0) is None:
            item = None  # a fact's label: find the line under it
            for under in self.items(event.position().toPoint()):
                if isinstance(under, _EdgeLine):
                    item = under
                    break
        if isinstance(item, _EdgeLine):
            self.fact_clicked.emit(item.fact.index)
        elif item is not None and item.data(0):
            self.entity_clicked.emit(str(item.data(0)))
        super().mousePressEvent(event)

    def fact_at(self, index: int) -> QPointF | None:
        """The middle of a fact's line in view coordinates (tests click there)."""
        line = self._lines.get(index)
        if line is None:
            return None
        return QPointF(self.mapFromScene(line.line().center()))


class SourceCard(QFrame):
    """One memory or passage behind a fact: its text, where it comes from, open and forget."""

    open_clicked = Signal(str)
    forget_clicked = Signal(str, str)  # the source's id, what to forget (the memory, or the passage's document)

    def __init__(self, uid: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.uid = uid
        self.setObjectName("Card")
        self.meta = muted("Loading…")
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.open = button("Open")
        self.open.setToolTip("Show this memory in Memories")
        self.open.clicked.connect(lambda: self.open_clicked.emit(self.uid))
        self.open.setVisible(uid.startswith("mem_"))
        self.forget = button("Forget" if uid.startswith("mem_") else "Forget document", danger=True)
        self.forget.setToolTip(("Forget this memory" if uid.startswith("mem_") else "Forget the whole document")
                               + " and everything derived from it, this fact included. You can undo for a few "
                                 "seconds.")
        self.target = uid if uid.startswith("mem_") else ""
        self.forget.setEnabled(bool(self.target))
        self.forget.clicked.connect(lambda: self.forget_clicked.emit(self.uid, self.target))
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.open)
        row.addWidget(self.forget)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.addWidget(self.meta)
        layout.addWidget(self.text)
        layout.addLayout(row)

    def show_memory(self, m: Any) -> None:
        said = formatting.when(m.at) if m.at else formatting.when(m.created_at)
        bits = [f"Memory · {formatting.kind_label(m.kind)}", f"said {said}" if said else ""]
        if m.project:
            bits.append(f"project {m.project}")
        if m.archived:
            bits.append("archived")
        self.meta.setText(" · ".join(b for b in bits if b))
        self.text.setText(m.text)

    def show_passage(self, p: Any) -> None:
        where = p.locator or (f"p. {p.page}" if p.page else "") or (p.heading or "")
        title = p.document_title or (p.document_path or "").rsplit("/", 1)[-1] or p.document_id
        self.meta.setText(f"Passage from “{title}”" + (f" · {where}" if where else ""))
        self.text.setText(p.text)
        self.target = p.document_id
        self.forget.setEnabled(True)

    def show_missing(self, message: str) -> None:
        self.meta.setText(message)
        self.open.hide()
        self.forget.hide()


class GraphView(QWidget):
    memory_opened = Signal(str)
    status_posted = Signal(str)

    def __init__(self, bridge: Bridge, undo_seconds: float = UNDO_SECONDS, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.pending = PendingDeletes(undo_seconds, self)
        self.pending.expired.connect(self._forget)
        self._view: Any = None
        self._facts: list[Fact] = []
        self._start: tuple[str, str] | None = None  # ("entity", name) | ("memory", uid)
        self._request = 0
        self._laid_out: tuple[bool, bool] | None = None
        self._forgotten: dict[str, str] = {}  # a source's id -> the id waiting to be forgotten (mem_… or doc_…)

        self.search = QLineEdit()
        self.search.setPlaceholderText("An entity (Alice, Acme…) or words from a memory")
        self.search.setClearButtonEnabled(True)
        self.search.returnPressed.connect(self._search)
        self.hops = QComboBox()
        self.hops.addItem("1 hop", 1)
        self.hops.addItem("2 hops", 2)
        self.hops.setToolTip("How far from the starting point to walk")
        self.hops.currentIndexChanged.connect(lambda _i: self.reload())
        go = button("Show")
        go.clicked.connect(self._search)
        head = QHBoxLayout()
        head.addWidget(page_title("Graph"))
        head.addSpacing(12)
        head.addWidget(self.search, 1)
        head.addWidget(self.hops)
        head.addWidget(go)
        self.summary = ""
        self.completer_model = QStringListModel(self)
        completer = QCompleter(self.completer_model, self)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        completer.setFilterMode(Qt.MatchFlag.MatchContains)
        completer.activated.connect(self.show_entity)
        self.search.setCompleter(completer)

        # left: where to start
        self.start_title = muted("Best connected")
        self.starts = QListWidget()
        self.starts.setMinimumWidth(120)
        self.starts.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.starts.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.starts.itemActivated.connect(self._start_chosen)
        self.starts.itemClicked.connect(self._start_chosen)
        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(self.start_title)
        ll.addWidget(self.starts, 1)

        # middle: the drawing and its facts
        self.canvas = GraphCanvas()
        self.canvas.entity_clicked.connect(self.show_entity)
        self.canvas.fact_clicked.connect(self.select_fact)
        self.facts = QTreeWidget()
        self.facts.setHeaderLabels(["Fact", "Sources"])
        self.facts.setRootIsDecorated(False)
        self.facts.setUniformRowHeights(True)
        self.facts.setMinimumHeight(90)
        self.facts.header().setStretchLastSection(False)
        self.facts.header().setSectionResizeMode(0, self.facts.header().ResizeMode.Stretch)
        self.facts.header().setSectionResizeMode(1, self.facts.header().ResizeMode.ResizeToContents)
        self.facts.currentItemChanged.connect(self._fact_row_changed)
        drawing = QSplitter(Qt.Orientation.Vertical)
        drawing.addWidget(self.canvas)
        drawing.addWidget(self.facts)
        drawing.setStretchFactor(0, 3)
        drawing.setStretchFactor(1, 1)
        drawing.setSizes([300, 120])
        self.empty = EmptyState()
        self.middle = QStackedWidget()
        self.middle.addWidget(drawing)
        self.middle.addWidget(self.empty)

        # right (or below): the sources of the chosen fact
        self.source_title = muted("Choose a fact to see the memories and passages it was taken from.")
        self.source_list = QWidget()
        self.source_layout = QVBoxLayout(self.source_list)
        self.source_layout.setContentsMargins(0, 0, 4, 0)
        self.source_layout.addStretch(1)
        scroll = scroller(self.source_list, across=False)
        sources = QWidget()
        sl = QVBoxLayout(sources)
        sl.setContentsMargins(0, 0, 0, 0)
        sl.addWidget(self.source_title)
        sl.addWidget(scroll, 1)
        self.sources_panel = sources
        self.cards: list[SourceCard] = []

        self.inner = QSplitter(Qt.Orientation.Vertical)
        self.inner.addWidget(self.middle)
        self.inner.addWidget(sources)
        self.inner.setStretchFactor(0, 3)
        self.inner.setStretchFactor(1, 2)
        self.outer = QSplitter(Qt.Orientation.Horizontal)
        self.outer.addWidget(left)
        self.outer.addWidget(self.inner)
        self.outer.setStretchFactor(0, 0)
        self.outer.setStretchFactor(1, 1)
        self.outer.setSizes([180, 600])

        self.undo_bar = UndoBar()
        self.undo_bar.undo_clicked.connect(self.undo_delete)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 12)
        layout.setSpacing(10)
        layout.addLayout(head)
        layout.addWidget(self.undo_bar)
        layout.addWidget(self.outer, 1)

        self._refresh_timer = QTimer(self)
        self._refresh_timer.setSingleShot(True)
        self._refresh_timer.setInterval(300)
        self._refresh_timer.timeout.connect(self._refresh)
        bridge.opened.connect(lambda _info: self._refresh())
        bridge.changed.connect(self._changed)
        self._show_empty("The knowledge graph is empty so far.",
                         "Facts are taken from your memories and documents by the language model "
                         "(Settings → Tidy up now, or `personal-llm extract`).")

    # ------------------------------------------------------------------------------------------------
    # public
    # ------------------------------------------------------------------------------------------------
    def show_entity(self, name: str) -> None:
        self._start = ("entity", name)
        self.search.setText(name)
        self.reload()

    def show_memory(self, uid: str) -> None:
        """The entities a memory is about, and their neighbours."""
        self._start = ("memory", uid)
        self.reload()

    def reload(self) -> None:
        if self._start is None:
            return
        kind, value = self._start
        hops = int(self.hops.currentData())
        self._request += 1
        request = self._request

        def done(view: Any) -> None:
            if request == self._request:
                self._show_view(view)

        def failed(message: str) -> None:
            if request == self._request:
                self._not_found(value, message)

        if kind == "entity":
            self.bridge.graph_neighbours(value, hops, done, failed)
        else:
            self.bridge.graph_around_memory(value, hops, done, failed)

    def select_fact(self, index: int) -> None:
        for i in range(self.facts.topLevelItemCount()):
            item = self.facts.topLevelItem(i)
            if item.data(0, EDGE) == index:
                self.facts.setCurrentItem(item)
                return

    def undo_delete(self) -> None:
        restored: list[str] = []
        while self.pending.uids:
            restored += self.pending.undo()
        self.undo_bar.hide()
        if restored:
            self.status_posted.emit("Delete undone.")
            self._render()

    def flush_deletes(self) -> None:
        """At quit: carry out the deletes still waiting in their undo window."""
        uids = self.pending.take_all()
        if uids:
            self.bridge.forget_now(uids)

    # ------------------------------------------------------------------------------------------------
    # internals
    # ------------------------------------------------------------------------------------------------
    def _changed(self, changes: Any) -> None:
        if changes.graph or changes.memories or changes.documents:
            self._refresh_timer.start()

    def _refresh(self) -> None:
        self.bridge.graph_entities(self._list_entities)
        if self._start is not None:
            self.reload()

    def _list_entities(self, entities: list[tuple[str, str | None, int]]) -> None:
        if self.start_title.text() != "Best connected" and self._start is not None:
            return  # showing memories found by a search
        self.completer_model.setStringList([name for name, _type, _count in entities])
        self.start_title.setText("Best connected")
        self.starts.clear()
        for name, type_, count in entities:
            item = QListWidgetItem(f"{name}  ·  {count}")
            item.setData(Qt.ItemDataRole.UserRole, ("entity", name))
            item.setToolTip(f"{name}" + (f" ({type_})" if type_ else "") + f": {formatting.plural(count, 'fact')}")
            self.starts.addItem(item)
        if not entities and self._start is None:
            info = self.bridge.info
            on_server = info is not None and info.connection is not None  # facts are taken where the memory is
            self._show_empty("The knowledge graph is empty so far.",
                             "Facts are taken from your memories and documents by the language model "
                             + ("of your server (Settings → Tidy up now)." if on_server else
                                "(Settings → Tidy up now, or `personal-llm extract`)."))
        elif self._start is None:
            self._show_empty("Type an entity's name above (it is completed as you type)" if self._folded()
                             else "Choose an entity on the left, or type a name above.",
                             "or words from a memory, to see the entities it is about.")

    def _folded(self) -> bool:
        return self.outer.sizes()[0] == 0

    def _search(self) -> None:
        text = self.search.text().strip()
        if text:
            self._start = ("entity", text)
            self.reload()

    def _start_chosen(self, item: QListWidgetItem) -> None:
        kind, value = item.data(Qt.ItemDataRole.UserRole)
        if kind == "entity":
            self.show_entity(value)
        else:
            self.show_memory(value)

    def _not_found(self, text: str, message: str) -> None:
        """No entity by that name: look for memories with these words and offer them as starting points."""
        if self._start and self._start[0] == "memory":
            self._show_empty(message)
            return

        def found(hits: list[Any]) -> None:
            memories = [h for h in hits if not h.id.startswith("chk_")]
            if not memories:
                self._show_empty(message, "Try another name, or words from one of your memories.")
                return
            self.start_title.setText(f"Memories matching “{formatting.one_line(text, 30)}”")
            self.starts.clear()
            for h in memories:
                item = QListWidgetItem(formatting.one_line(h.text, 80))
                item.setData(Qt.ItemDataRole.UserRole, ("memory", h.id))
                item.setToolTip(formatting.one_line(h.text, 400))
                self.starts.addItem(item)
            self._show_empty("No entity has that name.", "Choose a memory on the left to see what it is about.")

        self.bridge.recall(text, found, k=20, include_chunks=False)

    def _show_empty(self, title: str, hint: str = "") -> None:
        self.empty.set_text(title, hint)
        self.middle.setCurrentWidget(self.empty)
        self.sources_panel.hide()  # no fact to choose: no "Choose a fact…" and no splitter grip under the message
        self._facts = []
        self.facts.clear()
        self.canvas.draw([], [])
        self._show_sources(None)

    def _show_view(self, view: Any) -> None:
        self._view = view
        if not view.nodes:
            self._show_empty("This memory names nothing in the knowledge graph.",
                             "Facts are taken from a memory once the language model has read it.")
            return
        self._facts = [Fact(i, e.src, e.dst, e.rel, e.text, list(e.sources)) for i, e in enumerate(view.edges)]
        self._render()

    def _render(self) -> None:
        """Draw the view without the facts whose every source waits to be forgotten."""
        view = self._view
        if view is None:
            return
        facts = [f for f in self._facts if any(not self._hidden(s) for s in f.sources)]
        linked = {f.src for f in facts} | {f.dst for f in facts}
        nodes = [n for n in view.nodes if n.hops == 0 or n.id in linked]
        current = self.facts.currentItem()
        keep = current.data(0, EDGE) if current is not None else None
        self.facts.clear()
        for f in facts:
            live = [s for s in f.sources if not self._hidden(s)]
            item = QTreeWidgetItem([f.text, str(len(live))])
            item.setData(0, EDGE, f.index)
            item.setToolTip(0, f.text)
            self.facts.addTopLevelItem(item)
        self.middle.setCurrentIndex(0)
        self.sources_panel.show()
        self.canvas.draw(nodes, facts)
        what = "the memory you chose" if self._start and self._start[0] == "memory" else view.entity
        self.summary = (f"{formatting.plural(len(facts), 'fact')} within {view.hops} "
                        f"hop{'s' if view.hops > 1 else ''} of {formatting.one_line(what, 40)}")
        self.facts.setHeaderLabels([self.summary, "Sources"])
        if keep is not None and any(f.index == keep for f in facts):
            self.select_fact(keep)
        else:
            self._show_sources(None)

    def _fact_row_changed(self, current: QTreeWidgetItem | None, _previous: Any) -> None:
        index = current.data(0, EDGE) if current is not None else None
        self.canvas.select(index)
        fact = next((f for f in self._facts if f.index == index), None)
        self._show_sources(fact)

    def _show_sources(self, fact: Fact | None) -> None:
        for card in self.cards:
            card.deleteLater()
        self.cards = []
        if fact is None:
            self.source_title.setText("Choose a fact to see the memories and passages it was taken from.")
            return
        live = [s for s in fact.sources if not self._hidden(s)]
        self.source_title.setText(f"“{fact.text}” was taken from:")
        for uid in live:
            card = SourceCard(uid)
            card.open_clicked.connect(self.memory_opened.emit)
            card.forget_clicked.connect(self._forget_later)
            self.source_layout.insertWidget(self.source_layout.count() - 1, card)
            self.cards.append(card)
            if uid.startswith("mem_"):
                self.bridge.get(uid, card.show_memory, card.show_missing)
            else:
                self.bridge.get_passage(uid, card.show_passage, card.show_missing)

    def _hidden(self, source: str) -> bool:
        """True while the source (or the document a passage belongs to) waits to be forgotten."""
        target = self._forgotten.get(source)
        return target is not None and target in self.pending

    def _forget_later(self, source: str, target: str) -> None:
        """Hide the source (and the facts it alone supports) now; forget it when the undo window closes.
        A passage's document is forgotten as a whole (with every passage and fact taken from it)."""
        if not target:
            return
        self._forgotten[source] = target
        for other in self._facts:  # other passages of the same document go with it
            for s in other.sources:
                card_target = next((c.target for c in self.cards if c.uid == s), None)
                if card_target == target:
                    self._forgotten[s] = target
        self.pending.schedule(target)
        what = "Memory forgotten." if target.startswith("mem_") else "Document forgotten."
        self.undo_bar.show_for(what + " Its facts are gone from the graph.", self.pending.seconds)
        self._render()

    def _forget(self, uid: str) -> None:
        self.bridge.forget(uid, lambda _r: None, self.status_posted.emit)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        width = self.width()
        want = Qt.Orientation.Horizontal if width >= WIDE else Qt.Orientation.Vertical
        if self.inner.orientation() != want or self._laid_out != (width >= WIDE, width >= NARROW):
            self._laid_out = (width >= WIDE, width >= NARROW)
            self.inner.setOrientation(want)
            # narrow: the list of starting points folds away (the search box completes entity names)
            left = int(min(220, max(140, width * 0.2))) if width >= NARROW else 0
            self.outer.setSizes([left, width - left])
            if want == Qt.Orientation.Horizontal:
                rest = width - left
                self.inner.setSizes([int(rest * 0.64), int(rest * 0.36)])
            else:
                self.inner.setSizes([int(self.height() * 0.62), int(self.height() * 0.38)])
