"""A server profile's outbox: the writes made on this device that its server has not answered yet, in an
encrypted SQLCipher file of the profile (engine/remote.py keeps it; docs/server.md, "Using it from several
devices").

A write waits in `waiting` in the order it was made (`seq`); once the server has answered it, it moves to
`answered` with the answer (kept a day: the process that made it reads its answer there when another
process delivered it). A write the server refused for good (an invalid one) stays, marked `refused` with the
server's reason, and no longer holds up the ones behind it. Every change is one transaction; the file is
written with `synchronous = FULL`, so a write the command said it kept survives a crash of the machine.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .db import Connection, connect

ANSWER_KEPT_SECONDS = 24 * 3600
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS waiting (seq INTEGER PRIMARY KEY AUTOINCREMENT, op TEXT NOT NULL, "
    "uid TEXT NOT NULL UNIQUE, target TEXT, payload TEXT NOT NULL, data BLOB, made_at REAL NOT NULL, "
    "attempts INTEGER NOT NULL DEFAULT 0, refused TEXT, door TEXT)",
    "CREATE TABLE IF NOT EXISTS answered (uid TEXT PRIMARY KEY, answer TEXT NOT NULL, status INTEGER NOT NULL, "
    "answered_at REAL NOT NULL)",
)


@dataclass(frozen=True)
class Waiting:
    """A write waiting for the server: `op` remember | update | forget | upload; `uid` the id this device
    gave the write (a memory's id for a remember); `target` the memory or document an edit or forget is
    about; `payload` its fields; `data` a file's bytes; `door` the program that made it (the app, the command
    line…), which the server's log names when the write arrives, however late and by whichever program."""

    seq: int
    op: str
    uid: str
    target: str | None
    payload: dict[str, Any]
    data: bytes | None
    made_at: float
    attempts: int
    refused: str | None
    door: str | None = None


def _waiting(row: tuple) -> Waiting:
    return Waiting(seq=row[0], op=row[1], uid=row[2], target=row[3], payload=json.loads(row[4]), data=row[5],
                   made_at=row[6], attempts=row[7], refused=row[8], door=row[9])


_COLS = "seq, op, uid, target, payload, data, made_at, attempts, refused, door"


class OutboxFile:
    """The outbox file of a profile, opened with its key (the `PRAGMA key` statement, never logged)."""

    def __init__(self, path: Path, key_pragma: str):
        self.path = path
        self.con: Connection = connect(path, key_pragma)
        self.con.execute("PRAGMA synchronous = FULL")
        for statement in SCHEMA:
            self.con.execute(statement)
        if "door" not in {r[1] for r in self.con.execute("PRAGMA table_info(waiting)")}:  # an outbox made before
            self.con.execute("ALTER TABLE waiting ADD COLUMN door TEXT")

    def close(self) -> None:
        self.con.close()

    def add(self, op: str, uid: str, target: str | None, payload: dict[str, Any], data: bytes | None = None,
            door: str | None = None) -> int:
        cur = self.con.execute("INSERT INTO waiting(op, uid, target, payload, data, made_at, door) "
                               "VALUES (?,?,?,?,?,?,?)", (op, uid, target, json.dumps(payload), data, time.time(), door))
        return int(cur.lastrowid or 0)

    def waiting(self, *, with_data: bool = True) -> list[Waiting]:
        """Every write not yet answered, the oldest first (refused ones included)."""
        cols = _COLS if with_data else _COLS.replace("data,", "NULL,")
        return [_waiting(r) for r in self.con.execute(f"SELECT {cols} FROM waiting ORDER BY seq")]

    def next(self, after: int) -> Waiting | None:
        """The oldest write after `after` that is not refused."""
        row = self.con.execute(f"SELECT {_COLS} FROM waiting WHERE seq > ? AND refused IS NULL ORDER BY seq LIMIT 1",
                               (after,)).fetchone()
        return None if row is None else _waiting(row)

    def count(self) -> tuple[int, int]:
        """(waiting to send, refused by the server)."""
        row = self.con.execute("SELECT count(*) - count(refused), count(refused) FROM waiting").fetchone()
        return int(row[0]), int(row[1])

    def tried(self, seq: int) -> None:
        self.con.execute("UPDATE waiting SET attempts = attempts + 1 WHERE seq = ?", (seq,))

    def answered(self, item: Waiting, status: int, answer: Any, now_id: str | None = None) -> None:
        """The server answered `item`: it leaves the outbox, its answer is kept for its maker; when the
        server gave the written memory another id (merged into one it had), the writes behind it that name
        the client's id name the server's instead."""
        with self._transaction():
            self.con.execute("DELETE FROM waiting WHERE seq = ?", (item.seq,))
            self.con.execute("INSERT OR REPLACE INTO answered(uid, answer, status, answered_at) VALUES (?,?,?,?)",
                             (item.uid, json.dumps(answer), status, time.time()))
            if now_id is not None and now_id != item.uid:
                self.con.execute("UPDATE waiting SET target = ? WHERE target = ?", (now_id, item.uid))
            self.con.execute("DELETE FROM answered WHERE answered_at < ?", (time.time() - ANSWER_KEPT_SECONDS,))

    def refuse(self, seq: int, reason: str) -> None:
        self.con.execute("UPDATE waiting SET refused = ? WHERE seq = ?", (reason, seq))

    def drop(self, uid: str) -> bool:
        """Take a write out of the outbox unsent (the user's choice); True when it was there."""
        return self.con.execute("DELETE FROM waiting WHERE uid = ?", (uid,)).rowcount > 0

    def answer(self, uid: str) -> tuple[int, Any] | None:
        row = self.con.execute("SELECT status, answer FROM answered WHERE uid = ?", (uid,)).fetchone()
        return None if row is None else (int(row[0]), json.loads(row[1]))

    def _transaction(self) -> Any:
        con = self.con

        class _Tx:
            def __enter__(self) -> None:
                con.execute("BEGIN IMMEDIATE")

            def __exit__(self, exc_type: object, *rest: object) -> None:
                con.execute("COMMIT" if exc_type is None else "ROLLBACK")

        return _Tx()
