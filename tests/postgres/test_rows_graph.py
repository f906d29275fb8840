"""The PostgreSQL backend's knowledge-graph rows (engine/store/postgres/graph.py) mean what the SQLite
backend's mean: one scenario of calls through the storage interface, on an encrypted SQLite store and on a
user of a PostgreSQL database, gives the same answers (row ids read as names: each backend numbers its rows);
another user's graph is out of reach."""

from __future__ import annotations

import psycopg
import pytest

from engine import store
from engine.store.postgres.database import Database
from tests.postgres.rows import Both, two_users


def add_memory(con, uid: str, text: str, **kw) -> int:
    given = dict(kind="fact", importance=0.5, event_at=None, project=None, source="user", meta=None,
                 conversation_id=None, document_id=None, done=False, dedup_pending=False)
    given.update(kw)
    return store.memories.insert(con, uid=uid, text=text, chash=f"h_{uid}", now=1.0, **given)


def add_document(con, uid: str, texts: list[str], *, status: str = "ready", project: str | None = None) -> list[int]:
    doc = store.documents.insert(con, uid=uid, path=None, title=uid, mime="text/plain", chash=f"h_{uid}", size=1,
                                 mtime=None, project=project, status=status, chunks=len(texts), now=1.0, meta="{}")
    return store.documents.insert_chunks(con, doc, [(f"chk_{uid}_{i}", doc, i, t, f"h_{uid}_{i}", "", None, None, 1)
                                                    for i, t in enumerate(texts)])


def scenario(con) -> list:
    g = store.graph
    out: list = []
    alice = add_memory(con, "mem_alice", "Alice lives in Lisbon.", project="family")
    old = add_memory(con, "mem_old", "Alice lived in Porto.")
    add_memory(con, "mem_done", "Ingested notes.md", kind="episodic", source="activity", done=True)
    ready = add_document(con, "doc_ready", ["Lisbon is by the sea.", "Porto has a bridge."], project="travel")
    add_document(con, "doc_pending", ["Not yet."], status="pending")
    store.memories.set_fields(con, old, {"archived": 1})
    out.append(g.pending_extraction(con))  # Alice's memory and the ready document's two chunks
    unread = g.unread(con, None)
    out.append([(chunk, uid, text, h) for chunk, _, uid, text, h in unread])
    out.append([r[2] for r in g.unread(con, 2)])
    ids = {uid: rid for _, rid, uid, _, _ in unread}
    out.append(g.read_state(con, "memories", alice))
    g.mark_read(con, "memories", alice)
    g.mark_read(con, "chunks", ready[0])
    out.append((g.read_state(con, "memories", alice), g.read_state(con, "chunks", ready[0]),
                g.read_state(con, "chunks", 10**9)))
    out.append((g.pending_extraction(con), [r[2] for r in g.unread(con, None)]))

    # nodes, their types and aliases
    n_alice = g.add_node(con, "Alice", "alice", "person", 2.0)
    n_smith = g.add_node(con, "Alice Smith", "alice smith", None, 2.0)
    n_lisbon = g.add_node(con, "Lisbon", "lisbon", "place", 2.0)
    n_porto = g.add_node(con, "Porto", "porto", None, 2.0)
    n_odd = g.add_node(con, "alice_x", "alice_x", None, 2.0)
    name = {n_alice: "alice", n_smith: "alice smith", n_lisbon: "lisbon", n_porto: "porto", n_odd: "alice_x"}
    out.append((g.node_named(con, "lisbon") == (n_lisbon, "place"), g.node_named(con, "madrid")))
    out.append((g.node(con, n_smith) == (n_smith, None), g.node_id(con, "porto") == n_porto, g.node_id(con, "x")))
    g.set_type(con, n_smith, "person")
    g.add_alias(con, n_alice, "Ally")
    g.add_alias(con, n_alice, "Al")
    out.append([(name[rid], a) for rid, a in g.aliases(con)])
    out.append(sorted((name[rid], norm, kind) for rid, norm, kind in g.first_word_matches(con, "alice")))
    out.append(g.first_word_matches(con, "alice_"))  # _ and % are letters here, not patterns
    out.append(sorted((name[rid], n) for rid, n in g.nodes_named_in(con, " alice smith moved to porto ").items()))

    # edges, each with what it came from
    out.append([g.add_edge(con, n_alice, "lives_in", n_lisbon, "memories", alice, 3.0),
                g.add_edge(con, n_alice, "lives_in", n_lisbon, "memories", alice, 3.0),  # already there
                g.add_edge(con, n_alice, "lived_in", n_porto, "memories", old, 3.0),  # an archived memory's
                g.add_edge(con, n_lisbon, "near", n_porto, "chunks", ready[1], 3.0),
                g.add_edge(con, n_smith, "visited", n_porto, "chunks", ready[1], 3.0)])

    def touching(nodes: list[int], project: str | None) -> list:
        return sorted((name[src], rel, name[dst], muid, cuid) for _, src, rel, dst, _, muid, _, cuid
                      in g.edges_touching(con, nodes, project))

    out.append(touching([n_alice], None))  # the archived memory's edge is not shown
    out.append(touching([n_porto, n_lisbon], None))
    out.append(touching([n_porto, n_lisbon], "travel"))
    out.append(touching([n_porto, n_lisbon], "family"))
    out.append(touching([], None))
    out.append(sorted((name[rid], n, t) for rid, n, t in g.names(con, [n_alice, n_porto])))
    out.append(sorted(name[n] for n in g.nodes_of_source(con, "mem_alice")))
    out.append(g.nodes_of_source(con, "mem_nothing"))
    out.append(g.best_connected(con, 3))

    g.count_rejections(con, {"vague": 2, "pronoun": 1})
    g.count_rejections(con, {"vague": 3})
    g.count_rejections(con, {})
    out.append(g.rejections(con))
    out.append(ids == {uid: rid for _, rid, uid, _, _ in unread})
    return out


