"""Small shared widgets: page header, empty state, banner, undo bar; refilling an editable combo box; dialogs
that grow to fit what they show."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QScreen
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSpinBox,
    QComboBox,
    QDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)


def usable_area(screen: QScreen | None = None) -> QRect:
    """The part of `screen` (else the primary one) that a window may cover: its available geometry (less the
    panels and the tray), kept inside the screen. With QT_SCALE_FACTOR set, Qt on X11 scales a panel's
    height but not the offset it starts at (a 28-pixel panel on a 1600x1200 screen at scale 2 gave 0,28
    800x586 for a screen 600 high), so the raw area ran past the screen's bottom, and the status bar with it."""
    screen = screen or QGuiApplication.primaryScreen()
    if screen is None:
        return QRect(0, 0, 1280, 800)
    return screen.availableGeometry().intersected(screen.geometry())


def page_title(text: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName("PageTitle")
    return label


def muted(text: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName("Muted")
    label.setWordWrap(True)
    return label


def scroller(widget: QWidget | None = None, *, across: bool = True) -> QScrollArea:
    """A frameless scroll area that sizes its widget to itself (scrolling only what does not fit); without
    `across`, never a horizontal scroll bar (the widget's text wraps instead). The wheel scrolls it even over
    a choice box or a number field that was not clicked (see _WheelScrolls)."""
    scroll = QScrollArea()
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    if not across:
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    if widget is not None:
        scroll.setWidget(widget)
    scroll.installEventFilter(_WheelScrolls(scroll))
    return scroll


class _WheelScrolls(QObject):
    """Qt hands a wheel turn to the choice box (or number field) under the pointer, which changes its value:
    scrolling down a page of settings switched the search model to "None" as the box passed under the
    pointer, and Save kept it. Inside a scroll area such a field takes the wheel only once it has the focus
    (clicked or tabbed to); until then the turn scrolls the nearest scroll area around it that can scroll.
    The fields are found when the scroll area is shown."""

    def __init__(self, scroll: QScrollArea) -> None:
        super().__init__(scroll)
        self.scroll = scroll

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if watched is self.scroll:
            if event.type() == QEvent.Type.Show:
                for field in self.scroll.findChildren(QComboBox) + self.scroll.findChildren(QAbstractSpinBox):
                    if not field.property("wheelScrolls"):  # once, also when scroll areas are nested
                        field.setProperty("wheelScrolls", True)
                        field.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # the wheel alone does not focus it
                        field.installEventFilter(self)
            return False
        if event.type() != QEvent.Type.Wheel or not isinstance(watched, QWidget):
            return False
        if watched.hasFocus() or (isinstance(watched, QComboBox) and watched.view().isVisible()):
            return False  # chosen on purpose: the field takes the wheel
        area = watched.parentWidget()
        while area is not None and not (isinstance(area, QAbstractScrollArea)
                                        and area.verticalScrollBar().isVisible()):
            area = area.parentWidget()
        if isinstance(area, QAbstractScrollArea):
            QCoreApplication.sendEvent(area.verticalScrollBar(), event)
        return True  # never a silent change of the value


def button(text: str, *, primary: bool = False, danger: bool = False, shortcut: str | None = None) -> QPushButton:
    """A push button. In a dialog, Enter runs the primary one (wherever the focus is) and never another:
    no button becomes the default just by being first or focused."""
    b = QPushButton(text)
    b.setAutoDefault(False)
    if primary:
        b.setProperty("primary", True)
        b.setDefault(True)
    if danger:
        b.setProperty("danger", True)
    if shortcut:
        b.setShortcut(shortcut)
        b.setToolTip(f"{text.replace('&', '')} ({shortcut})")
    return b


def refill_editable(combo: QComboBox, items: list[str], *, fallback: str = "") -> None:
    """Replace an editable combo box's items, keeping what is typed in it (or `fallback` when nothing is),
    its cursor and its selection: the list is reloaded whenever the store changes (another program's write,
    a document finishing in the background), which may be while someone is typing a name there."""
    current = combo.currentText()
    line = combo.lineEdit()
    cursor = line.cursorPosition() if line is not None else 0
    selected = (line.selectionStart(), len(line.selectedText())) if line is not None and line.hasSelectedText() else None
    combo.blockSignals(True)
    try:
        combo.clear()
        combo.addItems(items)
        combo.setCurrentText(current or fallback)
        if line is not None and current:
            if selected is not None:
                line.setSelection(*selected)
            else:
                line.setCursorPosition(cursor)
    finally:
        combo.blockSignals(False)


class EmptyState(QWidget):
    """A friendly line (and a hint) where a list has nothing to show."""

    def __init__(self, title: str = "", hint: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel(title)
        self.title.setObjectName("EmptyState")
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.title.setWordWrap(True)
        self.hint = muted(hint)
        self.hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout = QVBoxLayout(self)
        layout.addStretch(1)
        layout.addWidget(self.title)
        layout.addWidget(self.hint)
        layout.addStretch(2)

    def set_text(self, title: str, hint: str = "") -> None:
        self.title.setText(title)
        self.hint.setText(hint)
        self.hint.setVisible(bool(hint))


class Banner(QFrame):
    """An inline message: info, ok, warn or error."""

    def __init__(self, text: str = "", tone: str = "info", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Banner")
        self.label = QLabel(text)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.label.setOpenExternalLinks(True)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.addWidget(self.label, 1)
        self.set(text, tone)

    def set(self, text: str, tone: str = "info") -> None:
        from .formatting import message_html

        self.text = text  # as given (tests and copies read this; the label shows it as rich text)
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setText(message_html(text))
        self.setProperty("tone", tone)
        self.style().unpolish(self)
        self.style().polish(self)
        self.setVisible(bool(text))
        self.updateGeometry()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        """As tall as the text is at the width it has: a wrapped QLabel's own hint assumes a narrow column,
        and a form layout takes that hint as is, leaving a one-line message in a four-line box."""
        hint = super().sizeHint()
        if self.width() > 0 and self.hasHeightForWidth():
            hint.setHeight(self.heightForWidth(self.width()))
        return hint

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        if event.oldSize().width() != event.size().width():
            self.updateGeometry()


class UndoBar(QFrame):
    """'Memory deleted. [Undo]' for a few seconds."""

    undo_clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Banner")
        self.setProperty("tone", "info")
        self.label = QLabel()
        self.undo = button("&Undo", shortcut="Ctrl+Z")
        self.undo.clicked.connect(self.undo_clicked.emit)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 6, 8, 6)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.undo)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.hide)
        self.hide()

    def show_for(self, text: str, seconds: float) -> None:
        self.label.setText(text)
        self.show()
        self._timer.start(int(seconds * 1000))


class _GrowToFit(QObject):
    """See `grow_to_fit`."""

    def __init__(self, dialog: QDialog) -> None:
        super().__init__(dialog)
        self.dialog = dialog
        self._pending = False
        self.body: QScrollArea | None = None  # the scroll area the dialog's fields moved into, on a short screen
        self._around = 0

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt API)
        watching = watched is self.dialog or (self.body is not None and watched is self.body.widget())
        if watching and event.type() in (QEvent.Type.LayoutRequest, QEvent.Type.Show) and not self._pending:
            self._pending = True
            QTimer.singleShot(0, self.fit)  # once the layout has taken in what changed
        return False

    def needed_height(self) -> int:
        """The height the dialog's fields and text need at its width (in the scroll area, once there)."""
        layout = self.body.widget().layout() if self.body is not None else self.dialog.layout()
        if layout is None:
            return 0
        layout.activate()
        width = self.body.viewport().width() if self.body is not None else self.dialog.width()
        if layout.hasHeightForWidth():
            return layout.totalHeightForWidth(width) + self._around
        return layout.totalSizeHint().height() + self._around

    def fit(self) -> None:
        self._pending = False
        need = self.needed_height()
        screen = self.dialog.screen()
        room = usable_area(screen).height() - 48 if screen is not None else need  # its title bar stays on it
        if need > room and self.body is None:
            self._scroll_body()  # a short screen (or a large scale): the fields keep their height and scroll
            need = self.needed_height()
        need = min(need, room)
        self.dialog.setMinimumHeight(need)
        if self.dialog.height() < need:
            self.dialog.resize(self.dialog.width(), need)

    def _scroll_body(self) -> None:
        """Move the dialog's layout, with its fields, into a scroll area that fills the dialog; its last row (the
        buttons) stays under it, always in view."""
        layout = self.dialog.layout()
        margins = layout.contentsMargins()
        # moving a widget to another parent hides it: those the dialog showed are shown again after
        shown = [w for w in self.dialog.findChildren(QWidget) if w.isVisibleTo(self.dialog)]
        last = layout.takeAt(layout.count() - 1) if layout.count() > 1 else None
        inner = QWidget()
        inner.setLayout(layout)  # takes the layout, and the widgets in it, from the dialog
        self.body = scroller(inner, across=False)
        outer = QVBoxLayout(self.dialog)
        outer.setContentsMargins(0, 0, 0, margins.bottom())
        outer.addWidget(self.body, 1)
        self._around = 2
        row = QWidget()
        if last is not None:
            rl = QVBoxLayout(row)
            rl.setContentsMargins(margins.left(), 8, margins.right(), 0)
            if last.layout() is not None:
                rl.addLayout(last.layout())
            elif last.widget() is not None:
                rl.addWidget(last.widget())
            outer.addWidget(row)
            self._around += row.sizeHint().height() + margins.bottom()
        for w in [self.body, inner, *([row] if last is not None else []), *shown]:
            w.show()  # under a dialog not shown yet, this only undoes the hiding
        inner.installEventFilter(self)  # what it shows grows: fit again


def grow_to_fit(dialog: QDialog) -> None:
    """Make `dialog` grow when what it shows grows (a progress bar, an error appearing), so that its fields
    keep their height. Without this, a dialog with a minimum width and wrapped text gets no minimum height
    from its layout, and Qt squeezes the line edits to a few pixels instead."""
    dialog.installEventFilter(_GrowToFit(dialog))
