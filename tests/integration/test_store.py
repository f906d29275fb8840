"""The encrypted single-file store: round trips, recall, deletion, isolation, keys, crashes."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import keyring
import numpy as np
import pytest

from engine import Engine, NotFound, UserError
from engine.embeddings import NoEmbedder
from engine.errors import KeyMissing, StoreTooNew, WrongKey
from engine.keys import SERVICE, read_profile
from tests.backends import one, rows, vector_count, word_count

SISTER = "My sister Alice lives in Lisbon and works as an architect."


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_round_trip(eng: Engine):
    r = eng.remember("I take my coffee black, no sugar.", kind="procedural", project="home", at="2024-05-01")
    assert r.id.startswith("mem_") and not r.merged
    m = eng.get(r.id)
    assert (m.text, m.kind, m.project) == ("I take my coffee black, no sugar.", "procedural", "home")
    assert m.at.startswith("2024-05-01") and m.embedded
    assert [x.id for x in eng.list_memories()] == [r.id]
    eng.update(r.id, importance=0.3, kind="fact")
    assert eng.get(r.id).importance == 0.3 and eng.get(r.id).kind == "fact"
    eng.forget(r.id)
    with pytest.raises(NotFound):
        eng.get(r.id)


def test_paraphrase_recall_finds_meaning(eng: Engine):
    target = eng.remember(SISTER).id
    eng.remember("The quarterly report is due on the 15th.")
    eng.remember("I prefer green tea to coffee in the morning.")
    hits = eng.recall("Which city is my sibling based in?", k=3)
    assert hits[0].id == target
    assert "vector" in hits[0].via


def test_importance_heuristic_orders_sources(eng: Engine):
    stated = eng.remember("Stated fact about the garden.").memory.importance
    chat = eng.remember("Incidental chat about the garden.", source="chat").memory.importance
    doc = eng.remember("A line from a document about the garden.", source="document").memory.importance
    assert stated > doc > chat


def test_near_duplicates_merge_but_contradictions_do_not(eng: Engine):
    first = eng.remember(SISTER)
    again = eng.remember("my sister alice lives in lisbon and works as an architect")
    para = eng.remember("My sister Alice lives in Lisbon, working as an architect.")
    other = eng.remember("My sister Alice lives in Porto and works as an architect.")
    assert again.merged and again.id == first.id
    assert para.merged and para.id == first.id
    assert not other.merged
    assert eng.get(first.id).importance > first.memory.importance
    assert eng.stats().memories == 2
    # another project is another memory
    assert not eng.remember(SISTER, project="family").merged


def test_close_texts_that_state_other_facts_are_both_kept(eng: Engine):
    # the model puts each pair above the near-duplicate cosine; merging would drop the newer fact
    pairs = [("Invoice 1001 was paid.", "Invoice 1002 was paid."),
             ("Meeting with Bob on Monday at 10am.", "Meeting with Bob on Tuesday at 10am."),
             ("The wifi password is tulip-42.", "The wifi password is tulip-43.")]
    for a, b in pairs:
        first, second = eng.remember(a, project="pairs"), eng.remember(b, project="pairs")
        assert not second.merged and second.id != first.id, (a, b)
        assert eng.get(second.id).text == b
        assert eng.recall(b, k=1, project="pairs")[0].id == second.id
    # still one memory when only the wording moves
    again = eng.remember("The invoice 1001 was paid.", project="pairs")
    assert again.merged and eng.get(again.id).text == "Invoice 1001 was paid."
    assert eng.stats().memories == 6


def test_an_edit_cannot_make_two_memories_say_the_same(eng: Engine):
    from engine.errors import UserError

    gate = eng.remember("The gate code for the allotment is 4471.").id
    bread = eng.remember("Bread rises better in a warm oven.").id
    with pytest.raises(UserError, match=gate):
        eng.update(bread, text="the gate code for the allotment is 4471")
    assert eng.get(bread).text == "Bread rises better in a warm oven."  # nothing changed
    other = eng.remember("The gate code for the allotment is 4471.", project="garden").id  # another project
    assert other != gate
    with pytest.raises(UserError):
        eng.update(other, project=None)  # moved next to the same words
    eng.update(bread, text="Bread rises best in a warm, damp oven.")  # any other edit is fine
    assert eng.get(bread).text == "Bread rises best in a warm, damp oven."


@pytest.mark.sqlite_only("the SQLite file indexes a prefix of the content hash; PostgreSQL the whole hash")
def test_a_hash_sharing_the_indexed_prefix_is_not_the_same_words(eng: Engine):
    from engine.memory_rules import content_hash
    from engine.store.sqlite import memories as memory_rows

    text = "The boiler was serviced in March."
    h = content_hash(text)
    keyed = memory_rows.HASH_KEY_CHARS
    twin = h[:keyed] + format(int(h[keyed:], 16) ^ 1, f"0{64 - keyed}x")  # same indexed prefix, other hash
    other = eng.remember("The shed roof needs new felt.").id
    eng.con.execute("UPDATE memories SET content_hash = ? WHERE uid = ?", (twin, other))
    stated = eng.remember(text)
    assert not stated.merged and stated.id != other
    assert eng.remember("the boiler was serviced in march").id == stated.id  # the same words still merge
    assert memory_rows.same_words(eng.con, twin, "fact", None)[1] == other


def test_an_older_store_gets_the_short_hash_index_and_still_merges_the_same_words(profile_home: Path):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        first = eng.remember("The spare key is under the blue flowerpot.").id
        # the store as schema version 7 left it: memories_hash on the whole content hash
        eng.con.execute("DROP INDEX memories_hash")
        eng.con.execute("CREATE INDEX memories_hash ON memories(content_hash)")
        eng.con.execute("PRAGMA user_version = 7")
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        sql = eng.con.execute("SELECT sql FROM sqlite_schema WHERE name = 'memories_hash'").fetchone()[0]
        assert "substr(content_hash, 1, 10)" in sql
        again = eng.remember("the spare key is under the blue flowerpot")
        assert again.merged and again.id == first


def test_an_older_store_gets_partial_indexes_and_its_roll_up_queue_still_finds_both_scopes(profile_home: Path):
    from engine.store.sqlite import consolidation as rollup_rows

    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        loose = [eng.remember(f"Event {i}: the heating came on at {i} am.", kind="episodic", project="home").id
                 for i in range(3)]
        eng.remember("The boiler is a Vaillant.", project="home")
        with eng.store.write() as w:  # the store as schema version 10 left it: every memory in both indexes
            w.execute("INSERT INTO conversations(uid, title, created_at, updated_at) VALUES ('cnv_old', 't', 0, 0)")
            conv = w.execute("SELECT id FROM conversations WHERE uid = 'cnv_old'").fetchone()[0]
            w.execute("UPDATE memories SET conversation_id = ? WHERE uid = ?", (conv, loose[2]))
            w.execute("DROP INDEX memories_document")
            w.execute("CREATE INDEX memories_document ON memories(document_id)")
            w.execute("DROP INDEX memories_conversation")
            w.execute("CREATE INDEX memories_conversation ON memories(conversation_id, kind, processed)")
            w.execute("DROP INDEX memories_rollup")
            w.execute("PRAGMA user_version = 10")
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        con = eng.con
        sql = dict(con.execute("SELECT name, sql FROM sqlite_schema WHERE name LIKE 'memories_%' AND type = 'index'"))
        assert "WHERE document_id IS NOT NULL" in sql["memories_document"]
        assert "WHERE conversation_id IS NOT NULL" in sql["memories_conversation"]
        assert "processed = 0" in sql["memories_rollup"]
        ids = dict(con.execute("SELECT uid, id FROM memories").fetchall())
        scopes = {(c, p) for c, _, _, p in rollup_rows.rollup_scopes(con)}
        assert scopes == {(None, "home"), (conv, "home")}
        assert [i for i, _ in rollup_rows.pending_window(con, None, "home", 10)] == [ids[u] for u in loose[:2]]
        assert [i for i, _ in rollup_rows.pending_window(con, conv, None, 10)] == [ids[loose[2]]]
        with eng.store.write() as w:  # a conversation that goes still lets go of its memories (the foreign key)
            w.execute("DELETE FROM conversations WHERE id = ?", (conv,))
        assert eng.get(loose[2]) and rollup_rows.pending_window(eng.con, None, "home", 10)[-1][0] == ids[loose[2]]


def test_a_batch_of_numbered_notes_keeps_every_note(eng: Engine):
    from engine.memories import Remembered

    notes = [Remembered(f"Batch note {i}: the shelf holds box {i}.", project="batch") for i in range(40)]
    out = eng.remember_many(notes)
    assert not any(r.merged for r in out) and len({r.id for r in out}) == 40
    assert {m.text for m in eng.list_memories(project="batch", limit=100)} == {n.text for n in notes}


def test_forgotten_memory_never_returns(eng: Engine):
    gone = eng.remember("The spare key is under the blue flowerpot.").id
    eng.remember("The car is parked on level 3.")
    assert any(h.id == gone for h in eng.recall("spare key flowerpot"))
    eng.forget(gone)
    for q in ("spare key flowerpot", "Where is the key hidden?", "blue"):
        assert all(h.id != gone for h in eng.recall(q, k=50, include_archived=True))
    assert all(m.id != gone for m in eng.list_memories(archived=None))
    assert word_count(eng, "memories", "flowerpot") == 0
    assert vector_count(eng, "memories") == 1
    with pytest.raises(NotFound):
        eng.forget(gone)
    actions = [(a.action, a.target) for a in eng.audit_log()]
    assert ("forget", gone) in actions


def test_another_projects_memory_never_leaks(eng: Engine):
    work = eng.remember("The deploy password rotates every Monday.", project="work").id
    home = eng.remember("The boiler password is written on the manual.", project="home").id
    loose = eng.remember("My password manager is the one on my phone.").id
    hits = eng.recall("password", project="home", k=20)
    assert [h.id for h in hits] == [home]
    hits = eng.recall("password", project="home", k=20, include_unscoped=True)
    assert {h.id for h in hits} == {home, loose}
    assert work not in {h.id for h in eng.recall("When does the deploy password rotate?", project="home", k=20)}
    assert {h.id for h in eng.recall("password", k=20)} == {work, home, loose}


def test_filters_kind_and_time(eng: Engine):
    old = eng.remember("Went hiking in the Alps.", kind="episodic", at="2020-07-01").id
    new = eng.remember("Went hiking in the Dolomites.", kind="episodic", at="2024-07-01").id
    fact = eng.remember("Hiking boots are size 43.").id
    assert {h.id for h in eng.recall("hiking", kind="episodic")} == {old, new}
    assert {h.id for h in eng.recall("hiking", since="2023-01-01")} == {new, fact}
    assert [h.id for h in eng.recall("hiking", kind="episodic", until="2021-01-01")] == [old]


def test_edit_is_found_by_new_words_not_old(eng: Engine):
    mid = eng.remember("The team offsite is in Madrid.").id
    eng.update(mid, text="The team offsite moved to Reykjavik.")
    eng.remember("Lunch with the design team on Thursday.")
    new = [h for h in eng.recall("Reykjavik") if h.id == mid]
    assert new and "fts" in new[0].via
    old = [h for h in eng.recall("Madrid") if h.id == mid]
    assert not old or "fts" not in old[0].via  # the old words are gone from the index
    assert not old or old[0].cosine < new[0].cosine  # and the vector is the new text's
    assert word_count(eng, "memories", "madrid") == 0
    top = eng.recall("offsite in Iceland", k=1)
    assert top and top[0].id == mid
    assert eng.get(mid).embedded


def test_lexical_recall_works_without_the_model(profile_home: Path):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        mid = eng.remember("The plumber's number is 555-0199.").id
        assert eng.get(mid).embedded is False
        hits = eng.recall("plumber number")
        assert [h.id for h in hits] == [mid] and hits[0].via == ["fts"]
        assert eng.stats().pending_embeddings == 1


def test_rows_stored_without_vector_are_backfilled(profile_home: Path, embedder):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        mid = eng.remember(SISTER).id
    with Engine.open(profile_home, embedder=embedder) as eng:
        assert eng.stats().pending_embeddings == 1
        assert eng.embed_pending() == 1
        assert eng.recall("Which city is my sibling based in?", k=1)[0].id == mid


def test_vec0_search_matches_the_mirror(profile_home: Path, embedder):
    from engine.config import Settings

    texts = [f"Note {i}: the {w} is stored in drawer {i % 7}." for i, w in enumerate(
        ["stapler", "passport", "charger", "receipt", "battery", "scissors", "tape", "glue", "map", "torch"] * 3)]
    with Engine.open(profile_home, embedder=embedder) as eng:
        for t in texts:
            eng.remember(t, project="a" if len(t) % 2 else "b")
        q = embedder.encode_one("where is my passport")
        from engine.store.sqlite.vectors import Filter, VectorIndex

        for f in (Filter(), Filter(projects={"a"})):
            mirror = eng.space.index["memories"].search(eng.con, q, 8, f)
            direct = VectorIndex("memories", 384, mirror=False).search(eng.con, q, 8, f)
            assert [i for i, _ in mirror] == [i for i, _ in direct]
            assert np.allclose([s for _, s in mirror], [s for _, s in direct], atol=1e-5)
    with Engine.open(profile_home, embedder=embedder, settings=Settings(vector_cache=False)) as eng:
        assert eng.recall("where is my passport", k=1)[0].text.startswith("Note 1:")


def test_store_file_has_no_plaintext(profile_home: Path, embedder):
    secret = "Zanzibar-unicorn-4471 is my bank PIN hint"
    eng = Engine.open(profile_home, embedder=embedder)
    for i in range(30):
        eng.remember(f"{secret} number {i}", project="vault")
    db = profile_home / "memory.db"
    wal = profile_home / "memory.db-wal"
    assert wal.exists() and wal.stat().st_size > 0  # still open: the WAL holds pages too
    for path in (db, wal):
        data = path.read_bytes()
        assert b"Zanzibar" not in data and b"unicorn" not in data and b"vault" not in data
    assert not db.read_bytes().startswith(b"SQLite format 3")
    eng.close()
    data = db.read_bytes()
    assert b"Zanzibar" not in data and not data.startswith(b"SQLite format 3")
    for extra in profile_home.iterdir():  # nothing else next to it holds the text either
        if extra.is_file():
            assert b"Zanzibar" not in extra.read_bytes()


def test_missing_key_refuses_and_leaves_file_unchanged(profile_home: Path):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        eng.remember("Something worth keeping.")
    db = profile_home / "memory.db"
    before = digest(db)
    profile = read_profile(profile_home)
    keyring.delete_password(SERVICE, profile.key_account)
    with pytest.raises(KeyMissing, match="not in the keychain"):
        Engine.open(profile_home, embedder=NoEmbedder())
    assert digest(db) == before
    assert keyring.get_password(SERVICE, profile.key_account) is None  # no new key was made up


def test_a_key_that_reads_as_missing_for_a_moment_still_opens(profile_home: Path, monkeypatch):
    """A keychain kept in a file is rewritten whole by every write: read while another program writes an
    entry (the app storing its API token as it starts), the key can look missing for a moment. The open
    reads it again for a second before it says the key is missing."""
    from engine import keys

    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        uid = eng.remember("Something worth keeping.").id
    real, reads = keys._keyring_get, []

    def flaky(account: str):
        reads.append(account)
        return None if len(reads) <= 3 else real(account)

    monkeypatch.setattr(keys, "_keyring_get", flaky)
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        assert eng.get(uid).text == "Something worth keeping."
    assert len(reads) >= 4


def test_wrong_key_refuses(profile_home: Path):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        eng.remember("Something worth keeping.")
    db = profile_home / "memory.db"
    before = digest(db)
    profile = read_profile(profile_home)
    keyring.set_password(SERVICE, profile.key_account, "ab" * 32)
    with pytest.raises(WrongKey):
        Engine.open(profile_home, embedder=NoEmbedder())
    assert digest(db) == before


def test_passphrase_when_no_keychain(profile_home: Path, monkeypatch: pytest.MonkeyPatch):
    import keyring.core

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    keyring.core._keyring_backend = None
    monkeypatch.setenv("PERSONAL_LLM_PASSPHRASE", "correct horse battery staple")
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        mid = eng.remember("Passphrase-protected memory.").id
    assert read_profile(profile_home).key_source == "passphrase"
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        assert eng.get(mid).text == "Passphrase-protected memory."
    monkeypatch.setenv("PERSONAL_LLM_PASSPHRASE", "wrong")
    with pytest.raises(WrongKey):
        Engine.open(profile_home, embedder=NoEmbedder())
    monkeypatch.delenv("PERSONAL_LLM_PASSPHRASE")
    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(KeyMissing, match="PERSONAL_LLM_PASSPHRASE"):
        Engine.open(profile_home, embedder=NoEmbedder())


def test_store_from_a_newer_version_is_refused(profile_home: Path):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        eng.con.execute("PRAGMA user_version = 999")
    db = profile_home / "memory.db"
    before = digest(db)
    with pytest.raises(StoreTooNew, match="newer version"):
        Engine.open(profile_home, embedder=NoEmbedder())
    assert digest(db) == before


def test_embedding_space_change_rebuilds_vectors_and_keeps_rows(profile_home: Path, embedder):
    with Engine.open(profile_home, embedder=embedder) as eng:
        mid = eng.remember(SISTER).id
        eng.remember("The quarterly report is due on the 15th.")
        # pretend the store was embedded by another model with another dimension
        with eng.store.write() as con:
            con.execute("DROP TABLE vec_memories")
            con.execute("CREATE VIRTUAL TABLE vec_memories USING vec0(embedding float[8] distance_metric=cosine)")
            con.execute("INSERT INTO vec_memories(rowid, embedding) SELECT id, ? FROM memories",
                        (np.ones(8, dtype=np.float32).tobytes(),))
            con.execute("UPDATE embedding_space SET model = 'old-model', dimension = 8, version = 'old'")
    with Engine.open(profile_home, embedder=embedder) as eng:
        hits = eng.recall("Which city is my sibling based in?", k=1)
        assert hits[0].id == mid
        assert eng.stats().memories == 2 and eng.stats().pending_embeddings == 0
        assert eng.stats().embedding_dimension == 384
        assert ("embedding_space_changed" in [a.action for a in eng.audit_log()])


def test_audit_never_holds_memory_text(eng: Engine):
    mid = eng.remember("Top secret: the launch codes are in the piano.", project="x").id
    eng.update(mid, text="Top secret: the launch codes moved to the attic.")
    eng.recall("launch codes")
    eng.forget(mid)
    dump = json.dumps([a.model_dump() for a in eng.audit_log()])
    assert "launch" not in dump and "piano" not in dump and "attic" not in dump
    assert {"remember", "update", "forget"} <= {a.action for a in eng.audit_log()}


def test_recall_rejects_bad_input(eng: Engine):
    with pytest.raises(UserError):
        eng.recall("   ")
    with pytest.raises(UserError):
        eng.recall("x", k=0)
    with pytest.raises(UserError):
        eng.remember("")
    with pytest.raises(UserError):
        eng.remember("x", kind="dream")
    with pytest.raises(UserError, match="ISO"):
        eng.remember("x", at="last tuesday-ish")


WRITER = r"""
import sys
from engine import Engine
from engine.embeddings import NoEmbedder
eng = Engine.open(embedder=NoEmbedder())
i = 0
while True:
    with eng.store.write() as con:  # a batch of ten in one transaction
        ids = [eng.remember(f"batch memory {i}-{j}").id for j in range(10)]
    print(" ".join(ids), flush=True)
    i += 1
