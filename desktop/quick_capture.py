"""The quick-capture box: a small frameless window at the front. Type a fact, Enter stores it, Esc closes
the box and keeps the draft for the next time.

Text dropped on it becomes a memory; files and folders dropped on it are ingested.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, QTimer, Signal
from PySide6.QtGui import QCursor, QDragEnterEvent, QDropEvent, QGuiApplication, QKeyEvent, QShowEvent
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from . import drops, formatting, icons
from .bridge import project_problem
from .widgets import refill_editable, usable_area

KINDS = tuple((formatting.kind_label(k), k) for k in ("fact", "episodic", "procedural"))  # one vocabulary
NO_PROJECT = "No project"
HINT = "Enter to save · Esc to close · drop files to add them"
HINT_WITH_DRAFT = "Enter to save · Esc to close (the draft is kept) · drop files to add them"


class _CaptureInput(QLineEdit):
    """The text field; Esc anywhere in the box cancels (the box is rarely the OS's active window)."""

    escaped = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        if event.key() == Qt.Key.Key_Escape:
            self.escaped.emit()
            return
        super().keyPressEvent(event)


class QuickCapture(QWidget):
    capture_submitted = Signal(str, str, str)  # text, kind, project ("" for none)
    files_dropped = Signal(list)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Tool | Qt.WindowType.FramelessWindowHint
                         | Qt.WindowType.WindowStaysOnTopHint)
        self.setObjectName("QuickCapture")
        self.setWindowTitle("Quick capture — Personal LLM")
        self.setAcceptDrops(True)
        self.resize(600, 112)

        # Opaque on purpose: without a compositing window manager a translucent window shows black corners.
        panel = QFrame(self)
        panel.setObjectName("CapturePanel")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(panel)

        self.icon = QLabel()
        self.icon.setPixmap(icons.app_icon().pixmap(28, 28))
        self.input = _CaptureInput()
        self.input.escaped.connect(self.cancel)
        self.input.setObjectName("CaptureInput")
        self.input.setPlaceholderText("Remember that…")
        self.input.returnPressed.connect(self.submit)
        top = QHBoxLayout()
        top.setSpacing(10)
        top.addWidget(self.icon)
        top.addWidget(self.input, 1)

        self.kind = QComboBox()
        for label, value in KINDS:
            self.kind.addItem(label, value)
        self.kind.setToolTip("What kind of memory this is")
        self.project = QComboBox()
        self.project.setEditable(True)
        self.project.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.project.addItem(NO_PROJECT)
        self.project.setToolTip("Project (type a new name to start one)")
        self.project.setMinimumWidth(160)
        line = self.project.lineEdit()
        if line is not None:  # Enter saves from the project's field too, as the hint says
            line.returnPressed.connect(self.submit)
        self.status = QLabel(HINT)
        self.status.setObjectName("Muted")
        # a long message (an error) wraps in the room left instead of widening the box past the screen
        self.status.setWordWrap(True)
        self.status.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        bottom = QHBoxLayout()
        bottom.setSpacing(8)
        bottom.addWidget(self.kind)
        bottom.addWidget(self.project)
        bottom.addWidget(self.status, 1)

        inner = QVBoxLayout(panel)
        inner.setContentsMargins(16, 12, 16, 12)
        inner.setSpacing(8)
        inner.addLayout(top)
        inner.addLayout(bottom)
        self._rows, self._bottom = inner, bottom

        self._saving = False
        self.status.ensurePolished()  # its style's font: room for the hint on one line, where the screen has it
        self._hint_width = self.status.fontMetrics().horizontalAdvance(HINT) + 8

    # ------------------------------------------------------------------------------------------------
    def open_box(self) -> None:
        """Show at the front, centred in the upper third of the screen under the mouse."""
        screen = QGuiApplication.screenAt(QCursor.pos()) or QGuiApplication.primaryScreen()
        if screen is not None:
            area = usable_area(screen)
            room = area.width() - 16
            # the hint beside the choices, on one line, where it fits; on a narrow screen (or a large scale)
            # on a row of its own, wrapped, instead of pushing the box past the screen's edge
            narrow = room < 600 + self._hint_width // 2
            self.status.setMinimumWidth(0 if narrow else self._hint_width)
            self.status.setAlignment((Qt.AlignmentFlag.AlignLeft if narrow else Qt.AlignmentFlag.AlignRight)
                                     | Qt.AlignmentFlag.AlignVCenter)
            self._bottom.removeWidget(self.status)
            self._rows.removeWidget(self.status)
            if narrow:
                self._rows.addWidget(self.status)
            else:
                self._bottom.addWidget(self.status, 1)
            self.resize(min(max(600, self.minimumSizeHint().width()), room), self.height())
            self._fit_height()
            self.move(area.center().x() - self.width() // 2, area.top() + area.height() // 4)
        self._set_status(HINT_WITH_DRAFT if self.input.text() else HINT)
        self.input.setEnabled(not self._saving)
        self.show()
        self.raise_()
        self.activateWindow()
        self.input.setFocus(Qt.FocusReason.ActiveWindowFocusReason)

    def set_projects(self, projects: list[str]) -> None:
        """The projects to choose from (read when the engine opens, perhaps while a name is being typed)."""
        refill_editable(self.project, [NO_PROJECT, *projects], fallback=NO_PROJECT)

    def submit(self) -> None:
        text = self.input.text().strip()
        if not text or self._saving:
            return
        problem = project_problem(self._project())  # the name is what to fix: the cursor goes there
        if problem is not None:
            line = self.project.lineEdit()
            if line is not None:
                line.setFocus()
                line.selectAll()
            self._set_status(problem, error=True)
            return
        self._saving = True
        self.input.setEnabled(False)
        self._set_status("Saving…")
        self.capture_submitted.emit(text, self.kind.currentData(), self._project())

    def mark_saved(self, _result: object = None) -> None:
        self._saving = False
        self.input.clear()
        self.input.setEnabled(True)
        self._set_status("Saved ✓")
        QTimer.singleShot(700, self._hide_if_idle)

    def mark_failed(self, message: str) -> None:
        self._saving = False
        self.input.setEnabled(True)
        self.input.setFocus()
        self._set_status(message, error=True)

    def show_message(self, message: str) -> None:
        self._set_status(message)

    # ------------------------------------------------------------------------------------------------
    def _project(self) -> str:
        text = self.project.currentText().strip()
        return "" if text in ("", NO_PROJECT) else text

    def _set_status(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet("color: #DC2626;" if error else "")
        self.status.setToolTip(text)
        self._fit_height()

    def _fit_height(self) -> None:
        """As tall as the message needs at this width (a wrapped error, a narrow screen), never shorter."""
        layout = self.layout()
        if layout is None:
            return
        need = layout.totalHeightForWidth(self.width()) if layout.hasHeightForWidth() else layout.sizeHint().height()
        self.resize(self.width(), max(112, need))

    def _hide_if_idle(self) -> None:
        if not self._saving and not self.input.text():
            self.hide()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        if event.key() == Qt.Key.Key_Escape:
            self.cancel()
            return
        super().keyPressEvent(event)

    def cancel(self) -> None:
        """Esc: the box goes away, the half-typed draft stays for the next time it opens."""
        self.hide()

    @property
    def draft(self) -> str:
        return self.input.text()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        self.input.setFocus()

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt override
        if drops.local_paths(event.mimeData()) or drops.dropped_text(event.mimeData()):
            event.acceptProposedAction()

    def dragMoveEvent(self, event) -> None:  # noqa: N802 - Qt override
        event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt override
        mime = event.mimeData()
        paths = drops.local_paths(mime)
        if paths:
            event.acceptProposedAction()
            self._set_status(f"Adding {len(paths)} item{'s' if len(paths) != 1 else ''}… (progress in Documents)")
            self.files_dropped.emit(paths)
            return
        text = drops.dropped_text(mime)
        if text:
            event.acceptProposedAction()
            self.input.setText(text)
            self.submit()

    def mousePressEvent(self, event) -> None:  # noqa: N802 - Qt override: drag the frameless box around
        self._drag_from = event.globalPosition().toPoint() - self.frameGeometry().topLeft()

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 - Qt override
        origin: QPoint | None = getattr(self, "_drag_from", None)
        if origin is not None and event.buttons() & Qt.MouseButton.LeftButton:
            self.move(event.globalPosition().toPoint() - origin)

