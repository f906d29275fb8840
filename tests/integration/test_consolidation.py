"""Consolidation on a real encrypted store: decay and archive by elapsed time, contradictions found by a
model and resolved by the user, and the crash-safe episodic roll-up. The model is the real `ollama`
client talking to tests/ollama_server.py, which answers with structured JSON."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine import Engine, UserError
from engine.consolidation import DECAY_PER_30_DAYS
from engine.graph import ExtractedTriple
from tests.backends import execute, one
from tests.ollama_server import OllamaTestServer, Reply

DAY = 86_400.0
TRIPLES = {
    "Alice lives in Lisbon.": ExtractedTriple(subject="Alice", relation="lives in", object="Lisbon"),
    "Alice lives in Porto.": ExtractedTriple(subject="Alice", relation="lives in", object="Porto"),
}
TRIP = [f"Day {i} of planning: we talked about the Japan trip in May." for i in range(1, 10)]
TRIP_FACT = "The user plans a trip to Japan in May."


class Model:
    """The scripted model: answers by the schema it is asked for; `rollup` is the next roll-up answer."""

    def __init__(self) -> None:
        self.rollup: dict[str, Any] = {"facts": [TRIP_FACT]}
        self.asked: list[str] = []
        self.summarised: list[str] = []  # the events of each roll-up prompt

    def __call__(self, request: dict[str, Any]) -> Reply:
        title = request["format"]["title"]
        self.asked.append(title)
        prompt = request["messages"][-1]["content"]
        if title == "RollupFacts":
            self.summarised.append(prompt)
        if title == "TripleExtraction":
            return Reply(json={"triples": [t.model_dump() for text, t in TRIPLES.items() if text in prompt]})
        if title == "ContradictionVerdict":
            return Reply(json={"contradicts": "Lisbon" in prompt and "Porto" in prompt})
        assert title == "RollupFacts"
        return Reply(json=self.rollup)


@pytest.fixture
def model() -> Model:
    return Model()


@pytest.fixture
def server(model: Model) -> Iterator[OllamaTestServer]:
    with OllamaTestServer(models=["llama3.2"], reply_fn=model) as s:
        yield s


@pytest.fixture
def llm_eng(eng: Engine, server: OllamaTestServer) -> Engine:
    eng.settings.llm.provider = "ollama"
    eng.settings.llm.host = server.url
    return eng


def importance(eng: Engine, uid: str) -> float:
    return one(eng, "SELECT importance FROM memories WHERE uid = ?", (uid,))


def actions(eng: Engine) -> list[str]:
    return [e.action for e in eng.audit_log(limit=1000)]


# -- decay and archive ----------------------------------------------------------------------------------


def stored_ago(eng: Engine, uid: str, days: float) -> str:
    """Make a memory as if it had been stored `days` ago (and not used since)."""
    with eng.store.write() as w:
        execute(w, "UPDATE memories SET created_at = created_at - ?, updated_at = updated_at - ? WHERE uid = ?",
                (days * DAY, days * DAY, uid))
    return uid


def test_decay_follows_elapsed_time_not_runs_and_archive_never_deletes(eng: Engine) -> None:
    eng.settings.llm.provider = "none"
    now = time.time()
    old = stored_ago(eng, eng.remember("Had coffee with Bob at the station.", kind="episodic", at=now - 400 * DAY,
                                       importance=0.15).id, 400)
    idle = stored_ago(eng, eng.remember("The spare key is under the blue pot.", importance=0.8).id, 60)
    fresh = eng.remember("The garage code is 4321.", importance=0.8).id
    # stored today about long ago: as fresh as any other (an imported history is not archived on arrival)
    memory = eng.remember("Got my first bicycle.", kind="episodic", at=now - 30 * 365 * DAY, importance=0.15).id

    first = eng.consolidate(now=now)
    assert first.decayed == 2 and first.archived == [old]
    expected = 0.8 * DECAY_PER_30_DAYS ** (30 / 30)  # 60 idle days, decay starts after 30
    assert importance(eng, idle) == pytest.approx(expected)
    assert importance(eng, fresh) == 0.8
    assert importance(eng, memory) == 0.15 and not eng.get(memory).archived

    again = eng.consolidate(now=now)  # the same moment again: nothing more to decay
    assert again.decayed == 0 and again.archived == []
    assert importance(eng, idle) == pytest.approx(expected)
    eng.consolidate(now=now + 10 * DAY)
    eng.consolidate(now=now + 30 * DAY)  # two runs over 30 days = one run at the end
    assert importance(eng, idle) == pytest.approx(0.8 * DECAY_PER_30_DAYS ** 2)

    archived = eng.get(old)  # archived, not deleted
    assert archived.archived
    assert all(h.id != old for h in eng.recall("coffee with Bob at the station"))
    assert old in [h.id for h in eng.recall("coffee with Bob at the station", include_archived=True)]
    assert [m.id for m in eng.list_memories(archived=True)] == [old]
    archive_audit = next(e for e in eng.audit_log() if e.action == "archive")
    assert archive_audit.detail["ids"] == [old] and archive_audit.actor == "consolidation"
    assert "coffee" not in json.dumps([e.detail for e in eng.audit_log()])

    restored = eng.restore(old)
    assert not restored.archived
    assert old in [h.id for h in eng.recall("coffee with Bob at the station")]
    assert eng.consolidate(now=now + 31 * DAY).archived == []  # restoring counts as use
    assert "restore" in actions(eng)
    with pytest.raises(UserError, match="not archived"):
        eng.restore(old)


def test_without_a_language_model_decay_and_archive_run_and_the_rest_waits(eng: Engine) -> None:
    eng.settings.llm.provider = "none"
    now = time.time()
    old = stored_ago(eng, eng.remember("Lunch at the canteen.", kind="episodic", at=now - 400 * DAY,
                                       importance=0.1).id, 400)
    for text in TRIP:
        eng.remember(text, kind="episodic")
    eng.remember("Alice lives in Lisbon.")

    report = eng.consolidate(now=now)

    assert report.archived == [old]
    assert report.waiting == ["roll-up", "graph extraction", "contradiction checks"]
    assert any("wait for a language model" in n for n in report.notes)
    assert report.extraction.waiting and report.extraction.remaining == len(TRIP) + 1
    stats = eng.stats()
    # the archived lunch is not waiting for anything: roll-up and extraction skip archived memories
    assert stats.pending_rollup == len(TRIP) and stats.pending_extraction == len(TRIP) + 1
    assert eng.list_memories(kind="fact")[0].text == "Alice lives in Lisbon."  # no roll-up facts
    assert eng.stats().notes


# -- contradictions -------------------------------------------------------------------------------------


def test_a_contradiction_is_flagged_surfaced_in_recall_and_resolved(llm_eng: Engine, model: Model) -> None:
    said = [datetime.now(UTC) - timedelta(days=days) for days in (20, 5)]
    lisbon = llm_eng.remember("Alice lives in Lisbon.", at=said[0]).id
    porto = llm_eng.remember("Alice lives in Porto.", at=said[1]).id
    llm_eng.remember("The garage code is 4321.")

    report = llm_eng.consolidate()

    assert report.conflicts == [(lisbon, porto)]
    assert llm_eng.get(lisbon).conflict_with == porto and llm_eng.get(porto).conflict_with == lisbon
    hits = {h.id: h for h in llm_eng.recall("Where does Alice live?")}
    assert lisbon in hits and porto in hits  # both kept: recall shows the disagreement, picks neither
    assert all(f"{day:%Y-%m-%d}" in hits[lisbon].conflict for day in said)
    (pair,) = llm_eng.conflicts()
    assert (pair.a.id, pair.b.id) == (lisbon, porto)
    assert llm_eng.stats().conflicts == 1  # one pair, as the Conflicts page and the status bar show it

    asked = model.asked.count("ContradictionVerdict")
    llm_eng.consolidate()
    assert model.asked.count("ContradictionVerdict") == asked  # judged pairs are not asked again

    with pytest.raises(UserError, match="Choose what to keep"):
        llm_eng.resolve(lisbon, "mem_other")
    result = llm_eng.resolve(lisbon, keep=porto)

    assert result.kept == [porto] and result.archived == [lisbon]
    assert llm_eng.conflicts() == []
    assert llm_eng.get(lisbon).archived and llm_eng.get(porto).conflict_with is None  # archived, not deleted
    assert [h.id for h in llm_eng.recall("Where does Alice live?", k=1)] == [porto]
    resolution = next(e for e in llm_eng.audit_log() if e.action == "resolve_conflict")
    assert resolution.target == lisbon and resolution.detail == {"with": porto, "keep": porto, "archived": [lisbon]}
    assert "conflict_flagged" in actions(llm_eng)


def test_keeping_both_clears_the_flags_for_good(llm_eng: Engine, model: Model) -> None:
    lisbon = llm_eng.remember("Alice lives in Lisbon.").id
    porto = llm_eng.remember("Alice lives in Porto.").id
    llm_eng.consolidate()
    assert len(llm_eng.conflicts()) == 1

    result = llm_eng.resolve(porto, keep="both")

    assert sorted(result.kept) == sorted([lisbon, porto]) and result.archived == []
    asked = model.asked.count("ContradictionVerdict")
    assert llm_eng.consolidate().conflicts == []
    assert model.asked.count("ContradictionVerdict") == asked and llm_eng.conflicts() == []
    with pytest.raises(UserError, match="not flagged"):
        llm_eng.resolve(porto, keep="both")


def test_editing_a_flagged_fact_clears_both_flags_and_the_pair_is_judged_again(llm_eng: Engine, model: Model) -> None:
    lisbon = llm_eng.remember("Alice lives in Lisbon.").id
    porto = llm_eng.remember("Alice lives in Porto.").id
    llm_eng.consolidate()
    assert len(llm_eng.conflicts()) == 1

    llm_eng.update(lisbon, text="Alice lived in Lisbon before she moved.")  # still names both cities
    assert llm_eng.conflicts() == [] and llm_eng.get(porto).conflict_with is None  # about the old words
    asked = model.asked.count("ContradictionVerdict")
    assert llm_eng.consolidate().conflicts == [(lisbon, porto)]  # the new words, judged again
    assert model.asked.count("ContradictionVerdict") == asked + 1

    llm_eng.update(lisbon, text="Alice moved to Porto in March.")
    assert llm_eng.consolidate().conflicts == [] and llm_eng.conflicts() == []


# -- episodic roll-up -----------------------------------------------------------------------------------


def test_rollup_is_idempotent_across_a_crash_between_write_and_mark(llm_eng: Engine, model: Model,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    for text in TRIP:
        llm_eng.remember(text, kind="episodic", project="travel")

    def crash(*args: object) -> None:
        raise RuntimeError("power cut")

    monkeypatch.setattr(llm_eng.consolidation, "_mark_rolled_up", crash)
    with pytest.raises(RuntimeError, match="power cut"):
        llm_eng.consolidate()
    facts = llm_eng.list_memories(kind="fact")
    assert [f.text for f in facts] == [TRIP_FACT] and facts[0].source == "rollup" and facts[0].project == "travel"
    assert llm_eng.stats().pending_rollup == len(TRIP)  # sources not marked: the write came first

    monkeypatch.undo()
    report = llm_eng.consolidate()

    assert report.rollup.resumed == 1 and report.rollup.windows == 0 and report.rollup.sources == len(TRIP)
    assert model.asked.count("RollupFacts") == 1  # not summarised twice
    assert [f.text for f in llm_eng.list_memories(kind="fact")] == [TRIP_FACT]  # no duplicate
    assert llm_eng.stats().pending_rollup == 0
    con = llm_eng.con
    last = con.execute("SELECT max(id) FROM memories WHERE kind = 'episodic'").fetchone()[0]
    assert con.execute("SELECT last_id FROM watermarks WHERE scope = 'project:travel'").fetchone()[0] == last
    assert con.execute("SELECT count(*) FROM derivations").fetchone()[0] == len(TRIP)
    assert "rollup" in actions(llm_eng)



def facts_of(eng: Engine) -> list[str]:
    return [f.text for f in eng.list_memories(kind="fact")]


def test_forgetting_an_event_takes_its_summary_along_and_the_rest_is_summarised_again(
        llm_eng: Engine, model: Model) -> None:
    sources = [llm_eng.remember(t, kind="episodic", project="travel").id for t in TRIP]
    llm_eng.consolidate()
    assert facts_of(llm_eng) == [TRIP_FACT]

    # the summary may repeat what is forgotten: it goes in the same transaction
    removed = llm_eng.forget(sources[0]).removed
    assert removed["memories"] == 2 and removed["derived"] == 1
    assert facts_of(llm_eng) == [] and llm_eng.recall("Japan trip May plans", kind="fact") == []
    assert llm_eng.stats().pending_rollup == len(TRIP) - 1  # the other events wait to be summarised again

    model.rollup = {"facts": ["The user is planning a trip to Japan."]}
    report = llm_eng.consolidate()
    assert report.rollup.windows == 1 and facts_of(llm_eng) == ["The user is planning a trip to Japan."]
    assert TRIP[0] not in model.summarised[-1] and TRIP[1] in model.summarised[-1]
    assert one(llm_eng, "SELECT count(*) FROM derivations") == len(TRIP) - 1

    # a summary the user forgets itself stays gone: its events are not summarised again
    llm_eng.forget(llm_eng.list_memories(kind="fact")[0].id)
    assert llm_eng.stats().pending_rollup == 0
    assert llm_eng.consolidate().rollup.windows == 0 and facts_of(llm_eng) == []


def test_editing_an_event_replaces_the_summary_made_from_its_old_words(llm_eng: Engine, model: Model) -> None:
    sources = [llm_eng.remember(t, kind="episodic", project="travel").id for t in TRIP]
    llm_eng.consolidate()
    assert facts_of(llm_eng) == [TRIP_FACT]

    llm_eng.update(sources[4], text="Day 5 of planning: we moved the Japan trip to October.")
    assert facts_of(llm_eng) == []  # stale at once, not after the next roll-up
    edit = next(e for e in llm_eng.audit_log() if e.action == "update")
    assert edit.target == sources[4] and edit.detail["summaries_removed"] == 1
    assert llm_eng.stats().pending_rollup == len(TRIP)

    model.rollup = {"facts": ["The user plans a trip to Japan in October."]}
    report = llm_eng.consolidate()
    assert report.rollup.windows == 1 and "moved the Japan trip to October" in model.summarised[-1]
    assert facts_of(llm_eng) == ["The user plans a trip to Japan in October."]
    assert llm_eng.stats().pending_rollup == 0

    # a summary the user edits is theirs: forgetting an event no longer takes it along
    fact = llm_eng.list_memories(kind="fact")[0]
    llm_eng.update(fact.id, text="We fly to Japan on 3 October.")
    assert llm_eng.get(fact.id).source == "user"
    assert llm_eng.forget(sources[0]).removed["derived"] == 0
    assert facts_of(llm_eng) == ["We fly to Japan on 3 October."]
    assert llm_eng.stats().pending_rollup == 0


def test_a_summary_the_user_states_again_is_theirs(llm_eng: Engine) -> None:
    sources = [llm_eng.remember(t, kind="episodic", project="travel").id for t in TRIP]
    llm_eng.consolidate()
    again = llm_eng.remember(TRIP_FACT, project="travel")  # the user says it too: merged into the summary
    assert again.merged and again.memory.source == "user"
    assert llm_eng.forget(sources[0]).removed["derived"] == 0
    assert facts_of(llm_eng) == [TRIP_FACT]


def test_summary_none_advances_the_watermark_without_facts(llm_eng: Engine, model: Model) -> None:
    now = time.time()
    with llm_eng.store.write() as con:
        conv = execute(con, "INSERT INTO conversations(uid, created_at, updated_at) VALUES ('cnv_1', ?, ?) "
                       "RETURNING id", (now, now)).fetchone()[0]
    greetings = ["Hi!", "Hello again.", "Thanks.", "Bye.", "Good morning.", "Cheers.", "Ok.", "See you."]
    for text in greetings:
        llm_eng.remember(text, kind="episodic", source="chat", conversation_id=conv)
    model.rollup = {"facts": ["SUMMARY: NONE"]}

    report = llm_eng.consolidate()

    assert report.rollup.windows == 1 and report.rollup.empty == 1 and report.rollup.facts == 0
    assert llm_eng.list_memories(kind="fact") == [] and llm_eng.stats().pending_rollup == 0
    con = llm_eng.con
    last = con.execute("SELECT max(id) FROM memories").fetchone()[0]
    assert con.execute("SELECT last_id FROM watermarks WHERE scope = 'conversation:cnv_1'").fetchone()[0] == last
    assert con.execute("SELECT fact_count FROM rollups").fetchone()[0] == 0

    for text in greetings[:7]:  # fewer than a window's worth: nothing is summarised
        llm_eng.remember(f"{text} (later)", kind="episodic", source="chat", conversation_id=conv)
    llm_eng.consolidate()
    assert model.asked.count("RollupFacts") == 1 and llm_eng.stats().pending_rollup == 7


def test_a_check_searches_around_new_and_changed_facts_only(llm_eng: Engine, model: Model) -> None:
    """Each fact's nearest facts are looked for once, and again only when it changes: a check that searched
    around every fact of the store at every run cost a search of the whole store per fact."""
    garage = llm_eng.remember("The garage code is 4321.").id
    llm_eng.remember("The boat is moored at berth 12 in the marina.")
    lisbon = llm_eng.remember("Alice lives in Lisbon.").id
    first = llm_eng.consolidate()
    assert first.facts_searched == 3 and first.conflicts == []
    assert llm_eng.consolidate().facts_searched == 0  # nothing new or changed

    porto = llm_eng.remember("Alice lives in Porto.").id
    third = llm_eng.consolidate()
    assert third.facts_searched == 1 and third.conflicts == [(lisbon, porto)]  # the new one meets the old
    llm_eng.update(garage, text="The garage code is 9876.")
    assert llm_eng.consolidate().facts_searched == 1
    llm_eng.resolve(lisbon, keep="both")  # both are facts to check again
    assert llm_eng.consolidate().facts_searched == 2
    assert llm_eng.consolidate().facts_searched == 0


def test_a_check_cut_short_searches_again_next_time(llm_eng: Engine, model: Model, monkeypatch) -> None:
    from engine import consolidation

    llm_eng.remember("Alice lives in Lisbon.")
    llm_eng.remember("Alice lives in Porto.")
    monkeypatch.setattr(consolidation, "MAX_PAIR_CHECKS", 0)  # the run stops before its first pair
    assert llm_eng.consolidate().facts_searched == 2
    again = llm_eng.consolidate()
    assert again.facts_searched == 2 and again.pairs_checked == 0  # its candidates were not judged: again
    monkeypatch.setattr(consolidation, "MAX_PAIR_CHECKS", 50)
    assert len(llm_eng.consolidate().conflicts) == 1
    assert llm_eng.consolidate().facts_searched == 0
