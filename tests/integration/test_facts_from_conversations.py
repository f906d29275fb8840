"""Facts from conversations as they are stored (engine/extraction.py, Consolidation.extract_facts): in the
background, each fact derived from the turns it names, forgotten with them, audited without text, and off
with `facts.enabled`. The language model is the test Ollama server answering the extraction prompt; these
tests check the flow, not the quality of any model's facts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from engine import Engine, Remembered
from engine.config import LLMSettings, Settings
from tests.ollama_server import OllamaTestServer, Reply, echo_reply, turn_facts

TURNS = [
    "Alice: I adopted a cat called Miso last week.",
    "Bob: Nice! How is she settling in?",
    "Alice: Fine. I also started learning the cello in September.",
    "Bob: See you Sunday then.",
]
FACTS = {TURNS[0]: "Alice adopted a cat called Miso.", TURNS[2]: "Alice started learning the cello in September."}


def extraction_reply(request: dict[str, Any]) -> str | Reply:
    system = next((m["content"] for m in request["messages"] if m["role"] == "system"), "")
    if system.startswith("You read the turns of a conversation"):
        return turn_facts(request, FACTS.get)
    return echo_reply(request)


@pytest.fixture
def server():
    with OllamaTestServer(models=["llama3.2"], reply_fn=extraction_reply) as s:
        yield s


def settings_for(server: OllamaTestServer, **facts: Any) -> Settings:
    return Settings(llm=LLMSettings(provider="ollama", host=server.url, model="llama3.2"), facts=facts or {})


def facts_of(eng: Engine) -> dict[str, str]:
    return {m.text: m.id for m in eng.list_memories(kind="fact", limit=1000)}


def wait_for(check, seconds: float = 30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.1)
    raise AssertionError("timed out")


def fact_requests(server: OllamaTestServer) -> list[dict]:
    return [r for r in server.chat_requests
            if r["messages"][0]["content"].startswith("You read the turns of a conversation")]


def test_facts_are_read_from_turns_in_the_background_and_go_with_their_turns(profile_home: Path, embedder,
                                                                              server: OllamaTestServer):
    with Engine.open(profile_home, settings=settings_for(server), embedder=embedder) as eng:
        eng.start_background()
        stored = eng.remember_many([Remembered(t, kind="episodic", project="chat") for t in TURNS])
        assert fact_requests(server) == [] and facts_of(eng) == {}  # storing did not wait for the model
        facts = wait_for(lambda: (f := facts_of(eng)) and len(f) == 2 and f)
        assert set(facts) == set(FACTS.values())
        request = fact_requests(server)[0]
        assert request["format"]["properties"]["facts"]  # asked with the answer's JSON schema
        assert "<untrusted_content>" in request["messages"][1]["content"]
        assert all(TURNS[i] in request["messages"][1]["content"] for i in range(4))
        # audited with ids and counts only
        entry = next(e for e in eng.audit_log() if e.action == "extract_facts")
        assert entry.detail["sources"] == 4 and sorted(entry.detail["facts"]) == sorted(facts.values())
        assert not any(word in str(entry.detail) for word in ("Miso", "cello"))
        # each fact goes with the turn it came from, in the forget's own transaction; the other stays
        cat = facts["Alice adopted a cat called Miso."]
        gone = eng.forget(stored[0].id)
        assert gone.removed["derived"] == 1
        assert set(facts_of(eng)) == {"Alice started learning the cello in September."}
        assert all(h.id != cat for h in eng.recall("Miso the cat"))
        # a turn that named no fact takes none with it
        assert eng.forget(stored[1].id).removed["derived"] == 0
        assert eng.forget(stored[2].id).removed["derived"] == 1 and facts_of(eng) == {}
        asked = len(fact_requests(server))
        time.sleep(3)
        assert len(fact_requests(server)) == asked  # the turns were read once, not again after the forgets
    logs = "".join(p.read_text(encoding="utf-8") for p in (profile_home / "logs").glob("*.log")) \
        if (profile_home / "logs").exists() else ""
    assert "Miso" not in logs and "cello" not in logs


def test_turns_wait_for_a_model_and_the_setting_turns_it_off(profile_home: Path, embedder, server: OllamaTestServer):
    with Engine.open(profile_home, settings=settings_for(server, enabled=False), embedder=embedder) as eng:
        eng.start_background()
        eng.remember_many([Remembered(t, kind="episodic") for t in TURNS])
        time.sleep(4)
        assert fact_requests(server) == [] and facts_of(eng) == {}
    # on again (the default) in a later process: the turns stored meanwhile are read then
    with Engine.open(profile_home, settings=settings_for(server), embedder=embedder) as eng:
        eng.start_background()
        assert set(wait_for(lambda: (f := facts_of(eng)) and len(f) == 2 and f)) == set(FACTS.values())


def test_a_look_asks_the_model_only_when_turns_wait_and_a_silent_model_less_and_less_often(
        profile_home: Path, embedder, monkeypatch: pytest.MonkeyPatch):
    from engine import extraction, llm

    monkeypatch.setattr(extraction, "QUIET_SECONDS", 0.2)
    monkeypatch.setattr(extraction, "IDLE_SECONDS", 0.3)  # a look this often even when nothing is stored
    monkeypatch.setattr(extraction, "RETRY_SECONDS", 1.5)
    monkeypatch.setattr(llm, "HEALTH_FAILED_TTL", 0.0)  # the router's own cache: each check asks the server

    def health_checks() -> int:
        return sum(r.path == "/api/tags" for r in server.requests)

    with OllamaTestServer(models=[], reply_fn=extraction_reply) as server, \
            Engine.open(profile_home, settings=settings_for(server), embedder=embedder) as eng:
        boiler = eng.remember("The boiler was serviced in May.").id  # a fact: nothing for the extraction to read
        eng.start_background()
        time.sleep(1.5)  # several looks
        assert server.requests == [] and eng.extraction.asked == 0  # no turn waits: the model is not asked
        eng.remember_many([Remembered(t, kind="episodic") for t in TURNS])
        wait_for(lambda: health_checks() == 1)  # turns wait: asked once; it has no such model
        time.sleep(1.0)  # looks within the wait that follows
        assert health_checks() == 1 and list(facts_of(eng).values()) == [boiler]
        wait_for(lambda: health_checks() == 2)  # asked again after RETRY_SECONDS
        time.sleep(2.0)
        assert health_checks() == 2  # then after twice as long
        server.set_models(["llama3.2"])  # the model is pulled meanwhile
        read = wait_for(lambda: (f := facts_of(eng)) and len(f) == 3 and f)
        assert set(read) - {"The boiler was serviced in May."} == set(FACTS.values())
        assert health_checks() == 3


def test_a_model_that_fails_loses_no_turn(profile_home: Path, embedder, server: OllamaTestServer):
    server.script(Reply(status=500, times=3))  # every attempt of the first request fails
    with Engine.open(profile_home, settings=settings_for(server), embedder=embedder) as eng:
        eng.remember_many([Remembered(t, kind="episodic") for t in TURNS])
        report = eng.consolidation.extract_facts()
        assert report.note and report.note.startswith("Facts from conversations stopped: Ollama failed to answer")
        assert facts_of(eng) == {}
        report = eng.consolidation.extract_facts()  # the turns waited; now the model answers
        assert report.facts == 2 and report.sources == 4 and set(facts_of(eng)) == set(FACTS.values())


def test_forgetting_a_conversation_forgets_its_turns_and_the_facts_read_from_them(profile_home: Path, embedder,
                                                                                 tmp_path: Path):
    from tests.imports_fixtures import write_chatgpt_zip

    def states(text: str) -> str | None:
        return "A refrigerated sourdough starter needs feeding once a week." if "refrigerated" in text else None

    with OllamaTestServer(models=["llama3.2"], reply_fn=lambda r: turn_facts(r, states)) as server, \
            Engine.open(profile_home, settings=settings_for(server), embedder=embedder) as eng:
        eng.import_chatgpt(write_chatgpt_zip(tmp_path / "export.zip"))
        turns = [m for m in eng.list_memories(kind="episodic", limit=100) if m.meta.get("conversation")]
        sourdough = {m.meta["conversation"] for m in turns if "sourdough" in m.text}.pop()
        report = eng.consolidation.extract_facts()
        assert report.facts == 1
        fact = facts_of(eng)["A refrigerated sourdough starter needs feeding once a week."]
        other = eng.remember("Dentist on Friday.", kind="episodic").id  # not of that conversation
        gone = eng.forget(sourdough)
        of_it = [m for m in turns if m.meta["conversation"] == sourdough]
        # its turns and the fact read from them (a memory of the conversation too), its transcript
        assert gone.type == "conversation" and gone.removed["memories"] == len(of_it) + 1
        assert gone.removed["messages"] == len(of_it)
        assert facts_of(eng) == {}
        left = {m.meta.get("conversation") for m in eng.list_memories(kind="episodic", limit=100)}
        assert sourdough not in left and eng.get(other).text == "Dentist on Friday."
        entry = next(e for e in eng.audit_log() if e.action == "forget_conversation")
        assert entry.target == sourdough and entry.detail["memories"] == len(of_it) + 1
        with pytest.raises(Exception, match="No conversation"):
            eng.forget(sourdough)
        assert all(h.id != fact for h in eng.recall("sourdough starter fridge"))
