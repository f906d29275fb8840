"""The PostgreSQL backend's document and chunk rows (engine/store/postgres/documents.py): the SQLite module's
functions with the same meaning, on a real PostgreSQL, each user seeing only their own documents."""

from __future__ import annotations

import json

import numpy as np
import psycopg
import pytest

from engine import store
from engine.store.postgres import documents as rows
from engine.store.postgres.database import Database
from tests.postgres.rows import Both, memory, put_vector, two_users, unit

META = json.dumps({"action": "added", "attempts": 1, "ocr": {"pages": [2]}})


def add_document(con: psycopg.Connection, uid: str, path: str | None, *, texts: list[str], status: str = "pending",
                 chash: str = "dh", project: str | None = None, title: str = "Trip notes", now: float = 10.0,
                 meta: str = META) -> tuple[int, list[int]]:
    doc = rows.insert(con, uid=uid, path=path, title=title, mime="text/markdown", chash=chash, size=120,
                      mtime=5.0, project=project, status=status, chunks=len(texts), now=now, meta=meta)
    chunks = rows.insert_chunks(con, doc, [
        (f"chk_{uid}_{i}", doc, i, text, f"ch_{uid}_{i}", f"p{i}", None, None, len(text.split()))
        for i, text in enumerate(texts)])
    return doc, chunks


def test_a_document_is_written_pending_embedded_and_made_ready(pg_db: Database):
    alice, _ = two_users(pg_db)
    texts = ["The train leaves Lisbon at nine.", "Porto has a blue bridge.", "Dinner at the river."]
    with pg_db.transaction(alice) as con:
        doc, chunks = add_document(con, "doc_trip", "/notes/trip.md", texts=texts)
        assert len(chunks) == 3 and chunks == sorted(chunks)
        # rows in any order: the ids come back in reading order
        other = rows.insert(con, uid="doc_other", path=None, title="Other", mime="text/plain", chash="oh", size=1,
                            mtime=None, project=None, status="ready", chunks=2, now=1.0, meta="{}")
        backwards = rows.insert_chunks(con, other, [("chk_o1", other, 1, "Second", "o1", "", 3, "Intro", 1),
                                                    ("chk_o0", other, 0, "First", "o0", "", 2, "Intro", 1)])
        assert rows.chunk_texts(con, other) == list(zip(backwards, ["First", "Second"], strict=True))
        assert rows.passages(con, "doc_other", 0, 5) == [("chk_o0", 0, "First", "", 2, "Intro"),
                                                         ("chk_o1", 1, "Second", "", 3, "Intro")]
        rows.delete_contents(con, other, keep_document=False)
        assert rows.chunk_texts(con, doc) == list(zip(chunks, texts, strict=True))
        found = rows.by_path(con, "/notes/trip.md")
        assert found is not None and found[:5] == (doc, "doc_trip", "pending", "dh", 3)
        assert json.loads(found[5]) == json.loads(META)  # meta crosses the seam as JSON text
        assert rows.by_path(con, "/notes/other.md") is None
        assert rows.row_id(con, "doc_trip") == doc and rows.row_id(con, "doc_nope") is None
        assert rows.uid_of(con, doc) == "doc_trip" and rows.project_of(con, doc) is None
        (pend,) = rows.pending(con)
        assert pend[:5] == (doc, "doc_trip", "/notes/trip.md", "Trip notes", 120) and pend[6] == 3
        rows.count_attempt(con, doc, 2)
        assert json.loads(rows.pending(con)[0][5]) == {"action": "added", "attempts": 2, "ocr": {"pages": [2]}}
        assert rows.is_pending(con, doc) and rows.is_pending(con, doc, or_failed=True)
        assert rows.progress(con, doc) == (3, 3, "pending")
        # not visible while pending
        assert rows.ready(con) == [] and rows.ready_by_uid(con, "doc_trip") is None
        assert rows.passages(con, "doc_trip", 0, 10) == [] and rows.chunk_by_uid(con, "chk_doc_trip_0") is None

        assert rows.unembedded_chunks(con, [doc], 2) == [(chunks[0], texts[0], "ch_doc_trip_0", doc),
                                                          (chunks[1], texts[1], "ch_doc_trip_1", doc)]
        put_vector(con, chunks[0], unit(1))
        assert rows.progress(con, doc) == (3, 2, "pending")
        assert [r[0] for r in rows.unembedded_chunks(con, [doc, 999999], 10)] == chunks[1:]

        assert sorted(rows.make_ready(con, doc, 20.0) or []) == chunks
        assert rows.make_ready(con, doc, 21.0) is None  # no longer pending
        assert not rows.is_pending(con, doc) and not rows.is_pending(con, doc, or_failed=True)
        assert rows.progress(con, doc) == (3, 2, "ready")
        (listed,) = rows.ready(con)
        assert listed[:9] == ("doc_trip", "/notes/trip.md", "Trip notes", "text/markdown", 3, 120, None, 10.0, 20.0)
        assert json.loads(listed[9]) == {"ocr": {"pages": [2]}}  # action and attempts gone
        assert rows.ready_by_uid(con, "doc_trip") == listed
        assert rows.passages(con, "doc_trip", 1, 1) == [("chk_doc_trip_1", 1, texts[1], "p1", None, None)]
        assert [p[1] for p in rows.passages(con, "doc_trip", 0, 10)] == [0, 1, 2]
        assert rows.chunk_by_uid(con, "chk_doc_trip_2") == (
            "chk_doc_trip_2", texts[2], "p2", None, None, "doc_trip", "Trip notes", "/notes/trip.md")
        assert rows.ready_with_content(con, "dh") == [(doc, "doc_trip", "/notes/trip.md", 3)]
        assert rows.ready_with_content(con, "other") == []

        kept = rows.kept_vectors(con, doc)  # only the chunk whose vector is current
        assert list(kept) == ["ch_doc_trip_0"] and kept["ch_doc_trip_0"].dtype == np.float32
        assert np.allclose(kept["ch_doc_trip_0"], unit(1), atol=1e-6)
        con.execute("UPDATE chunks SET content_hash = 'edited' WHERE id = %s", (chunks[0],))
        assert rows.kept_vectors(con, doc) == {}


