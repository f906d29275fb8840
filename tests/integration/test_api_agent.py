"""POST /agent/run over real HTTP (uvicorn on 127.0.0.1): steps streamed as NDJSON, the confirmation
round-trip, Stop; the model is tests/ollama_server.py speaking tool calling to the real `ollama` client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from engine import Engine, NotFound
from engine.config import LLMSettings
from tests.integration.test_api import Live, live  # noqa: F401 - the served API fixture
from tests.ollama_server import OllamaTestServer, Reply


@pytest.fixture
def server() -> Iterator[OllamaTestServer]:
    with OllamaTestServer(models=["llama3.2"]) as s:
        yield s


@pytest.fixture
def llm_live(live: Live, server: OllamaTestServer) -> Live:  # noqa: F811
    live.eng.settings.llm = LLMSettings(host=server.url, model="llama3.2")
    live.eng.reset_llm()
    return live


def call(name: str, **arguments: Any) -> Reply:
    return Reply(tool_calls=[{"name": name, "arguments": arguments}])


def events(api: Live, body: dict[str, Any], on_confirm: Any = None) -> list[dict[str, Any]]:
    """Read the stream to its end; `on_confirm(event)` is called for each confirm event as it arrives."""
    out = []
    with api.client.stream("POST", "/agent/run", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        for raw in r.iter_lines():
            event = json.loads(raw)
            out.append(event)
            if event["event"] == "confirm" and on_confirm is not None:
                on_confirm(event)
    return out


def answer(api: Live, event: dict[str, Any], approve: bool) -> httpx.Response:
    return api.client.post(f"/agent/run/{event['run_id']}/confirm",
                            json={"call_id": event["call_id"], "approve": approve})


def test_steps_stream_and_a_confirmation_round_trip_runs_the_tool(llm_live, server):
    eng: Engine = llm_live.eng
    doomed = eng.remember("An old note", embed="sync").id
    server.script(call("forget_memory", id=doomed), Reply(text="Deleted it."))
    answers: list[httpx.Response] = []
    seen = events(llm_live, {"task": "Delete the old note", "agent": "Organiser"},
                  lambda e: answers.append(answer(llm_live, e, True)))

    kinds = [e["event"] if e["event"] != "step" else e["kind"] for e in seen]
    assert kinds[:5] == ["start", "call", "confirm", "confirm", "observation"]
    assert kinds[-2:] == ["answer", "done"] and set(kinds[5:-2]) == {"text"}
    start, confirm = seen[0], seen[3]
    assert start["agent"] == "Organiser" and start["run_id"].startswith("run_")
    assert (confirm["run_id"], confirm["tool"], confirm["permission"], confirm["arguments"]) == (
        start["run_id"], "forget_memory", "sensitive", {"id": doomed})
    assert answers[0].status_code == 200 and answers[0].json()["approve"] is True
    assert seen[4]["status"] == "ok"
    assert seen[-1]["result"]["answer"] == "Deleted it." and seen[-1]["result"]["run_id"] == start["run_id"]
    with pytest.raises(NotFound):
        eng.get(doomed)
    # the run is over: nothing waits for an answer any more
    assert answer(llm_live, confirm, True).status_code == 404


def test_a_declined_call_does_not_run_and_stop_ends_the_stream(llm_live, server):
    eng: Engine = llm_live.eng
    kept = eng.remember("Keep this note", embed="sync").id
    server.script(call("forget_memory", id=kept), Reply(text="Not deleted."))
    seen = events(llm_live, {"task": "Delete it", "agent": "Organiser"},
                  lambda e: answer(llm_live, e, False).raise_for_status())
    assert [e["status"] for e in seen if e.get("kind") == "observation"] == ["declined"]
    assert seen[-1]["event"] == "done" and eng.get(kept).id == kept

    server.script(call("forget_memory", id=kept), Reply(text="never"))

    def stop(e: dict[str, Any]) -> None:
        assert llm_live.client.post(f"/agent/run/{e['run_id']}/stop").json() == {"run_id": e["run_id"],
                                                                                  "stopping": True}

    seen = events(llm_live, {"task": "Delete it", "agent": "Organiser"}, stop)
    assert seen[-1] == {"event": "stopped", "run_id": seen[0]["run_id"]}
    assert eng.get(kept).id == kept
    assert llm_live.client.post("/agent/run/run_nothing/stop").status_code == 404


def test_errors_before_the_stream_are_plain_http_errors(llm_live, live, server):  # noqa: F811
    r = llm_live.client.post("/agent/run", json={"task": "x", "agent": "Nobody"})
    assert r.status_code == 404 and "no agent called 'Nobody'" in r.json()["detail"]
    assert llm_live.client.post("/agent/run", json={"task": ""}).status_code == 422
    with httpx.Client(base_url=live.url, timeout=30) as anon:
        assert anon.post("/agent/run", json={"task": "x"}).status_code == 401
        assert anon.post("/agent/run/run_x/confirm", json={"call_id": "c", "approve": True}).status_code == 401
    server.set_models([])  # the model is not installed: no run starts
    llm_live.eng.reset_llm()
    r = llm_live.client.post("/agent/run", json={"task": "x"})
    assert r.status_code == 409 and "not installed" in r.json()["detail"]
