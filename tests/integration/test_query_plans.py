"""Hot statements use their index whatever the planner knows: no full scan of a table, and no sort of a
whole table, where an index exists (remember, get, update, forget, a page of the list, stats, the audit
log, the change feed, the mirror's catch-up cost the same at any size). Each plan is checked twice: on a store without
planner statistics and after ANALYZE."""

from __future__ import annotations

import re

import pytest

from engine import Engine
from engine.embeddings import NoEmbedder
from engine.space import Touched
from engine.store import seam
from engine.store.sqlite import db, tallies, vectors
from engine.store.sqlite import documents as document_rows
from engine.store.sqlite import graph as graph_rows
from engine.store.sqlite import memories as memory_rows
from engine.store.sqlite import recall as recall_rows
from engine.store.sqlite import space as space_rows
from engine.store.sqlite import stats as stats_rows


class Recording:
    """A connection that remembers the statements run through it (and runs them)."""

    def __init__(self, con):
        self.con, self.statements = con, []

    def execute(self, sql, params=()):
        self.statements.append((sql, params))
        return self.con.execute(sql, params)

    def executemany(self, sql, seq):
        seq = list(seq)
        if seq:
            self.statements.append((sql, seq[0]))
        return self.con.executemany(sql, seq)


seam.register("engine.store.sqlite", Recording)  # the storage interface sends its calls where the connection's go

def plans_of(con, fn, *args) -> list[str]:
    """The query plan of every statement `fn(con, *args)` runs (one line per statement)."""
    rec = Recording(con)
    fn(rec, *args)
    out = []
    for sql, params in rec.statements:
        if sql.lstrip().upper().startswith(("PRAGMA", "BEGIN", "COMMIT")):
            continue
        rows = con.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
        out.append(" | ".join(r[3] for r in rows))
    return out


FULL_SCAN = re.compile(r"\bSCAN (\w+)\b(?! USING)")
# tables whose size does not follow the store's: `tallies` holds a row per count kept (a memory kind and five
# flags, a chunk's two flags, a document status, nodes, edges), a few hundred at most at any size; `j` is the
# list of ids a statement was given to look up (json_each, retrieval.BY_ID)
BOUNDED = ("CONSTANT", "sqlite_master", "tallies", "j")