def test_documents_by_project_path_content_and_failure(pg_db: Database):
    alice, _ = two_users(pg_db)
    with pg_db.transaction(alice) as con:
        home, _ = add_document(con, "doc_home", "/notes/home.md", texts=["Roof"], status="ready", project="home",
                               now=1.0, meta="{}")
        loose, _ = add_document(con, "doc_loose", "/notes/sub/loose.md", texts=["Loose"], status="ready", now=2.0,
                                meta="{}")
        add_document(con, "doc_near", "/notes2/near.md", texts=["Near"], status="ready", now=3.0, meta="{}")
        pasted, _ = add_document(con, "doc_paste", None, texts=["Pasted"], status="ready", chash="ph",
                                 title="Pasted text", now=4.0, meta="{}")
        add_document(con, "doc_paste2", None, texts=["Again"], status="ready", chash="ph", title="Other", now=5.0,
                     meta="{}")

        assert [r[0] for r in rows.ready(con)] == ["doc_paste2", "doc_paste", "doc_near", "doc_loose", "doc_home"]
        assert [r[0] for r in rows.ready(con, "home", any_project=False)] == ["doc_home"]
        assert [r[0] for r in rows.ready(con, None, any_project=False)] == [
            "doc_paste2", "doc_paste", "doc_near", "doc_loose"]

        # under a folder: the folder's own files and its subfolders', not a sibling sharing its prefix
        assert [(r[0], r[1], r[2]) for r in rows.under(con, "/notes")] == [
            ("/notes/home.md", "doc_home", "ready"), ("/notes/sub/loose.md", "doc_loose", "ready")]
        assert rows.under(con, "/notes")[0][3:6] == ("dh", 120, 5.0)
        assert rows.count_under(con, "/notes") == {"ready": 2} and rows.count_under(con, "/elsewhere") == {}

        # a path-less document by content, the newest, or by content and title
        assert rows.by_content(con, "ph")[:4] == (rows.row_id(con, "doc_paste2"), "doc_paste2", "ready", 1)
        assert rows.by_content(con, "ph", "Pasted text")[:2] == (pasted, "doc_paste")
        assert rows.by_content(con, "dh") is None  # file documents are found by path

        # moved: a title that was the old file name follows it; another title stays
        con.execute("UPDATE documents SET title = 'loose.md' WHERE id = %s", (loose,))
        rows.move(con, loose, "/archive/loose-2024.md", 7.0, 30.0)
        rows.move(con, home, "/archive/home.md", 8.0, 31.0)
        assert rows.by_path(con, "/archive/loose-2024.md")[1] == "doc_loose"
        assert rows.ready_by_uid(con, "doc_loose")[2] == "loose-2024.md"
        assert rows.ready_by_uid(con, "doc_home")[2] == "Trip notes"
        assert con.execute("SELECT mtime, updated_at FROM documents WHERE id = %s", (home,)).fetchone() == (8.0, 31.0)

        # rewritten in place (a changed file): same row, new fields
        rows.rewrite(con, home, title="Home", mime="text/plain", chash="dh2", size=7, mtime=9.0, status="pending",
                     chunks=0, now=40.0, meta=json.dumps({"action": "replaced"}))
        assert rows.by_path(con, "/archive/home.md")[:5] == (home, "doc_home", "pending", "dh2", 0)

        # given up: failed, no chunks, the reason in meta; listed apart, not pending
        rows.mark_given_up(con, home, json.dumps({"failed": "too big"}), 50.0)
        assert rows.count_given_up(con) == 1 and not rows.is_pending(con, home)
        assert rows.is_pending(con, home, or_failed=True)
        (failed,) = rows.given_up(con)
        assert failed[:5] == ("doc_home", "/archive/home.md", "Home", "text/plain", 0)
        assert json.loads(failed[-1]) == {"failed": "too big"} and failed[8] == 50.0
        assert rows.given_up(con, "home", any_project=False) == [failed]
        assert rows.given_up(con, None, any_project=False) == []
        assert rows.ready(con, "home", any_project=False) == []


