"""What both backends' merge of exported records shares: the bookkeeping of a merge (which uids map to which
rows, what was added and skipped), the order the record kinds are merged in, and how a plain list of memories
becomes memory records. Each backend's Merger writes the rows (engine/store/sqlite/transfer.py,
engine/store/postgres/transfer.py)."""

from __future__ import annotations

import time
from typing import Any

from ..memory_rules import EPISODIC_DISCOUNT, IMPORTANCE_BY_SOURCE, check_text, new_uid
from ..records import MemoryRecord, PlainMemory, to_iso, to_ts


class MergeBase:
    """Adds what is new, maps what is already there; old uids resolve to this store's rows. A backend gives
    the `_document` … `_audit` steps for its rows."""

    def __init__(self) -> None:
        self.added: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        self.doc_ids: dict[str, int] = {}
        self.chunk_ids: dict[str, int] = {}
        self.conv_ids: dict[str, int] = {}
        self.mem_ids: dict[str, int] = {}
        self.mem_uids: dict[str, str] = {}  # uid in the file -> uid in this store
        self.node_ids: dict[str, int] = {}
        self.new_memory_ids: list[int] = []
        self.new_memory_uids: list[str] = []
        self.new_chunk_ids: list[int] = []
        self.new_document_uids: list[str] = []
        self.new_memories: dict[str, int] = {}  # uid -> row id of the memories and chunks this merge added
        self.new_chunks: dict[str, int] = {}

    def _count(self, kind: str, added: bool) -> None:
        bucket = self.added if added else self.skipped
        bucket[kind] = bucket.get(kind, 0) + 1

    def merge_export(self, con: Any, records: dict[str, list[Any]]) -> None:
        for r in records["document"]:
            self._document(con, r)
        for r in records["chunk"]:
            self._chunk(con, r)
        for r in records["conversation"]:
            self._conversation(con, r)
        for r in records["message"]:
            self._message(con, r)
        self._memories(con, records["memory"])
        self._fix_conflicts(con, records["memory"])
        for r in records["derivation"]:
            self._derivation(con, r)
        for r in records["fact_check"]:
            self._fact_check(con, r)
        for r in records["node"]:
            self._node(con, r)
        for r in records["edge"]:
            self._edge(con, r)
        for r in records.get("audit", []):  # a push's batches carry no audit records
            self._audit(con, r)

    def merge_plain(self, con: Any, items: list[PlainMemory]) -> None:
        now = to_iso(time.time()) or ""
        for item in items:
            importance = item.importance
            if importance is None:
                importance = IMPORTANCE_BY_SOURCE["import"] - (EPISODIC_DISCOUNT if item.kind == "episodic" else 0.0)
            self._memory(con, MemoryRecord(uid=new_uid("mem"), kind=item.kind, text=check_text(item.text),
                                           importance=importance, created_at=now, updated_at=now,
                                           at=to_iso(to_ts(item.at)), project=item.project, source="import"))

    def _memories(self, con: Any, records: list[MemoryRecord]) -> None:
        for r in records:
            self._memory(con, r)

    # the backend's steps
    def _document(self, con: Any, r: Any) -> Any: raise NotImplementedError
    def _chunk(self, con: Any, r: Any) -> None: raise NotImplementedError
    def _conversation(self, con: Any, r: Any) -> Any: raise NotImplementedError
    def _message(self, con: Any, r: Any) -> None: raise NotImplementedError
    def _memory(self, con: Any, r: MemoryRecord) -> None: raise NotImplementedError
    def _fix_conflicts(self, con: Any, records: list[MemoryRecord]) -> None: raise NotImplementedError
    def _derivation(self, con: Any, r: Any) -> None: raise NotImplementedError
    def _fact_check(self, con: Any, r: Any) -> None: raise NotImplementedError
    def _node(self, con: Any, r: Any) -> None: raise NotImplementedError
    def _edge(self, con: Any, r: Any) -> None: raise NotImplementedError
    def _audit(self, con: Any, r: Any) -> None: raise NotImplementedError
