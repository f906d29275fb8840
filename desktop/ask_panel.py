"""The ask panel: a question, the answer streamed as it is written, and numbered, clickable sources.

With "Agent" on, the question is a task for an agent (docs/agents.md): each step shows as it happens
(the tool called, what it gave), a step that needs the user's permission opens a dialog naming the tool
and its arguments (desktop/agent_dialog.py), and Stop ends the run at any time."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QTextCursor
from PySide6.QtWidgets import (
    QCheckBox,
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
from .agent_dialog import AgentConfirmDialog, arguments_text
from .bridge import Bridge
from .widgets import Banner, EmptyState, button, muted, page_title

ALL_PROJECTS = "All projects"
AGENT_TIP = "Let an agent do the task step by step with tools: search, documents, dates… It asks before it changes anything."
CITATION = re.compile(r"\[(\d{1,3})\]")
STOPPED_AT = {"step_limit": "The agent used all its steps; this is what it found so far.",
              "time_limit": "The agent ran out of time; this is what it found so far."}
MARKS = {"ok": "✓", "failed": "✗", "refused": "✗", "declined": "✗", "timeout": "✗"}
OLLAMA_HINT = ("No language model is running, so you get the best passages from your memory instead of a "
               "written answer. To get answers, install Ollama from https://ollama.com and run "
               "`ollama pull llama3.2`.")


class AskPanel(QWidget):
    memory_opened = Signal(str)  # a memory source was clicked: show it in the browser
    passage_requested = Signal(object)  # a document source was clicked: show its passage inside the app

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.sources: list[Any] = []
        self._asking = False
        self._agent_mode = False  # the question in flight is an agent's task
        self.dialog: AgentConfirmDialog | None = None

        self.question = QLineEdit()
        self.question.setPlaceholderText("Ask your memory a question…")
        self.question.setClearButtonEnabled(True)
        self.question.returnPressed.connect(self.ask)
        self.project = QComboBox()
        self.project.addItem(ALL_PROJECTS, None)
        self.ask_button = button("Ask", primary=True)
        self.ask_button.clicked.connect(self.ask)
        self.stop_button = button("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.hide()
        self.agent_toggle = QCheckBox("Agent")
        self.agent_toggle.setToolTip(AGENT_TIP)
        self.agent_toggle.toggled.connect(self._agent_toggled)
        self.agent_picker = QComboBox()
        self.agent_picker.addItem("Research", "Research")
        self.agent_picker.hide()
        row = QHBoxLayout()
        row.setSpacing(8)
        row.addWidget(self.question, 1)
        row.addWidget(self.agent_toggle)
        row.addWidget(self.agent_picker)
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
        self.steps_title = muted("Steps")
        self.steps = QListWidget()
        self.steps.setWordWrap(True)
        self.steps.setMaximumHeight(180)

        content = QWidget()
        cl = QVBoxLayout(content)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(8)
        cl.addLayout(row)
        cl.addWidget(self.banner)
        cl.addWidget(self.steps_title)
        cl.addWidget(self.steps)
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
        bridge.agent_step_received.connect(self._agent_step)
        bridge.agent_confirm_requested.connect(self._confirm)
        bridge.agent_finished.connect(self._agent_finished)
        bridge.agent_failed.connect(self._failed)
        bridge.agent_cancelled.connect(self._cancelled)
        self._set_sources_visible(False)
        self._set_steps_visible(False)

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
        self._agent_mode = self.agent_toggle.isChecked()
        self.steps.clear()
        self._set_steps_visible(self._agent_mode)
        if self._agent_mode:
            agent = self.agent_picker.currentData()
            self.banner.set(f"{agent} is working on it…", "info")
            self.bridge.agent_run(question, agent, self.project.currentData())
        else:
            self.banner.set("Looking through your memory…", "info")
            self.bridge.ask(question, self.project.currentData())
        self._set_asking(True)

    def stop(self) -> None:
        """Stop the answer or the agent now; a permission question still open is withdrawn (not allowed)."""
        if self._agent_mode:
            self.bridge.cancel_agent()
            if self.dialog is not None:
                self.dialog.dismiss()
                self.dialog = None
        else:
            self.bridge.cancel_ask()

    def open_source(self, n: int) -> None:
        for source in self.sources:
            if int(source.n) == n:
                self._open(source)
                return

    # ------------------------------------------------------------------------------------------------
    def _opened(self, info: Any) -> None:
        self.stack.setCurrentIndex(0)
        reason = info.unavailable.get("agents")
        if reason is not None:  # a profile on a server: questions are answered there, agents run here only
            self.agent_toggle.setChecked(False)
        self.agent_toggle.setEnabled(reason is None)
        self.agent_toggle.setToolTip(reason or AGENT_TIP)
        if reason is None:
            self.bridge.list_agents(self._set_agents)

    def _set_agents(self, agents: Any) -> None:
        current = self.agent_picker.currentData()
        self.agent_picker.clear()
        for a in agents or []:
            self.agent_picker.addItem(a.name, a.name)
            self.agent_picker.setItemData(self.agent_picker.count() - 1, a.description, Qt.ItemDataRole.ToolTipRole)
        self.agent_picker.setCurrentIndex(max(self.agent_picker.findData(current), 0))

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override: agents added meanwhile (settings.json) appear
        super().showEvent(event)
        if self.bridge.info is not None and self.agent_toggle.isEnabled():
            self.bridge.list_agents(self._set_agents)

    def _agent_toggled(self, on: bool) -> None:
        if on and self.bridge.info is not None:
            self.bridge.list_agents(self._set_agents)
        self.agent_picker.setVisible(on)
        self.question.setPlaceholderText("Give an agent a task…" if on else "Ask your memory a question…")
        self.ask_button.setText("Run" if on else "Ask")

    # -- agent runs --------------------------------------------------------------------------------
    def _add_step(self, text: str, tone: str | None = None) -> None:
        item = QListWidgetItem(text)
        if tone:
            item.setData(Qt.ItemDataRole.UserRole, tone)
        self.steps.addItem(item)
        self.steps.scrollToBottom()

    def _agent_step(self, step: Any) -> None:
        if not (self._asking and self._agent_mode):
            return
        if step.kind == "text":
            self._token(step.text or "")
        elif step.kind == "call":
            plan = self.answer.toPlainText().strip()
            if plan:  # what the model wrote before choosing a tool was its plan, not the answer
                self._add_step(f"Plan: {formatting.one_line(plan, 300)}")
                self.answer.clear()
            args = ", ".join(arguments_text(step.arguments or {}).splitlines())
            self._add_step(f"→ {step.tool}({formatting.one_line(args, 200)})")
        elif step.kind == "confirm":
            self._add_step(f"? Waiting for you: allow {step.tool}?", "warn")
        elif step.kind == "observation":
            self._add_step(f"    {MARKS.get(step.status or '', '·')} {step.summary}",
                           "ok" if step.status == "ok" else "warn")

    def _confirm(self, request: Any) -> None:
        if not (self._asking and self._agent_mode):
            self.bridge.answer_agent(request.call_id, False)
            return
        dialog = AgentConfirmDialog(request, self)
        dialog.answered.connect(self._confirm_answered)
        self.dialog = dialog
        dialog.open()

    def _confirm_answered(self, call_id: str, approve: bool) -> None:
        self.dialog = None
        self.bridge.answer_agent(call_id, approve)

    def _agent_finished(self, run: Any) -> None:
        if self.dialog is not None:
            self.dialog.dismiss()
            self.dialog = None
        self._set_asking(False)
        self.sources = list(run.sources)
        self.answer.setHtml(self._answer_html(run.answer))
        self.banner.set(STOPPED_AT.get(run.stopped, ""), "info")
        self._add_step(f"Done: {run.tool_calls} tool call{'s' if run.tool_calls != 1 else ''}.")
        shown = [s for s in self.sources if f"[{s.n}]" in run.answer]
        for source in shown:
            item = QListWidgetItem(self._source_label(source))
            item.setData(Qt.ItemDataRole.UserRole, int(source.n))
            item.setToolTip("Click to open")
            self.source_list.addItem(item)
        self._set_sources_visible(bool(shown))

    def _set_steps_visible(self, visible: bool) -> None:
        self.steps_title.setVisible(visible)
        self.steps.setVisible(visible)

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
        if self.dialog is not None:
            self.dialog.dismiss()
            self.dialog = None
        self._set_asking(False)
        self.banner.set("Stopped.", "info")
        if self._agent_mode:
            self._add_step("Stopped.")

    def _finished(self, result: Any) -> None:
        self._set_asking(False)
        self.sources = list(getattr(result, "sources", []) or [])
        answer = getattr(result, "answer", "") or ""
        self.answer.setHtml(self._answer_html(answer))
        grounded = bool(getattr(result, "grounded", True))
        llm_available = bool(getattr(result, "llm_available", True))
        if not grounded:
            self.banner.set("Not in memory: nothing you stored answers this well enough, so you get no "
                            "answer rather than a guess.", "warn")
        elif getattr(result, "notice", None) and llm_available:
            self.banner.set(result.notice, "info")
        elif not llm_available:
            notice = getattr(result, "notice", None)
            self.banner.set(notice or OLLAMA_HINT, "warn")
        else:
            self.banner.set("")
        for source in self.sources:
            item = QListWidgetItem(self._source_label(source))
            item.setData(Qt.ItemDataRole.UserRole, int(source.n))
            item.setToolTip("Click to open")
            self.source_list.addItem(item)
        self._set_sources_visible(bool(self.sources))

    def _failed(self, message: str) -> None:
        if self.dialog is not None:
            self.dialog.dismiss()
            self.dialog = None
        self._set_asking(False)
        self.banner.set(message, "error")

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
            title = source.document_title or Path(source.document_path or "").name or "the document"
            locator = source.locator or ""
            self.locator.setText(f"Showing {title}" + (f" — {locator}" if locator else ""))
            self.passage_requested.emit(source)
        else:
            self.memory_opened.emit(source.id)