def assert_indexed(plans: list[str], *, ordered_by: str | None = None) -> None:
    """No statement scans a whole table or sorts one (a walk of `ordered_by`, the index of the order asked
    for, is what a page of a list is)."""
    for plan in plans:
        scans = [t for t in FULL_SCAN.findall(plan) if t not in BOUNDED]
        assert not scans, plan
        assert "TEMP B-TREE" not in plan, plan
        walked = re.findall(r"SCAN (\w+) USING (?:COVERING )?INDEX (\w+)", plan)
        for _, index in walked:
            assert index == ordered_by, plan


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A small store with memories in a big project, a document, a conflict, a cited answer and edges
    (big enough that with statistics a scan is not the cheapest plan)."""
    home = tmp_path_factory.mktemp("plans") / "profile"
    with Engine.open(home, embedder=NoEmbedder()) as eng:
        for i in range(300):
            eng.remember(f"Note {i} about shelf {i * 7} in the garage.", project="house",
                         kind="episodic" if i % 3 else "fact")
        eng.ingest_text("Chapter one. The garden has roses.\n\nChapter two. The roses need water.", "Garden")
        con = eng.con
        a, b = (r[0] for r in con.execute("SELECT uid FROM memories ORDER BY id LIMIT 2").fetchall())
        with eng.store.write() as w:
            w.execute("UPDATE memories SET conflict_with = ? WHERE uid = ?", (b, a))
            w.execute("INSERT INTO conversations(uid, title, created_at, updated_at) VALUES ('cnv_1', 't', 0, 0)")
            w.execute("INSERT INTO messages(conversation_id, role, content, created_at, meta) VALUES "
                      "(1, 'assistant', 'x', 0, ?)", (f'{{"sources": ["{a}"]}}',))
            w.executemany("INSERT INTO nodes(name, norm_name, created_at) VALUES (?, ?, 0)",
                          [(f"thing {i}", f"thing {i}") for i in range(300)])
            doc = document_rows.insert(w, uid="doc_plans", path=None, title="Plans", mime="text/plain", chash="h",
                                       size=0, mtime=None, project=None, status="ready", chunks=300, now=0.0,
                                       meta="{}")
            document_rows.insert_chunks(w, doc, [(f"chk_p{i}", doc, i, f"Part {i} of the plan.", f"h{i}", "", None,
                                                  None, 5) for i in range(300)])
            w.executemany("INSERT INTO edges(src, rel, dst, memory_id, created_at) VALUES (1, 'in', 2, ?, 0)",
                          [(i,) for i in range(1, 301)])
        yield eng, a


@pytest.fixture(params=["no statistics", "analyzed"])
def con(request, store):
    eng, _ = store
    with eng.store.write_lock:  # statistics are made by the writer (Store.optimize), as the engine does
        w = eng.store.writer
        if request.param == "analyzed":
            w.execute(f"PRAGMA analysis_limit = {db.ANALYSIS_LIMIT}")
            w.execute("ANALYZE")
        else:
            w.execute("DROP TABLE IF EXISTS sqlite_stat1")
            w.execute("ANALYZE sqlite_schema")  # reloads the (now absent) statistics
    con = eng.con  # the reader: it loads the writer's statistics with the changed schema
    con.execute("ANALYZE sqlite_schema")
    return con


def test_the_duplicate_lookup_uses_the_hash_index_in_a_big_project(con):
    plans = plans_of(con, memory_rows.same_words, "0" * 64, "fact", "house", None)
    assert "memories_hash" in plans[0] and "memories_project" not in plans[0], plans
    assert_indexed(plans)


def test_an_imported_memory_is_matched_by_the_hash_index(con):
    from engine.records import MemoryRecord
    from engine.store.sqlite.transfer import Merger

    for kind, at in (("fact", None), ("episodic", None), ("episodic", 1.7e9)):
        rec = MemoryRecord(uid="mem_notinthisstore", kind=kind, text="x", importance=0.5,
                           created_at="2026-01-01T00:00:00Z", updated_at="2026-01-01T00:00:00Z")
        plans = plans_of(con, Merger()._existing_memory, rec, "0" * 64, "house", at)
        assert all("memories_project" not in p for p in plans) and "memories_hash" in plans[1], plans
        assert_indexed(plans)


def test_get_update_and_forget_read_by_key(con, store):
    eng, uid = store
    rid = memory_rows.by_uid(con, uid)[0]
    assert_indexed(plans_of(con, memory_rows.by_uid, uid))
    assert_indexed(plans_of(con, memory_rows.by_id, rid))
    assert_indexed(plans_of(con, memory_rows.set_fields, rid, {"importance": 0.5}))
    assert_indexed(plans_of(con, memory_rows.derived_from, [rid]))
    assert_indexed(plans_of(con, memory_rows.edge_nodes, [rid]))
    assert_indexed(plans_of(con, memory_rows.drop_orphan_nodes, {1, 2}))
    assert_indexed(plans_of(con, memory_rows.uids_of, "memories", [rid]))
    assert_indexed(plans_of(con, memory_rows.row_of, uid))
    assert_indexed(plans_of(con, memory_rows.record_use, [uid], 0.0, 0.1))
    assert_indexed(plans_of(con, space_rows.content_hashes, "memories", [rid, rid + 1]))
    assert_indexed(plans_of(con, document_rows.derived_memories, 1))
    con.execute("BEGIN")
    try:  # the statements that change rows, undone afterwards
        assert_indexed(plans_of(con, memory_rows.forget_old_words, rid, uid))
        assert_indexed(plans_of(con, memory_rows.scrub_transcripts, [uid]))
        assert_indexed(plans_of(con, memory_rows.delete, {rid}))
        doc = con.execute("SELECT id FROM documents WHERE uid = 'doc_plans'").fetchone()[0]
        # a document's forget (and a changed file's replacement): its edges' ends by its chunks, and orphan
        # nodes looked for among those alone
        assert_indexed(plans_of(con, lambda c: eng.documents.delete_document_rows(c, doc, Touched(),
                                                                                   keep_document=True)))
    finally:
        con.execute("ROLLBACK")


def test_a_page_of_the_list_walks_the_order_index(con):
    plans = plans_of(con, lambda c: memory_rows.listing(c, kind=None, project=None, archived=False,
                                                       conflicts_only=False, activity=False, limit=50, offset=50))
    assert_indexed(plans, ordered_by="memories_when")
    assert "memories_when" in plans[0], plans


def test_stats_and_waiting_work_are_counted_without_a_scan(con):
    assert_indexed(plans_of(con, tallies.memory_tallies))
    assert_indexed(plans_of(con, tallies.read))
    assert_indexed(plans_of(con, graph_rows.pending_extraction))
    assert_indexed(plans_of(con, space_rows.pending))
    assert_indexed(plans_of(con, recall_rows.anything_unembedded))
    for sql in ("SELECT count(*) FROM memories WHERE conflict_with IS NOT NULL",
                "SELECT count(*) FROM documents WHERE status = 'ready'"):
        assert_indexed([" | ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + sql).fetchall())])
    assert stats_rows  # the module that runs them


def test_the_roll_up_queue_reads_its_own_index(con):
    """Unprocessed events are found through memories_rollup, which holds only them: no walk of a project's
    or the store's memories (a sort of what waits is allowed: the queue, not the store)."""
    from engine.store.sqlite import consolidation as rollup_rows

    plans = [*plans_of(con, rollup_rows.rollup_scopes),
             *plans_of(con, rollup_rows.pending_window, None, "house", 20),
             *plans_of(con, rollup_rows.pending_window, 1, None, 20),
             *plans_of(con, rollup_rows.pending_between, None, "house", 0, 10**9)]
    for plan in plans:
        assert "memories_rollup" in plan and not {"m", "memories"} & set(FULL_SCAN.findall(plan)), plan


