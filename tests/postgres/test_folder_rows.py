"""Watched folders mean on PostgreSQL what they mean on SQLite: one scenario through the storage interface
gives the same answers on both (row ids aside), and two users may watch the same path."""

from __future__ import annotations

import json

from engine import store
from tests.postgres.rows import Both


def folder(row: tuple | None):
    """A folder's row without its id, its JSON lists read (PostgreSQL writes non-ASCII as it is)."""
    if row is None:
        return None
    return (*row[1:3], json.loads(row[3]), json.loads(row[4]), *row[5:9], json.loads(row[9]), *row[10:])


def scenario(con) -> list:
    w = store.watch
    out: list = []
    w.add(con, "/notes", "work", json.dumps(["*.md"]), "[]", 100.0)
    w.add(con, "/photos/été", None, "[]", json.dumps(["*.tmp"]), 101.0)
    w.add(con, "/notes", "work2", json.dumps(["*.md", "*.txt"]), "[]", 102.0)  # changes the one there
    notes = w.by_path(con, "/notes")
    assert notes is not None
    w.set_available(con, notes[0], False)
    w.set_queued(con, notes[0], 7)
    w.scan_started(con, notes[0], 110.0)
    out.append([folder(r) for r in w.all_folders(con)])
    w.scan_finished(con, notes[0], 120.0, 2, json.dumps([["/notes/big.pdf", "too big"]]))
    w.set_errors(con, notes[0], json.dumps([["/notes/ünï.md", "unreadable"]]))
    out.append((w.set_paused(con, "/photos/été", True), w.set_paused(con, "/nowhere", True), w.config_key(con)))
    out.append((folder(w.by_path(con, "/notes")), w.by_path(con, "/nowhere")))
    out.append((w.remove(con, "/notes"), w.remove(con, "/notes"), [folder(r) for r in w.all_folders(con)]))
    return out


def test_watched_folders_on_both_backends(both: Both):
    def bob(con) -> None:  # the same path as Alice's: each user has their own
        store.watch.add(con, "/notes", None, "[]", "[]", 1.0)

    def after(con) -> None:
        assert [r[1] for r in store.watch.all_folders(con)] == ["/notes"]

    on_sqlite = both.run(scenario, bob=bob, after=after)
    assert on_sqlite[-1][:2] == (True, False) and on_sqlite[1][0] is True