def test_the_same_calls_give_the_same_answers_on_both_backends(both: Both):
    on_sqlite = both.run(scenario)
    assert on_sqlite[0] == 3 and on_sqlite[5][0] == 1
    assert on_sqlite[-3] == [("Porto", None, 3), ("Alice", "person", 2), ("Lisbon", "place", 2)]


def test_another_users_graph_is_out_of_reach(pg_db: Database):
    alice, bob = two_users(pg_db)
    with pg_db.transaction(alice) as con:
        memory = add_memory(con, "mem_a", "Alice lives in Lisbon.")
        (chunk,) = add_document(con, "doc_a", ["Lisbon is by the sea."])
        a = store.graph.add_node(con, "Alice", "alice", "person", 1.0)
        lisbon = store.graph.add_node(con, "Lisbon", "lisbon", None, 1.0)
        store.graph.add_alias(con, a, "Ally")
        assert store.graph.add_edge(con, a, "lives_in", lisbon, "memories", memory, 1.0)
        assert store.graph.add_edge(con, a, "lives_in", lisbon, "chunks", chunk, 1.0)
        store.graph.count_rejections(con, {"vague": 1})
    g = store.graph
    with pg_db.transaction(bob) as con:
        assert g.pending_extraction(con) == 0 and g.unread(con, None) == []
        assert g.read_state(con, "memories", memory) is None and g.read_state(con, "chunks", chunk) is None
        assert g.node_named(con, "alice") is None and g.node_id(con, "alice") is None
        with pytest.raises(LookupError):
            g.node(con, a)
        assert g.aliases(con) == [] and g.first_word_matches(con, "alice") == []
        assert g.nodes_named_in(con, " alice lives in lisbon ") == {}
        assert g.edges_touching(con, [a, lisbon], None) == [] and g.names(con, [a, lisbon]) == []
        assert g.nodes_of_source(con, "mem_a") == [] and g.best_connected(con, 10) == []
        assert g.rejections(con) == {}
        with pytest.raises(ValueError, match="not a table read for triples"):  # names a table, never SQL
            g.read_state(con, "documents; DROP TABLE nodes", 1)
        # Bob's writes aimed at her rows change nothing of hers
        g.mark_read(con, "memories", memory)
        g.set_type(con, a, "robot")
        g.add_alias(con, a, "Bobby")
        g.count_rejections(con, {"vague": 5})
        b = g.add_node(con, "Alice", "alice", None, 2.0)  # a node of his own, the same name
        assert g.node_named(con, "alice") == (b, None) and g.rejections(con) == {"vague": 5}
    for src, dst, rid in ((a, lisbon, memory), (b, b, memory), (b, b, 10**9)):
        with pg_db.transaction(bob) as con, pytest.raises(psycopg.errors.ForeignKeyViolation):
            g.add_edge(con, src, "knows", dst, "memories", rid, 2.0)
    with pg_db.transaction(alice) as con:
        assert g.pending_extraction(con) == 2 and g.node_named(con, "alice") == (a, "person")
        assert g.aliases(con) == [(a, ["Ally"])] and g.rejections(con) == {"vague": 1}
        assert len(g.edges_touching(con, [a], None)) == 2
        assert g.best_connected(con, 1) == [("Alice", "person", 2)]


def test_the_extraction_queue_reads_only_what_waits(pg_db: Database, pg_url: str):
    alice, bob = two_users(pg_db)
    for user in (alice, bob):  # many rows read already, a few waiting
        with pg_db.transaction(user) as con, con.cursor() as cur:
            cur.executemany(
                "INSERT INTO memories(uid, kind, text, content_hash, importance, created_at, updated_at, extracted) "
                "VALUES (%s, 'fact', 'a note', %s, 0.5, 1, 1, %s)",
                [(f"mem_{user}_{i}", f"h{i}", i % 500 != 0) for i in range(3000)])
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("ANALYZE personal_llm.memories")
    with pg_db.transaction(alice) as con:
        assert [r[2] for r in store.graph.unread(con, 10)] == [f"mem_{alice}_{i}" for i in range(0, 3000, 500)]
        plan = "\n".join(r[0] for r in con.execute(
            "EXPLAIN SELECT id FROM memories WHERE NOT extracted AND NOT archived ORDER BY id LIMIT 10").fetchall())
    assert "memories_unread" in plan, plan