def test_set_project_moves_the_document_and_its_memories(pg_db: Database):
    alice, _ = two_users(pg_db)
    with pg_db.transaction(alice) as con:
        doc, chunks = add_document(con, "doc_a", "/a.md", texts=["One", "Two"], status="ready")
        event = memory(con, "mem_event", "Ingested a.md", document_id=doc)
        other = memory(con, "mem_other", "Unrelated")
        assert rows.derived_memories(con, doc) == [event]
        moved_chunks, moved_memories = rows.set_project(con, doc, "work")
        assert sorted(moved_chunks) == chunks and moved_memories == [event]
        assert rows.project_of(con, doc) == "work"
        projects = dict(con.execute("SELECT id, project FROM memories").fetchall())
        assert projects == {event: "work", other: None}


def test_forgetting_a_document_takes_its_chunks_vectors_words_and_edges(pg_db: Database):
    alice, _ = two_users(pg_db)
    with pg_db.transaction(alice) as con:
        doc, chunks = add_document(con, "doc_f", "/f.md", texts=["Porto bridge", "Lisbon tram"], status="ready")
        keep, kept_chunks = add_document(con, "doc_keep", "/keep.md", texts=["Porto wine"], status="ready")
        for i, c in enumerate([*chunks, *kept_chunks]):
            put_vector(con, c, unit(i))
        fact = memory(con, "mem_fact", "Porto has a bridge", document_id=doc)
        node = lambda name: con.execute("INSERT INTO nodes(name, norm_name, created_at) VALUES (%s, %s, 1) "  # noqa: E731
                                        "RETURNING id", (name, name.lower())).fetchone()[0]
        porto, bridge, lisbon, wine = node("Porto"), node("Bridge"), node("Lisbon"), node("Wine")
        edge = "INSERT INTO edges(src, rel, dst, chunk_id, memory_id, created_at) VALUES (%s, %s, %s, %s, %s, 1)"
        con.execute(edge, (porto, "has", bridge, chunks[0], None))
        con.execute(edge, (lisbon, "has", porto, chunks[1], None))
        con.execute(edge, (porto, "makes", wine, kept_chunks[0], None))
        con.execute(edge, (porto, "has", bridge, None, fact))
        words = "SELECT count(*) FROM chunks WHERE tsv @@ to_tsquery('english', %s)"
        assert con.execute(words, ("porto",)).fetchone()[0] == 2

        assert rows.derived_memories(con, doc) == [fact]
        # a changed file being replaced: the contents go, the document row stays
        gone, edges, ends = rows.delete_contents(con, doc, keep_document=True)
        assert gone == [(chunks[0], "chk_doc_f_0"), (chunks[1], "chk_doc_f_1")]
        assert edges == 2 and ends == {porto, bridge, lisbon}
        assert rows.row_id(con, "doc_f") == doc and rows.chunk_texts(con, doc) == []
        assert con.execute("SELECT count(*) FROM chunk_vectors WHERE chunk_id = ANY(%s)", (chunks,)).fetchone()[0] == 0
        assert con.execute(words, ("porto",)).fetchone()[0] == 1  # the kept document's
        assert con.execute(words, ("tram",)).fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM edges WHERE chunk_id IS NOT NULL").fetchone()[0] == 1
        # edges from the memory made from it are the memory's to take (memories.delete), not the chunks'
        assert con.execute("SELECT count(*) FROM edges WHERE memory_id = %s", (fact,)).fetchone()[0] == 1

        assert rows.delete_contents(con, doc, keep_document=False) == ([], 0, set())
        assert rows.row_id(con, "doc_f") is None
        # the document's memories go with it (the key cascades), the other document is whole
        assert con.execute("SELECT count(*) FROM memories").fetchone()[0] == 0
        assert rows.chunk_texts(con, keep) == [(kept_chunks[0], "Porto wine")]
        assert list(rows.kept_vectors(con, keep)) == ["ch_doc_keep_0"]