def test_a_memory_with_no_document_or_conversation_is_in_neither_index(con):
    for name in ("memories_document", "memories_conversation"):
        sql = con.execute("SELECT sql FROM sqlite_schema WHERE name = ?", (name,)).fetchone()[0]
        assert sql.rstrip().endswith("IS NOT NULL"), sql
    plan = " | ".join(r[3] for r in con.execute(
        "EXPLAIN QUERY PLAN SELECT id FROM memories WHERE document_id = ?", (1,)).fetchall())
    assert "memories_document" in plan, plan


def test_the_audit_log_page_reads_backwards_by_id(con):
    from engine.store.sqlite import audit as audit_rows

    plans = plans_of(con, audit_rows.entries, 50, 0)
    assert all("TEMP B-TREE" not in p for p in plans), plans
    assert all(re.search(r"SCAN audit( USING INTEGER PRIMARY KEY)?", p) for p in plans), plans


def test_the_change_feed_reads_forwards_from_its_token_by_id(con):
    from engine.store.sqlite import audit as audit_rows

    newest = audit_rows.last_id(con)
    assert newest > 300
    assert_indexed(plans_of(con, audit_rows.since, newest - 20, 2000))
    plans = plans_of(con, audit_rows.since, newest - 20, 2000)
    assert all(re.search(r"SEARCH audit USING INTEGER PRIMARY KEY \(rowid>\?\)", p) for p in plans), plans
    assert [r[0] for r in audit_rows.since(con, newest - 3, 2000)] == [newest - 2, newest - 1, newest]
    plans = plans_of(con, audit_rows.last_id)
    assert plans and all("SCAN" not in p for p in plans), plans  # max(id): the key's last entry


def test_recall_rows_and_the_vector_catch_up_read_by_key(con, store):
    eng, uid = store
    rid = memory_rows.by_uid(con, uid)[0]
    assert_indexed(plans_of(con, recall_rows.memory_rows, [rid]))
    assert_indexed(plans_of(con, recall_rows.chunk_rows, [1]))
    assert_indexed(plans_of(con, recall_rows.text_and_time, uid))
    assert_indexed(plans_of(con, vectors.changes_since, "memories", 0, 3))


def test_recalls_lookups_by_id_read_the_rows_asked_for_however_many(con):
    """The candidates that pass the filter, and the turns around them: each row looked up by its id. Given a few
    hundred ids in an IN list, the planner read the whole table instead once the statistics said it held a
    few thousand rows (2-3 ms a recall at 10k memories)."""
    from engine.store import lexical
    from engine.store.sqlite import retrieval
    from engine.store.types import Filter

    ids = [r[0] for r in con.execute("SELECT id FROM memories ORDER BY id")]
    assert len(ids) >= 300
    for f in (Filter(), Filter(projects={"house"}), Filter(projects={None}), Filter(kinds={"episodic"}),
              Filter(include_archived=True, activity=True)):
        where, args = retrieval._filter_sql(f, "m", time_col="coalesce(m.event_at, m.created_at)", kind_col=None,
                                            archived_col="m.archived", source_col="m.source")
        kept = {r[0]: r[1:] for r in con.execute(
            "SELECT m.id, m.project, coalesce(m.event_at, m.created_at), m.conversation_id FROM memories m "
            "WHERE m.kind = 'episodic'" + "".join(" AND " + w for w in where), args)}
        for n in (1, 40, 200, 300):
            asked = ids[:n]
            assert_indexed(plans_of(con, retrieval.neighbours, asked, f))
            assert_indexed(plans_of(con, retrieval.passing, [("m", i) for i in asked], f))
            assert retrieval.neighbours(con, asked, f) == lexical.near_turns(asked, kept, 2)


