"""POST /consolidate over real HTTP (uvicorn on 127.0.0.1), on both backends: tidying up through the API
flags the facts that contradict each other, which GET /conflicts then lists, as a desktop's tidy-up does. A
server profile's "Tidy up now", its app's schedule and `personal-llm consolidate` go through it, so a
contradiction is found on a server as on this computer. One tidy-up of a memory at a time. The model is
tests/ollama_server.py speaking to the real `ollama` client."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from engine.config import LLMSettings
from tests.integration.test_api import Live, live, remember  # noqa: F401 - the served API fixture
from tests.ollama_server import OllamaTestServer, Reply

TRIPLES = {"Alice lives in Lisbon.": ("Alice", "lives in", "Lisbon"),
           "Alice lives in Porto.": ("Alice", "lives in", "Porto")}


class Model:
    """Answers by the schema it is asked for; a contradiction verdict waits for `go` (set unless held)."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.judging = threading.Event()
        self.go = threading.Event()
        self.go.set()

    def __call__(self, request: dict[str, Any]) -> Reply:
        title = request["format"]["title"]
        self.asked.append(title)
        prompt = request["messages"][-1]["content"]
        if title == "TripleExtraction":
            return Reply(json={"triples": [dict(zip(("subject", "relation", "object"), t, strict=True))
                                           for text, t in TRIPLES.items() if text in prompt]})
        if title == "ContradictionVerdict":
            self.judging.set()
            assert self.go.wait(60)
            return Reply(json={"contradicts": "Lisbon" in prompt and "Porto" in prompt})
        return Reply(json={"facts": []})


@pytest.fixture
def model() -> Model:
    return Model()


@pytest.fixture
def llm_live(live: Live, model: Model) -> Iterator[Live]:  # noqa: F811
    with OllamaTestServer(models=["llama3.2"], reply_fn=model) as server:
        live.eng.settings.llm = LLMSettings(host=server.url, model="llama3.2")
        live.eng.reset_llm()
        yield live


def two_cities(api: Live) -> tuple[str, str]:
    said = [(datetime.now(UTC) - timedelta(days=days)).isoformat() for days in (20, 5)]
    return (remember(api, "Alice lives in Lisbon.", at=said[0])["id"],
            remember(api, "Alice lives in Porto.", at=said[1])["id"])


def test_tidying_up_through_the_api_flags_facts_that_contradict_each_other(llm_live: Live, model: Model):
    lisbon, porto = two_cities(llm_live)
    remember(llm_live, "The garage code is 4321.")
    assert llm_live.client.get("/conflicts").json() == []

    r = llm_live.client.post("/consolidate")

    assert r.status_code == 200, r.text
    assert r.json()["conflicts"] == [[lisbon, porto]] and r.json()["pairs_checked"] == 1
    assert [(p["a"]["id"], p["b"]["id"]) for p in llm_live.client.get("/conflicts").json()] == [(lisbon, porto)]
    assert llm_live.client.get(f"/memory/{lisbon}").json()["conflict_with"] == porto
    assert llm_live.client.get("/stats").json()["conflicts"] == 1
    asked = model.asked.count("ContradictionVerdict")
    assert llm_live.client.post("/consolidate").json()["conflicts"] == []  # a judged pair is not asked again
    assert model.asked.count("ContradictionVerdict") == asked
    flagged = [e for e in llm_live.eng.audit_log(limit=100) if e.action == "conflict_flagged"]
    assert [(e.actor, e.target) for e in flagged] == [("consolidation", lisbon)]


def test_one_tidy_up_of_a_memory_at_a_time(llm_live: Live, model: Model):
    lisbon, porto = two_cities(llm_live)
    model.go.clear()
    first: dict[str, Any] = {}
    running = threading.Thread(target=lambda: first.update(answer=llm_live.client.post("/consolidate", timeout=120)))
    running.start()
    try:
        assert model.judging.wait(60)  # the first is judging a pair
        with httpx.Client(base_url=llm_live.url, headers={"Authorization": f"Bearer {llm_live.token}"}) as other:
            second = other.post("/consolidate", timeout=60)
        assert second.status_code == 409 and "being tidied up already" in second.json()["detail"]
    finally:
        model.go.set()
        running.join(120)
    assert first["answer"].status_code == 200 and first["answer"].json()["conflicts"] == [[lisbon, porto]]
    assert llm_live.client.post("/consolidate").status_code == 200  # and again once it has ended