"""


def test_sigkill_mid_batch_keeps_every_committed_memory(profile_home: Path):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        eng.remember("created before the crash")
    proc = subprocess.Popen([sys.executable, "-c", WRITER], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    committed: list[str] = []
    deadline = time.time() + 60
    while len(committed) < 200 and time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed.extend(line.split())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(committed) >= 200, "the writer did not get going"
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        assert eng.con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        stored = {m.id for m in eng.list_memories(limit=100_000)}
        assert set(committed) <= stored
        assert (len(stored) - 1) % 10 == 0  # whole batches only: a half batch was rolled back
        assert eng.recall("crash")[0].text == "created before the crash"


def test_a_recall_opted_in_as_use_counts_and_importance_grows_towards_one(eng: Engine):
    from engine.ranking import boosted_importance

    a = eng.remember("The spare tyre is under the boot floor.", importance=0.4).id
    b = eng.remember("The dog's vet is Dr. Silva on Elm Street.", importance=0.4).id
    assert [h.id for h in eng.recall("spare tyre boot", k=1)] == [a]  # a plain recall is not a use
    assert one(eng, "SELECT access_count FROM memories WHERE uid = ?", (a,)) == 0
    hits = eng.recall("spare tyre boot", k=1, record_access=True)
    assert [h.id for h in hits] == [a]
    row = rows(eng, "SELECT importance, access_count, last_accessed_at FROM memories WHERE uid = ?", (a,))[0]
    assert row[0] == pytest.approx(boosted_importance(0.4)) and row[1] == 1 and row[2] is not None
    untouched = rows(eng, "SELECT importance, access_count FROM memories WHERE uid = ?", (b,))[0]
    assert untouched == (0.4, 0)
    eng.recall("spare tyre boot", k=1)
    assert one(eng, "SELECT access_count FROM memories WHERE uid = ?", (a,)) == 1


def test_a_project_name_is_checked_at_every_door_of_the_engine(eng: Engine, tmp_path: Path):
    long = "p" * 201
    with pytest.raises(UserError, match="at most 200"):
        eng.remember("The fence is green.", project=long)
    with pytest.raises(UserError, match="control characters"):
        eng.remember("The fence is green.", project="home\nwork")
    stored = eng.remember("The fence is green.", project="  garden  ")
    assert stored.memory.project == "garden"
    assert eng.remember("The shed is red.", project="g" * 200).memory.project == "g" * 200  # the limit itself
    with pytest.raises(UserError, match="at most 200"):
        eng.update(stored.id, project=long)
    note = tmp_path / "fence.txt"
    note.write_text("Notes about painting the fence.", encoding="utf-8")
    for call in (lambda: eng.ingest([note], project=long), lambda: eng.ingest_text("Fence notes.", "Fence", project=long),
                 lambda: eng.ingest_upload(b"Fence notes.", "fence.txt", project=long),
                 lambda: eng.watch_add(tmp_path, project=long)):
        with pytest.raises(UserError, match="at most 200"):
            call()
    assert eng.get(stored.id).project == "garden"
    assert eng.stats().memories == 2 and eng.stats().documents == 0 and eng.watch_status().folders == []