def test_the_feed_reports_another_programs_writes_on_its_own_small_connection(profile_home, embedder):
    """What the app polls: another engine's writes, not this one's; after a key rotation too."""
    from engine import Engine

    with Engine.open(profile_home, embedder=embedder) as eng:
        token = eng.changes_since().token
        eng.remember("Written by the app itself.")
        mine = eng.changes_since(token)
        assert not mine.any and mine.token > token  # its own writes were announced in-process
        with Engine.open(profile_home, actor="cli", embedder=embedder, interactive=False) as other:
            made = other.remember("Written by the command line.").id
            seen = eng.changes_since(mine.token)
            assert [c.action for c in seen.changes] == ["remember"] and made in seen.changes[0].memories
            assert eng.changes_since(seen.token).changes == []  # nothing new since
        eng.rotate_key()  # the store's connections, the feed's among them, open again under the new key
        with Engine.open(profile_home, actor="cli", embedder=embedder, interactive=False) as other:
            made = other.remember("Written after the rotation by a new program.").id
        after = eng.changes_since(seen.token)
        assert made in {m for c in after.changes for m in c.memories}
        cached = eng.store.con.execute("PRAGMA cache_size").fetchone()[0]
        small = eng.store.small.execute("PRAGMA cache_size").fetchone()[0]
        assert small < 0 and -small <= 1024 < -cached


def test_a_first_search_asks_of_the_stored_mirror_from_its_indexes_alone(con):
    """How many stored blocks, erased ones and rows: answered from the two small indexes, not from each
    block's own row (a page each that is not in the cache before the blocks are read)."""
    for table in ("memories", "chunks"):
        plans = plans_of(con, vectors.stored_counts, table)
        assert len(plans) == 2, plans
        assert_indexed(plans)
        assert "COVERING INDEX vector_mirror_rows" in plans[0], plans
        assert "INDEX vector_mirror_erased" in plans[1], plans


VEC0_FULL_SCAN = re.compile(r"VIRTUAL TABLE INDEX -?\d+:1")  # sqlite-vec's plan string for reading every vector


def test_no_trigger_reads_a_whole_vector_table(profile_home):
    """What a trigger does to a vector table when a row goes (forget, re-embedding) is by rowid: vec0 answers
    `rowid IN (…)` by reading every vector it holds, so a trigger written that way cost each forget a pass
    over all the store's window vectors. Every statement of every trigger is checked; and a store whose
    trigger was the old one gets the new one when its vector tables are opened."""
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        with eng.store.write() as w:
            vectors.create_tables(w, 16)
            w.execute("DROP TRIGGER memories_windows_ad")  # as stores made before had it
            w.execute("CREATE TRIGGER memories_windows_ad AFTER DELETE ON memories BEGIN DELETE FROM "
                      "vec_memory_windows WHERE rowid IN (SELECT id FROM memory_windows WHERE memory_id = old.id); "
                      "DELETE FROM memory_windows WHERE memory_id = old.id; END")
        con = eng.con

        def trigger_plans() -> list[tuple[str, str, str]]:
            out = []
            for name, sql in con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall():
                body = re.search(r"\bBEGIN\b(.*)\bEND\s*;?\s*$", sql, re.S | re.I).group(1)
                for stmt in filter(None, (s.strip() for s in body.split(";"))):
                    stmt = re.sub(r"\b(?:old|new)\.\w+", "?", stmt)
                    rows = con.execute("EXPLAIN QUERY PLAN " + stmt, (1,) * stmt.count("?")).fetchall()
                    out.append((name, stmt, " | ".join(r[3] for r in rows)))
            return out

        before = [p for p in trigger_plans() if VEC0_FULL_SCAN.search(p[2])]
        assert [name for name, _, _ in before] == ["memories_windows_ad"]  # the check sees the old trigger's scan
        with eng.store.write() as w:
            vectors.create_tables(w, 16)  # what opening the vector tables does
        plans = trigger_plans()
        on_vectors = [p for p in plans if "vec_" in p[1]]
        assert len(on_vectors) >= 5, plans  # vec0 and float copies of memories and chunks, and the windows'
        for name, stmt, plan in plans:
            assert not VEC0_FULL_SCAN.search(plan), (name, stmt, plan)
            assert_indexed([" | ".join(part for part in plan.split(" | ") if "VIRTUAL TABLE" not in part)])


def test_the_contradiction_check_pairs_edges_by_subject_and_relation(con):
    """Edges that share subject and relation are found through an index on both: on the subject alone, a
    subject most facts are about (the user) made the pairing quadratic in its edges."""
    from engine.store.sqlite import consolidation as consolidation_rows

    (plan,) = plans_of(con, consolidation_rows.same_subject_and_relation)
    assert "edges_src_rel (src=? AND rel=?)" in plan, plan
