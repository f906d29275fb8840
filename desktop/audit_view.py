"""The activity log: every write, edit and delete the engine recorded, as sentences ("The command line
remembered a fact · Today 14:02"). A row about a memory or a document opens it. Memory text is never
shown here (the log holds ids and counts only)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QStackedWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from . import formatting
from .bridge import Bridge
from .widgets import EmptyState, button, muted, page_title

ACTORS = {"desktop": "You", "cli": "The command line", "api": "The HTTP API", "mcp": "An assistant (MCP)",
          "engine": "Personal LLM", "system": "Personal LLM", "selftest": "The self-test",
          "watch": "A watched folder"}
ACTIONS = {
    "remember": "remembered {kind}", "update": "edited {kind}", "forget": "forgot {kind}",
    "forget_document": "deleted a document", "merge_duplicate": "merged a duplicate into {kind}",
    "create_store": "created the encrypted store", "ingest": "added a document", "ingest_failed":
    "could not add a document", "ingest_abandoned": "stopped adding a document", "move_document":
    "noted that a document moved", "resolve_conflict": "resolved a conflict", "resolve": "resolved a conflict",
    "conflict_flagged": "found two memories that disagree", "consolidate": "tidied up the memory",
    "decay": "let unused memories fade", "archive": "archived memories that were not used",
    "rollup": "rolled events up into a fact", "embedding_space_changed": "changed the search model",
    "extract_triples": "linked memories in the knowledge graph", "use": "used {kind}", "ask": "asked a question",
    "export": "exported the memory", "import": "imported memories", "backup": "made an encrypted backup",
    "restore": "restored memories", "compact": "compacted the store", "key_rotated": "changed the encryption key",
    "passphrase_changed": "changed the passphrase", "recovery_key_created": "made a recovery key",
    "key_notice": "noted something about the key", "push": "took in copied memories",
    "pull": "copied the memory from a server", "watch_add": "started watching a folder",
    "watch_remove": "stopped watching a folder", "forget_conversation": "forgot a conversation",
    "import_conversation": "imported a conversation", "import_obsidian": "imported an Obsidian vault",
    "agent_run": "ran an agent", "agent_tool": "used a tool for an agent",
}
# the same actions, done many times in one run (a batch): {n} is the count
MANY = {
    "ingest": "added {n} documents", "ingest_failed": "could not add {n} documents",
    "ingest_abandoned": "stopped adding {n} documents", "forget_document": "deleted {n} documents",
    "move_document": "noted that {n} documents moved", "ask": "asked {n} questions",
    "backup": "made {n} encrypted backups", "resolve_conflict": "resolved {n} conflicts",
    "resolve": "resolved {n} conflicts", "conflict_flagged": "found {n} pairs of memories that disagree",
    "extract_triples": "read {n} for the knowledge graph", "import": "imported memories {n} times",
    "push": "took in {n} batches of copied memories", "pull": "copied {n} batches from a server",
    "watch_add": "started watching {n} folders", "watch_remove": "stopped watching {n} folders",
    "forget_conversation": "forgot {n} conversations", "import_conversation": "imported {n} conversations",
    "import_obsidian": "imported Obsidian vaults {n} times", "agent_run": "ran agents ({n} starts and ends)",
    "agent_tool": "used tools for agents {n} times",
}
COUNT_WORDS = {"chunks": "passage", "memories": "memory", "edges": "link", "answers": "answer",
               "archived": "archived", "merged": "merged", "files": "file", "triples": "link",
               "decayed": "faded", "conflicts": "conflict", "documents": "document", "imported": "imported",
               "skipped": "skipped", "uses": "use"}


def who(actor: str) -> str:
    return ACTORS.get(actor, actor.replace("_", " ").capitalize() or "Someone")


def what(target: str | None) -> tuple[str, str | None]:
    """('a memory' | 'a document' | 'a passage', the kind of item it opens)."""
    if not target:
        return "", None
    if target.startswith("mem_"):
        return "a memory", "memory"
    if target.startswith("doc_"):
        return "a document", "document"
    if target.startswith("chk_"):
        return "a passage", "document"
    return "", None


def _plural(n: int, word: str) -> str:
    if word in ("archived", "merged", "faded", "imported", "skipped"):
        return f"{n:,} {word}"
    return formatting.plural(n, word).replace("memorys", "memories")


def details(detail: dict[str, Any]) -> str:
    """Counts and flags in words; ids (and lists of them) become how many there were."""
    parts: list[str] = []
    for key, value in sorted(detail.items()):
        name = key.strip("_").removesuffix("_uids").removesuffix("uids").removesuffix("_ids").replace("_", " ")
        if isinstance(value, list):
            if key.endswith(("uids", "_ids")) or key.startswith("_"):
                word = {"": "memory"}.get(name, COUNT_WORDS.get(name, name.rstrip("s") or "item"))
                if value:
                    parts.append(_plural(len(value), word) + " affected" if not name else _plural(len(value), word))
            continue
        if isinstance(value, bool):
            if value:
                parts.append(name)
        elif isinstance(value, int | float) and key not in ("id",):
            if value:
                word = COUNT_WORDS.get(name)
                whole = float(value).is_integer()
                parts.append(formatting.size(int(value)) if name == "bytes" else  # a backup's size: "1.6 MB"
                             _plural(int(value), word) if word and whole else
                             f"{name} {int(value):,}" if whole else f"{name} {value:g}")  # never "1.57e+06"
        elif isinstance(value, str) and key in ("kind", "status", "reason", "format", "model", "how"):
            parts.append(formatting.kind_label(value) if key == "kind" else value.replace("_", " "))
    return " · ".join(dict.fromkeys(parts))


def _label(entry: Any) -> str:
    kind = (entry.detail or {}).get("kind")
    return formatting.kind_label(kind).lower() if isinstance(kind, str) and kind != "chunk" else ""


def _linking(detail: dict[str, Any], item: str) -> str | None:
    """What reading an item for the knowledge graph did: linked it, found nothing, or could not read it."""
    if detail.get("edges"):
        return f"linked {item} in the knowledge graph"
    if detail.get("failed"):
        return f"could not read {item} for the knowledge graph (the language model did not answer)"
    return f"found nothing to link in {item}"


def sentence(entry: Any) -> str:
    noun, _opens = what(entry.target)
    label = _label(entry)
    item = (("an " if label[:1] in "aeiou" else "a ") + label) if label else (noun or "a memory")
    if entry.action == "extract_triples":
        return f"{who(entry.actor)} {_linking(entry.detail or {}, item)}"
    verb = ACTIONS.get(entry.action, entry.action.replace("_", " ")).format(kind=item)
    return f"{who(entry.actor)} {verb}"


def run_sentence(run: Any) -> str:
    """One sentence for a run of the same write: 'The command line remembered 3,000 facts'."""
    first = run.entries[0]
    if run.count == 1:
        return sentence(first)
    noun, _opens = what(first.target)
    label = _label(first) or {"a document": "document", "a passage": "passage"}.get(noun, "memory")
    items = formatting.plural(run.count, label).replace("memorys", "memories")
    template = ACTIONS.get(first.action, first.action.replace("_", " "))
    if "{kind}" in template:
        verb = template.format(kind=items)
    elif first.action in MANY:
        verb = MANY[first.action].format(n=items if first.action == "extract_triples" else f"{run.count:,}")
    else:
        verb = f"{template} ({run.count:,} times)"
    return f"{who(first.actor)} {verb}"


def run_details(run: Any) -> str:
    """The run's counts summed ('1,204 links · 3 failed'); a single write's details as they are."""
    if run.count == 1:
        return details(run.entries[0].detail or {})
    totals = dict(run.totals)
    if run.entries[0].action == "extract_triples":
        edges, failed = totals.get("edges", 0), totals.get("failed", 0)
        parts = [_plural(edges, "link") if edges else "nothing linked"]
        if failed:
            parts.append(f"{failed:,} not read (the language model did not answer)")
        return " · ".join(parts)
    return details({k: v for k, v in totals.items() if k not in ("project",)})


class AuditView(QWidget):
    memory_opened = Signal(str)
    documents_opened = Signal()

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self._dirty = True
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["When", "What happened", "Details"])
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        header = self.tree.header()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(False)
        header.resizeSection(2, 180)
        self.tree.itemActivated.connect(self._activated)
        self.empty = EmptyState("No activity yet.", "Every change to your memory is listed here.")
        self.stack = QStackedWidget()
        self.stack.addWidget(self.tree)
        self.stack.addWidget(self.empty)
        self.refresh_button = button("Refresh", shortcut="F5")
        self.refresh_button.clicked.connect(self.refresh)
        top = QHBoxLayout()
        top.addWidget(page_title("Activity"))
        top.addStretch(1)
        top.addWidget(self.refresh_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 12)
        layout.setSpacing(10)
        layout.addLayout(top)
        self.intro = muted("What changed in your memory, newest first. Memory text is never shown here; "
                           "double-click a change to a memory or a document to open it.")
        layout.addWidget(self.intro)
        layout.addWidget(self.stack, 1)
        bridge.opened.connect(self._opened)
        bridge.changed.connect(self._engine_changed)

    def _opened(self, _info: Any) -> None:
        self._dirty = True  # another profile (or the same one again): read when looked at

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override: refresh lazily, when looked at
        super().showEvent(event)
        if self._dirty:
            self.refresh()

    def refresh(self) -> None:
        if self.bridge.info is None:
            return
        self._dirty = False
        self.bridge.audit_runs(self._populate)

    def _engine_changed(self, _changes: Any) -> None:
        self._dirty = True
        if self.isVisible():
            self.refresh()

    def _populate(self, runs: list[Any]) -> None:
        """One row per run (a batch of 3,000 writes is one row, opened to show its newest writes)."""
        self.tree.clear()
        link = self.palette().link().color() if hasattr(self.palette(), "link") else QColor("#4F46E5")

        def row(e: Any) -> QTreeWidgetItem:
            _noun, opens = what(e.target)
            item = QTreeWidgetItem([formatting.when(e.at), sentence(e), details(e.detail or {})])
            item.setToolTip(0, e.at)
            item.setToolTip(1, f"Double-click to open it ({e.target})" if opens else "")
            item.setData(0, Qt.ItemDataRole.UserRole, (opens, e.target))
            if opens:
                item.setForeground(1, link)
            return item

        for run in runs:
            if run.count == 1:
                self.tree.addTopLevelItem(row(run.entries[0]))
                continue
            item = QTreeWidgetItem([formatting.when(run.newest_at), run_sentence(run), run_details(run)])
            item.setToolTip(0, f"{run.oldest_at} to {run.newest_at}")
            item.setToolTip(1, "Click the arrow to see the newest of them")
            item.addChildren([row(e) for e in run.entries])
            if run.count > len(run.entries):
                more = QTreeWidgetItem(["", f"… and {run.count - len(run.entries):,} earlier", ""])
                more.setFlags(Qt.ItemFlag.NoItemFlags)
                item.addChild(more)
            self.tree.addTopLevelItem(item)
        self.tree.setRootIsDecorated(any(run.count > 1 for run in runs))
        self.stack.setCurrentWidget(self.tree if runs else self.empty)

    def _activated(self, item: QTreeWidgetItem, _column: int) -> None:
        opens, target = item.data(0, Qt.ItemDataRole.UserRole) or (None, None)
        if opens == "memory" and target:
            self.memory_opened.emit(target)
        elif opens == "document":
            self.documents_opened.emit()
