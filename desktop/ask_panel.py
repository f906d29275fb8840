"""The ask panel: a question, the answer streamed as it is written, and numbered, clickable sources."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QStackedWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from . import formatting
from .bridge import Bridge
from .widgets import Banner, EmptyState, button, muted, page_title

ALL_PROJECTS = "All projects"
CITATION = re.compile(r"\[(\d{1,3})\]")
OLLAMA_HINT = ("No language model is running, so you get the best passages from your memory instead of a "
               "written answer. To get answers, install Ollama from <a href='https://ollama.com'>ollama.com</a> "
               "and run <code>ollama pull llama3.2</code>.")


class AskPanel(QWidget):
    memory_opened = Signal(str)  # a memory source was clicked: show it in the browser
    document_opened = Signal(str, str)  # path, locator

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.sources: list[Any] = []
        self._asking = False

        self.question = QLineEdit()
        self.question.setPlaceholderText("Ask your memory a question…")
        self.question.setClearButtonEnabled(True)
        self.question.returnPressed.connect(self.ask)
        self.project = QComboBox()
        self.project.addItem(ALL_PROJECTS, None)
        self.ask_button = button("Ask", primary=True)
        self.ask_button.clicked.connect(self.ask)
        self.stop_button = button("Stop")
        self.stop_button.clicked.connect(self.bridge.cancel_ask)
        self.stop_button.hide()
        row = QHBoxLayout()
        row.setSpacing(8)
        row.addWidget(self.question, 1)
        row.addWidget(self.project)
        row.addWidget(self.ask_button)
        row.addWidget(self.stop_button)

        self.banner = Banner()
        self.answer = QTextBrowser()
        self.answer.setOpenLinks(False)
        self.answer.anchorClicked.connect(self._anchor_clicked)
        self.answer.setPlaceholderText("The answer appears here, with numbered sources from your memory.")
        self.sources_title = muted("Sources")
        self.source_list = QListWidget()
        self.source_list.setWordWrap(True)
        self.source_list.setMaximumHeight(200)
        self.source_list.itemActivated.connect(self._source_activated)
        self.source_list.itemClicked.connect(self._source_activated)
        self.locator = muted("")

        content = QWidget()
        cl = QVBoxLayout(content)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(8)
        cl.addLayout(row)
        cl.addWidget(self.banner)
        cl.addWidget(self.answer, 1)
        cl.addWidget(self.sources_title)
        cl.addWidget(self.source_list)
        cl.addWidget(self.locator)
        self.unavailable = EmptyState("Asking isn't available in this version yet.",
                                      "Search in Memories finds what you stored in the meantime.")
        self.stack = QStackedWidget()
        self.stack.addWidget(content)
        self.stack.addWidget(self.unavailable)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 12)
        layout.setSpacing(10)
        layout.addWidget(page_title("Ask"))
        layout.addWidget(self.stack, 1)

        bridge.opened.connect(self._opened)
        bridge.answer_token_received.connect(self._token)
        bridge.answer_finished.connect(self._finished)
        bridge.answer_failed.connect(self._failed)
        bridge.answer_cancelled.connect(self._cancelled)
        self._set_sources_visible(False)

    # ------------------------------------------------------------------------------------------------
    def focus_question(self) -> None:
        self.question.setFocus()
        self.question.selectAll()

    def set_projects(self, projects: list[str]) -> None:
        current = self.project.currentData()
        self.project.clear()
        self.project.addItem(ALL_PROJECTS, None)
        for p in projects:
            self.project.addItem(p, p)
        self.project.setCurrentIndex(max(self.project.findData(current), 0))

    def ask(self) -> None:
        question = self.question.text().strip()
        if not question or self._asking:
            return
        self.answer.clear()
        self.sources = []
        self.source_list.clear()
        self.locator.setText("")
        self._set_sources_visible(False)
        self.banner.set("Looking through your memory…", "info")
        self.bridge.ask(question, self.project.currentData())
        self._set_asking(True)

    def open_source(self, n: int) -> None:
        for source in self.sources:
            if int(source.n) == n:
                self._open(source)
                return

    # ------------------------------------------------------------------------------------------------
    def _opened(self, info: Any) -> None:
        self.stack.setCurrentIndex(0)

    def _token(self, piece: str) -> None:
        if not self._asking:
            return
        if self.banner.isVisible() and self.banner.property("tone") == "info":
            self.banner.set("")
        cursor = self.answer.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(piece)
        self.answer.setTextCursor(cursor)
        self.answer.ensureCursorVisible()

    def _set_asking(self, asking: bool) -> None:
        self._asking = asking
        self.ask_button.setVisible(not asking)
        self.stop_button.setVisible(asking)

    def _cancelled(self) -> None:
        self._set_asking(False)
        self.banner.set("Stopped.", "info")

    def _finished(self, result: Any) -> None:
        self._set_asking(False)
        self.sources = list(getattr(result, "sources", []) or [])
        answer = getattr(result, "answer", "") or ""
        self.answer.setHtml(self._answer_html(answer))
        grounded = bool(getattr(result, "grounded", True))
        llm_available = bool(getattr(result, "llm_available", True))
        if not grounded:
            self.banner.set("<b>Not in memory.</b> Nothing you stored answers this well enough, so you get no "
                            "answer rather than a guess.", "warn")
        elif getattr(result, "notice", None) and llm_available:
            self.banner.set(html.escape(result.notice), "info")
        elif not llm_available:
            notice = getattr(result, "notice", None)
            self.banner.set(html.escape(notice) if notice else OLLAMA_HINT, "warn")
        else:
            self.banner.set("")
        for source in self.sources:
            item = QListWidgetItem(self._source_label(source))
            item.setData(Qt.ItemDataRole.UserRole, int(source.n))
            item.setToolTip("Click to open")
            self.source_list.addItem(item)
        self._set_sources_visible(bool(self.sources))

    def _failed(self, message: str) -> None:
        self._set_asking(False)
        self.banner.set(html.escape(message), "error")

    def _answer_html(self, answer: str) -> str:
        known = {int(s.n) for s in self.sources}
        body = html.escape(answer).replace("\n", "<br>")
        return CITATION.sub(
            lambda m: f"<a href='source:{m.group(1)}'>[{m.group(1)}]</a>" if int(m.group(1)) in known else m.group(0),
            body,
        )

    @staticmethod
    def _source_label(source: Any) -> str:
        passage = getattr(source, "passage", None)  # a long memory: the part that matched
        text = "…" + formatting.one_line(passage, 600) if passage else formatting.one_line(
            getattr(source, "text", "") or "", 180)
        if getattr(source, "document_id", None):
            title = source.document_title or Path(source.document_path or "").name or "Document"
            where = f" · {source.locator}" if source.locator else ""
            return f"[{source.n}]  {title}{where}\n{text}"
        return f"[{source.n}]  {formatting.kind_label(getattr(source, 'kind', 'fact'))}\n{text}"

    def _set_sources_visible(self, visible: bool) -> None:
        self.sources_title.setVisible(visible)
        self.source_list.setVisible(visible)

    def _anchor_clicked(self, url: QUrl) -> None:
        if url.scheme() == "source":
            self.open_source(int(url.path() or url.toString().split(":", 1)[1]))
        else:
            QDesktopServices.openUrl(url)

    def _source_activated(self, item: QListWidgetItem) -> None:
        self.open_source(int(item.data(Qt.ItemDataRole.UserRole)))

    def _open(self, source: Any) -> None:
        if getattr(source, "document_id", None):
            path = source.document_path or ""
            locator = source.locator or ""
            title = source.document_title or Path(path).name
            self.locator.setText(f"Opened {title}" + (f" — look at {locator}" if locator else ""))
            self.document_opened.emit(path, locator)
            if path and Path(path).exists():
                QDesktopServices.openUrl(QUrl.fromLocalFile(path))
            elif path:
                self.locator.setText(f"{title} is no longer at {path}" + (f" ({locator})" if locator else ""))
        else:
            self.memory_opened.emit(source.id)