def test_another_users_documents_are_out_of_reach(pg_db: Database):
    alice, bob = two_users(pg_db)
    with pg_db.transaction(alice) as con:
        doc, chunks = add_document(con, "doc_alice", "/home/alice/diary.md", texts=["Alice's secret"],
                                   status="ready", project="private")
        put_vector(con, chunks[0], unit(7))
        memory(con, "mem_alice", "Ingested diary.md", document_id=doc)
        failed, _ = add_document(con, "doc_alice_paste", None, texts=[], status="pending", chash="ah")
        rows.mark_given_up(con, failed, "{}", 1.0)
    with pg_db.transaction(bob) as con:
        assert rows.by_path(con, "/home/alice/diary.md") is None and rows.by_content(con, "ah") is None
        assert rows.ready(con) == [] and rows.given_up(con) == [] and rows.count_given_up(con) == 0
        assert rows.pending(con) == [] and rows.ready_with_content(con, "dh") == []
        assert rows.ready_by_uid(con, "doc_alice") is None and rows.row_id(con, "doc_alice") is None
        assert rows.passages(con, "doc_alice", 0, 10) == [] and rows.chunk_by_uid(con, "chk_doc_alice_0") is None
        assert rows.under(con, "/home") == [] and rows.count_under(con, "/home") == {}
        assert rows.chunk_texts(con, doc) == [] and rows.kept_vectors(con, doc) == {}
        assert rows.derived_memories(con, doc) == [] and rows.progress(con, doc) == (0, 0, None)
        assert rows.unembedded_chunks(con, [doc], 10) == [] and not rows.is_pending(con, failed, or_failed=True)
        with pytest.raises(LookupError):
            rows.uid_of(con, doc)
        # changes aimed at her rows change nothing
        assert rows.set_project(con, doc, "bob's") == ([], [])
        assert rows.make_ready(con, failed, 2.0) is None
        assert rows.delete_contents(con, doc, keep_document=False) == ([], 0, set())
        rows.count_attempt(con, doc, 9)
        rows.mark_given_up(con, doc, "{}", 3.0)
        rows.rewrite(con, doc, title="x", mime="x", chash="x", size=0, mtime=None, status="ready", chunks=0, now=4.0,
                     meta="{}")
    with pg_db.transaction(bob) as con, pytest.raises(psycopg.errors.ForeignKeyViolation):
        rows.insert_chunks(con, doc, [("chk_bob", doc, 5, "Bob's words in Alice's document", "bh", "", None, None, 6)])
    with pg_db.transaction(alice) as con:
        assert rows.ready_by_uid(con, "doc_alice")[:7] == (
            "doc_alice", "/home/alice/diary.md", "Trip notes", "text/markdown", 1, 120, "private")
        assert rows.chunk_texts(con, doc) == [(chunks[0], "Alice's secret")]
        assert list(rows.kept_vectors(con, doc)) == ["ch_doc_alice_0"]
        assert len(rows.derived_memories(con, doc)) == 1 and rows.count_given_up(con) == 1


