"""The audit log (the change feed's source), small state and the counts kept by triggers mean on PostgreSQL
what they mean on SQLite: one scenario through the storage interface gives the same answers on both (audit
ids counted from the first row the scenario writes: each backend numbers its own)."""

from __future__ import annotations

from engine import store, users
from engine.store.postgres.database import Database
from tests.postgres.rows import Both


def scenario(con) -> list:
    out: list = []
    base = store.audit.last_id(con)
    for i, (actor, action) in enumerate([("cli", "remember"), ("api", "forget"), ("mcp", "remember")]):
        store.audit.insert(con, 1000.0 + i, actor, action, f"mem_{i}", {"n": i, "kind": "fact"})

    def entry(e) -> tuple:
        return (e.id - base, e.at, e.actor, e.action, e.target, e.detail)

    out.append([entry(e) for e in store.audit.entries(con, 2, 0)])
    out.append([entry(e) for e in store.audit.entries(con, 2, 1)])
    out.append([(t, entry(e)) for t, e in store.audit.newest_first(con)][:3])
    out.append(store.audit.last_id(con) - base)
    out.append([(i - base, *rest) for i, *rest in store.audit.since(con, base + 1, 10)])
    out.append(store.state.get(con, "k"))
    store.state.put(con, "k", "v1")
    store.state.put(con, "k", "v2")
    out.append((store.state.get(con, "k"), store.state.get_or_set(con, "k", lambda: "no"),
                store.state.get_or_set(con, "other", lambda: "made"), store.state.get(con, "other")))
    m = store.memories
    for uid, kind, source, done in [("a", "fact", "user", False), ("b", "episodic", "chat", False),
                                    ("c", "episodic", "activity", True), ("d", "procedural", "user", False)]:
        m.insert(con, uid=uid, kind=kind, text=f"text {uid}", chash=f"h{uid}", importance=0.5, now=1.0,
                 event_at=None, project=None, source=source, meta=None, conversation_id=None, document_id=None,
                 done=done, dedup_pending=False)
    m.mark_embedded(con, "memories", [m.row_of(con, "a")[0], m.row_of(con, "b")[0]])
    m.set_fields(con, m.row_of(con, "b")[0], {"archived": 1, "processed": 1})
    m.delete(con, {m.row_of(con, "d")[0]})
    tallies = store.tallies.read(con)
    out.append((sorted(store.tallies.memory_tallies(con), key=repr), sorted(tallies.memories, key=repr),
                tallies.chunks, {k: v for k, v in tallies.named.items() if k.startswith(("m:", "c:", "d:"))},
                tallies.unembedded(), tallies.waiting(), tallies.pending_extraction(),
                store.tallies.unembedded(con)))
    return out


def test_audit_state_and_tallies_on_both_backends(both: Both):
    def bob(con) -> None:
        store.audit.insert(con, 1.0, "api", "remember", "mem_bob", {})
        store.state.put(con, "k", "bob's")

    def after(con) -> None:
        assert store.audit.last_id(con) == 1 and store.state.get(con, "k") == "bob's"
        assert store.tallies.memory_tallies(con) == []

    on_sqlite = both.run(scenario, bob=bob, after=after)
    assert on_sqlite[0][0][3] == "remember" and on_sqlite[3] == 3 and on_sqlite[6] == ("v2", "v2", "made", "made")


def test_the_change_feed_version_moves_with_another_connections_write(pg_url: str):
    users.add(pg_url, "alice")
    with Database(pg_url, min_size=2) as db:
        (alice,) = [u.id for u in db.users()]
        with db.transaction(alice) as con:
            before = store.audit.data_version(con)
        with db.transaction(alice) as writer:
            store.audit.insert(writer, 1.0, "api", "remember", "mem_1", {})
        with db.transaction(alice) as con:
            assert store.audit.data_version(con) == before + 1
            assert store.audit.since(con, before, 10) == [(before + 1, "api", "remember", "mem_1")]
