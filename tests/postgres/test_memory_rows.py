"""The PostgreSQL backend's memory rows mean what the SQLite backend's mean: one scenario of calls through
the storage interface (engine/store), run on an encrypted SQLite store and on a user of a PostgreSQL
database, gives the same answers (ids aside: each backend numbers its rows); on PostgreSQL another user's
rows, even one with the same uid, stay as they were."""

from __future__ import annotations

import json

import pytest

from engine import store
from engine.errors import NotFound
from engine.store.types import MemoryRow, to_memory
from tests.postgres.rows import Both


def plain(row: MemoryRow | None):
    """A row without its backend's numbering, meta read (jsonb orders keys its own way)."""
    return None if row is None else row._replace(id=0, meta=json.loads(row.meta or "{}"))


def scenario(con) -> list:
    m = store.memories
    out: list = []

    def add(uid: str, text: str, chash: str, now: float, **kw) -> int:
        given = dict(kind="fact", importance=0.5, event_at=None, project=None, source="user", meta=None,
                     conversation_id=None, document_id=None, done=False, dedup_pending=False)
        given.update(kw)
        return m.insert(con, uid=uid, text=text, chash=chash, now=now, **given)

    a = add("mem_a", "Alice lives in Lisbon.", "h1", 100.0, project="family", meta={"k": 1, "tags": ["x"]},
            dedup_pending=True)
    b = add("mem_b", "Met Bob at the station.", "h2", 200.0, kind="episodic", event_at=150.0, source="chat",
            done=True, importance=0.4)
    c = add("mem_c", "Alice lives in Lisbon.", "h1", 300.0, project="family")
    add("mem_act", "Ingested notes.md (3 chunks)", "h3", 400.0, kind="episodic", source="activity", done=True)
    out.append(plain(m.by_uid(con, "mem_a")))
    out.append(plain(m.same_words(con, "h1", "fact", "family")))
    out.append(plain(m.same_words(con, "h1", "fact", "family", a)))
    out.append(m.same_words(con, "h1", "fact", None))
    out.append(plain(m.take_dedup_pending(con, a)))
    out.append(m.take_dedup_pending(con, a))
    m.mark_embedded(con, "memories", [a, b])
    m.stated_again(con, a, 0.9, 500.0)
    m.set_fields(con, b, {"archived": 1, "archived_at": 600.0, "project": "work", "updated_at": 600.0})
    m.set_fields(con, c, {"conflict_with": "mem_a"})

    def listed(**kw) -> list:
        given = dict(kind=None, project=None, archived=None, conflicts_only=False, activity=None, limit=10, offset=0)
        given.update(kw)
        return [r.uid for r in m.listing(con, **given)]

    out += [listed(), listed(activity=False), listed(activity=True), listed(project="family"), listed(project=""),
            listed(archived=False), listed(archived=True), listed(kind="episodic"), listed(conflicts_only=True),
            listed(limit=1, offset=1)]
    out.append(m.projects(con))
    out.append(m.record_use(con, ["mem_a", "mem_a", "mem_nothing"], 700.0, 0.1))
    out.append(plain(m.by_uid(con, "mem_a")))
    out.append(to_memory(m.by_uid(con, "mem_b")).model_dump())
    out.append(m.uids_of(con, "memories", [c, a]))
    out.append(m.row_of(con, "mem_b")[1])
    out.append((m.derived_from(con, [a]), m.edge_nodes(con, [a, b]), m.drop_orphan_nodes(con, set())))
    m.own_summary(con, c, "user")
    m.forget_old_words(con, c, "mem_c")
    out.append(plain(m.by_uid(con, "mem_c")))
    m.set_fields(con, c, {"conflict_with": "mem_a"})
    uids, edges = m.delete(con, {a})
    out.append((sorted(uids), edges, plain(m.by_uid(con, "mem_c"))))  # the flag pointing at it went too
    out.append(m.scrub_transcripts(con, ["mem_a"]))
    with pytest.raises(NotFound, match="No memory with id mem_a"):
        m.by_uid(con, "mem_a")
    out.append(m.by_id(con, a))
    return out


def test_the_same_calls_give_the_same_answers_on_both_backends(both: Both):
    bobs: dict[str, object] = {}

    def bob(con) -> None:  # Bob has a memory with the same uid and words
        rid = store.memories.insert(
            con, uid="mem_a", kind="fact", text="Alice lives in Lisbon.", chash="h1", importance=0.5, now=1.0,
            event_at=None, project="family", source="user", meta=None, conversation_id=None, document_id=None,
            done=False, dedup_pending=True)
        bobs.update(id=rid, row=store.memories.by_id(con, rid))

    def after(con) -> None:
        assert store.memories.by_id(con, bobs["id"]) == bobs["row"]
        assert [r.uid for r in store.memories.listing(
            con, kind=None, project=None, archived=None, conflicts_only=False, activity=None, limit=10,
            offset=0)] == ["mem_a"]

    on_sqlite = both.run(scenario, bob=bob, after=after)
    assert on_sqlite[0].meta == {"k": 1, "tags": ["x"]} and on_sqlite[6] == ["mem_act", "mem_c", "mem_b", "mem_a"]