def scenario(con) -> list:
    """Document calls through the storage interface, and a document's forget as the documents part runs
    it (engine/ingest.py `delete_document_rows`), with answers to read afterwards; ids read as uids."""
    d, out = store.documents, []

    def plain(row):
        return None if row is None else tuple(json.loads(v) if isinstance(v, str) and v[:1] == "{" else v
                                              for v in row)

    doc = d.insert(con, uid="doc_trip", path="/notes/Trip.md", title="Trip.md", mime="text/markdown", chash="dh",
                   size=120, mtime=5.0, project=None, status="pending", chunks=3, now=10.0, meta=META)
    chunks = d.insert_chunks(con, doc, [(f"chk_trip_{i}", doc, i, t, f"ch{i}", f"p{i}", i or None, "Day 1", 4)
                                        for i, t in enumerate(["Porto bridge.", "Lisbon tram.", "River dinner."])])
    chunk_uid = dict(zip(chunks, ["chk_trip_0", "chk_trip_1", "chk_trip_2"], strict=True))
    doc_uid = {doc: "doc_trip"}
    out.append(plain(d.by_path(con, "/notes/Trip.md"))[1:])
    out.append([plain(r)[1:] for r in d.pending(con)])
    d.count_attempt(con, doc, 3)
    out.append((plain(d.by_path(con, "/notes/Trip.md"))[5], d.progress(con, doc), d.is_pending(con, doc)))
    out.append([(chunk_uid[i], t, h, doc_uid[p]) for i, t, h, p in d.unembedded_chunks(con, [doc], 2)])
    out.append((len(d.make_ready(con, doc, 20.0) or []), d.make_ready(con, doc, 21.0), d.progress(con, doc)))
    out.append(([plain(r) for r in d.ready(con)], plain(d.ready_by_uid(con, "doc_trip"))))
    out.append((d.passages(con, "doc_trip", 1, 5), d.chunk_by_uid(con, "chk_trip_0"), d.chunk_by_uid(con, "x")))
    out.append([t for _, t in d.chunk_texts(con, doc)])
    out.append([(doc_uid[i], u, p, n) for i, u, p, n in d.ready_with_content(con, "dh")])
    other = d.insert(con, uid="doc_b", path="/notes/B.md", title="B", mime="text/plain", chash="bh", size=1,
                     mtime=1.0, project="work", status="failed", chunks=0, now=30.0, meta='{"failed": "unreadable"}')
    d.insert(con, uid="doc_paste", path=None, title="Pasted", mime="text/plain", chash="ph", size=1, mtime=None,
             project=None, status="ready", chunks=0, now=31.0, meta="{}")
    out.append(([plain(r) for r in d.under(con, "/notes")], d.count_under(con, "/notes"), d.under(con, "/note")))
    out.append((plain(d.by_content(con, "ph"))[1:], plain(d.by_content(con, "ph", "Pasted"))[1:],
                d.by_content(con, "ph", "Other"), d.by_content(con, "dh")))
    out.append(([plain(r) for r in d.given_up(con)], d.given_up(con, "home", any_project=False),
                d.count_given_up(con), d.is_pending(con, other, or_failed=True)))
    d.move(con, doc, "/archive/Trip-2024.md", 7.0, 40.0)
    d.rewrite(con, other, title="B2", mime="text/csv", chash="b2", size=2, mtime=2.0, status="pending", chunks=0,
              now=41.0, meta="{}")
    d.mark_given_up(con, other, '{"failed": "too big"}', 42.0)
    out.append(([plain(r) for r in d.ready(con)], [plain(r) for r in d.given_up(con, "work", any_project=False)]))

    # the forget: a memory made from it, edges from its chunk and from that memory, answers citing both
    event = store.memories.insert(con, uid="mem_event", kind="episodic", text="Ingested Trip.md", chash="eh",
                                  importance=0.3, now=20.0, event_at=None, project=None, source="activity",
                                  meta=None, conversation_id=None, document_id=doc, done=True, dedup_pending=False)
    d.set_project(con, doc, "travel")
    out.append((d.project_of(con, doc), store.memories.by_id(con, event).project, d.uid_of(con, doc)))
    g = store.graph
    porto, bridge, tram = (g.add_node(con, n, n.lower(), None, 1.0) for n in ("Porto", "Bridge", "Tram"))
    g.add_edge(con, porto, "has", bridge, "chunks", chunks[0], 1.0)
    g.add_edge(con, porto, "has", tram, "memories", event, 1.0)
    conv = store.conversations.start(con, "cnv_trip", "Trip", None, 1.0, 1.0)
    store.conversations.add_exchange(con, conv, "Bridge?", 2.0, "Porto's.", 3.0, {"sources": ["chk_trip_0"]})
    store.conversations.add_exchange(con, conv, "When?", 4.0, "In May.", 5.0, {"sources": ["mem_other"]})
    mem_ids = d.derived_memories(con, doc)
    mem_uids, mem_edges = store.memories.delete(con, set(mem_ids))
    gone, edges, ends = d.delete_contents(con, doc, keep_document=False)
    answers = store.memories.scrub_transcripts(con, [u for _, u in gone])
    nodes = store.memories.drop_orphan_nodes(con, ends)
    out.append((mem_uids, mem_edges, [u for _, u in gone], edges, len(ends), answers, nodes))
    out.append((d.row_id(con, "doc_trip"), d.chunk_by_uid(con, "chk_trip_0"), d.chunk_texts(con, doc),
                g.node_id(con, "porto") is not None, g.node_id(con, "bridge"), g.edges_touching(con, [porto], None),
                store.conversations.last_messages(con, conv, 10)))
    return out


def test_the_same_calls_give_the_same_answers_on_both_backends(both: Both):
    on_sqlite = both.run(scenario)
    assert on_sqlite[-2] == (["mem_event"], 1, ["chk_trip_0", "chk_trip_1", "chk_trip_2"], 1, 2, 1, 2)
    assert on_sqlite[-1] == (None, None, [], False, None, [], [("user", "Bridge?"), ("user", "When?"),
                                                             ("assistant", "In May.")])
