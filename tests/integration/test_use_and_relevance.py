"""Recall that holds up in use: searching never makes the next search worse.

What counts as a use (opened, edited, copied, cited, reported by a client) and what does not (a recall, a
source retrieved but not cited); boosts that only reorder hits of comparable relevance; times named in
questions; the app's own "Ingested X" events kept out of content questions; one duplicate rule for
every door. Real encrypted store, real embedding model, real `ollama` client against tests/ollama_server.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from engine import Engine
from engine.config import LLMSettings
from engine.embeddings import NoEmbedder
from tests.backends import rows
from tests.ollama_server import OllamaTestServer


def use_row(eng: Engine, uid: str) -> tuple:
    return rows(eng, "SELECT access_count, last_accessed_at, importance FROM memories WHERE uid = ?", (uid,))[0]


def test_a_memory_used_a_hundred_times_does_not_outrank_the_relevant_one(eng: Engine):
    year_ago = datetime.now() - timedelta(days=365)
    plumber = eng.remember("The plumber we trust is Marco Rossi, phone 0612 448 190.", at=year_ago,
                           importance=0.5, embed="sync").id
    wifi = eng.remember("The guest wifi password at home is tulip-garden-42.", importance=0.5, embed="sync").id
    for _ in range(100):  # searched, shown and used a hundred times
        assert eng.recall("What is the guest wifi password?", k=3, record_access=True)[0].id == wifi
        eng.mark_used([wifi], how="client")
    assert use_row(eng, wifi)[0] == 200 and use_row(eng, wifi)[2] > 0.99
    hits = eng.recall("Which plumber do we call when a pipe leaks?", k=5)
    assert hits and hits[0].id == plumber
    if any(h.id == wifi for h in hits):  # if shown at all, far below
        assert next(h for h in hits if h.id == wifi).score < hits[0].score


def test_recall_is_not_a_use_and_the_next_search_is_the_same(eng: Engine):
    ids = [eng.remember(t, embed="sync").id for t in (
        "Alice's birthday is on 12 March.", "Bob's birthday is on 3 August.", "The car's MOT is due in May.",
        "Alice prefers oat milk in her coffee.")]
    before = {i: use_row(eng, i) for i in ids}
    first = [[h.id for h in eng.recall(q, k=4)] for q in ("When is Alice's birthday?", "Bob birthday", "milk")]
    second = [[h.id for h in eng.recall(q, k=4)] for q in ("When is Alice's birthday?", "Bob birthday", "milk")]
    assert first == second
    assert {i: use_row(eng, i) for i in ids} == before  # no access counted, no importance gained


def test_a_cited_source_is_a_use_and_a_retrieved_one_is_not(eng: Engine):
    alice = eng.remember("My sister Alice lives in Lisbon.", embed="sync").id
    bob = eng.remember("My brother Bob lives in Porto near his sister's old flat.", embed="sync").id
    with OllamaTestServer(models=["llama3.2"]) as server:
        eng.settings.llm = LLMSettings(host=server.url, model="llama3.2")
        eng.reset_llm()

        def cite_lisbon(request: dict) -> str:
            prompt = request["messages"][-1]["content"]
            n = re.search(r"\[(\d+)\] \([^)]*\)\n[^\n]*Lisbon", prompt)
            return f"Your sister lives in Lisbon [{n.group(1)}]." if n else "I don't have that in memory."

        server.reply_fn = cite_lisbon
        r = eng.ask("Where does my sister live?")
        eng.reset_llm()
    assert {s.id for s in r.sources} == {alice, bob}  # both retrieved and given to the model
    assert use_row(eng, alice)[0] == 1 and use_row(eng, alice)[1] is not None
    assert use_row(eng, bob)[0] == 0 and use_row(eng, bob)[1] is None  # retrieved, not cited


def test_without_a_model_nothing_is_cited_so_nothing_is_used(eng: Engine):
    alice = eng.remember("My sister Alice lives in Lisbon.", embed="sync").id
    eng.settings.llm = LLMSettings(provider="none")
    eng.reset_llm()
    r = eng.ask("Where does my sister live?")
    assert not r.llm_available and alice in {s.id for s in r.sources}
    assert use_row(eng, alice)[0] == 0


def test_editing_is_a_use_and_an_importance_set_by_hand_stays(eng: Engine):
    m = eng.remember("The spare key is under the blue flowerpot.", importance=0.4, embed="sync").id
    eng.update(m, text="The spare key is under the red flowerpot.")
    count, at, imp = use_row(eng, m)
    assert count == 1 and at is not None and imp > 0.4
    eng.update(m, text="The spare key is with the neighbour.", importance=0.2)
    assert use_row(eng, m)[2] == 0.2


def test_a_client_says_what_it_used(eng: Engine):
    m = eng.remember("The gym opens at 6 on weekdays.", embed="sync").id
    assert eng.mark_used([m, "mem_doesnotexist", "chk_123"], how="client") == 1
    assert use_row(eng, m)[0] == 1
    with pytest.raises(Exception, match="Unknown kind of use"):
        eng.mark_used([m], how="glanced")


def test_newer_wins_only_among_comparable_relevance(eng: Engine):
    old = datetime.now() - timedelta(days=400)
    before = eng.remember("My dentist is Dr. Moreau on Rue Cler.", at=old, embed="sync").id
    now = eng.remember("My dentist is Dr. Haddad on Baker Street.", embed="sync").id
    hits = eng.recall("Who is my dentist?", k=2)
    assert [h.id for h in hits] == [now, before]  # same relevance: the newer first
    assert abs(hits[0].similarity - hits[1].similarity) <= 0.1 * hits[0].similarity


def test_a_time_in_the_question_prefers_memories_from_then(eng: Engine):
    last_year = datetime.now().year - 1
    ids = {}
    for month in (2, 5, 9):
        ids[month] = eng.remember(f"Hiked up the mountain trail with Sam and camped by the lake (trip {month}).",
                                  kind="episodic", at=datetime(last_year, month, 14, 10), embed="sync").id
    for month, name in ((5, "May"), (9, "September"), (2, "February")):
        hits = eng.recall(f"Where did I go hiking with Sam in {name} {last_year}?", k=3)
        assert hits[0].id == ids[month], name
    hits = eng.recall("Where did I go hiking with Sam?", k=3)
    assert {h.id for h in hits} == set(ids.values())  # no time named: no preference, nothing dropped
    assert eng.recall("Where did I go hiking with Sam most recently?", k=3)[0].id == ids[9]
    assert eng.recall("When did I first go hiking with Sam?", k=3)[0].id == ids[2]


def test_twenty_five_ingested_files_never_answer_a_content_question(eng: Engine, tmp_path: Path):
    folder = tmp_path / "kitchen"
    folder.mkdir()
    for i in range(25):
        (folder / f"kitchen-{i:02d}.md").write_text(
            f"# Kitchen note {i}\n\nShelf {i} holds jars of spice number {i} and the tea tin {i}.\n")
    facts = [eng.remember(t, embed="sync").id for t in (
        "Bob likes jasmine tea with honey.", "My dentist is Dr. Moreau.", "Bob's tea mug is the green one.",
        "The kettle descaler is under the sink.")]
    results = eng.ingest([folder])
    assert sum(r.status == "added" for r in results) == 25

    def events(hits) -> list:
        return [h for h in hits if h.text.startswith(("Ingested ", "Updated "))]

    for q in ("Bob tea", "Who is my dentist?", "kitchen note spice jars", "tea tin"):
        assert not events(eng.recall(q, k=50)), q
    assert eng.recall("Who is my dentist?", k=1)[0].id == facts[1]
    # not in the memory list's default view, not counted as memories
    listed = eng.list_memories(limit=1000)
    assert {m.id for m in listed} == set(facts)
    stats = eng.stats()
    assert stats.memories == 4 and stats.activity == 25 and sum(stats.by_kind.values()) == 4
    assert len(eng.list_memories(activity=True, limit=1000)) == 25
    # Ask's sources, without a model ...
    eng.settings.llm = LLMSettings(provider="none")
    eng.reset_llm()
    for q in ("Who is my dentist?", "What is on shelf 7 in the kitchen?"):
        assert not events(eng.ask(q).sources), q
    # ... and with one
    with OllamaTestServer(models=["llama3.2"]) as server:
        eng.settings.llm = LLMSettings(host=server.url, model="llama3.2")
        eng.reset_llm()
        server.script("Dr. Moreau [1].")
        r = eng.ask("Who is my dentist?")
        assert not events(r.sources) and "Ingested" not in server.chat_requests[-1]["messages"][-1]["content"]
        eng.reset_llm()
    # ... while a question about activity still finds them
    added = eng.recall("What did I add today?", k=50)
    assert len(events(added)) == 25
    assert len(events(eng.recall("Which files did I ingest?", k=50))) == 25


def test_a_capture_stored_before_its_vector_merges_with_a_cli_remember(tmp_path: Path, profile_home: Path, embedder):
    """The desktop's capture path when the model is still loading (no vector yet) and the CLI's remember
    (embedded at once) of near-duplicate text end up as one memory, in either order."""
    eng = Engine.open(profile_home, embedder=NoEmbedder())
    try:
        captured = eng.remember("My passport is in the top drawer of the desk.").id  # the app, model not loaded
    finally:
        eng.close()
    out = subprocess.run([sys.executable, "-m", "engine.cli", "remember", "--json",
                          "My passport is in the top drawer of my desk."],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    with Engine.open(profile_home, embedder=embedder) as eng:
        eng.embed_pending()
        mems = eng.list_memories()
        assert len(mems) == 1 and mems[0].id == captured, [m.text for m in mems]
        # the other order: the CLI's first, then a capture of the same sentence reworded
        first = eng.remember("The boiler service is booked for 3 October.", embed="sync").id
        late = eng.remember("Boiler service is booked for 3 October.", embed="background").id
        assert late != first and len(eng.list_memories()) == 3
        eng.embed_pending()
        assert {m.id for m in eng.list_memories()} == {captured, first}
        assert any(a.action == "merge_duplicate" and a.target == first for a in eng.audit_log())
        # events are never merged by meaning: each is its own memory
        t = time.time()
        a = eng.remember("Went for a run in the park.", kind="episodic", at=t - 86400, embed="background").id
        b = eng.remember("Went for a run in the park!", kind="episodic", at=t, embed="background").id
        eng.embed_pending()
        assert {a, b} <= {m.id for m in eng.list_memories()}
