"""A server profile's outbox file (engine/store/sqlite/outbox.py) made by an earlier version: opened as it is,
its waiting writes kept and sent, each write now naming the program that made it."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from engine.keys import pragma_for
from engine.store.sqlite.db import connect
from engine.store.sqlite.outbox import OutboxFile


def test_an_outbox_made_before_writes_named_their_program_keeps_its_writes(tmp_path: Path) -> None:
    path, key = tmp_path / "outbox.db", pragma_for(secrets.token_bytes(32))
    old = connect(path, key)  # the file as the version before made it, one write waiting
    old.execute("CREATE TABLE waiting (seq INTEGER PRIMARY KEY AUTOINCREMENT, op TEXT NOT NULL, uid TEXT NOT NULL "
                "UNIQUE, target TEXT, payload TEXT NOT NULL, data BLOB, made_at REAL NOT NULL, attempts INTEGER NOT "
                "NULL DEFAULT 0, refused TEXT)")
    old.execute("INSERT INTO waiting(op, uid, target, payload, made_at) VALUES ('remember', 'mem_old', NULL, ?, 1.0)",
                (json.dumps({"text": "The gate code is 1984"}),))
    old.commit()
    old.close()

    box = OutboxFile(path, key)
    try:
        box.add("remember", "mem_new", None, {"text": "The shed key is on the hook"}, door="desktop")
        first = box.next(0)
        assert first is not None and (first.uid, first.payload["text"], first.door) == ("mem_old", "The gate code is "
                                                                                       "1984", None)
        second = box.next(first.seq)
        assert second is not None and (second.uid, second.door) == ("mem_new", "desktop")
    finally:
        box.close()
    again = OutboxFile(path, key)  # opened again: nothing to change
    try:
        assert [(w.uid, w.door) for w in again.waiting()] == [("mem_old", None), ("mem_new", "desktop")]
    finally:
        again.close()
