"""Every door of `personal-llm serve --database URL` end to end, on a real server process and a real
PostgreSQL: documents by upload (PDF, DOCX, text) found by recall, Ask citing the user's own sources, an
agent's run, the knowledge graph, chat exports by upload. The language model is tests/ollama_server.py; the
embedding model is the real bundled one. Bob never sees anything of Alice's through any of them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.config import LLMSettings, Settings, save_settings
from tests.fixtures_docs import make_docx, make_pdf
from tests.imports_fixtures import write_chatgpt_zip
from tests.ollama_server import OllamaTestServer, Reply
from tests.postgres.serving import Served, serving

NOT_IN_MEMORY = "I don't have that in memory."


def _model(request: dict[str, Any]) -> str | Reply:
    """A model for every caller: Ask (cites the source that holds the tap key or the budget), graph
    extraction (a structured answer: who owns what), an agent (searches memory once, then reports)."""
    messages = request.get("messages") or []
    last = messages[-1].get("content", "") if messages else ""
    if request.get("tools"):  # an agent
        results = [m.get("content", "") for m in messages if m.get("role") == "tool"]
        asked = " ".join(m.get("content", "") for m in messages if m.get("role") == "user")
        if not results and (named := re.search(r"Delete (mem_\w+)", asked)):
            return Reply(tool_calls=[{"name": "forget_memory", "arguments": {"id": named.group(1)}}])
        if not results:
            return Reply(tool_calls=[{"name": "search_memory", "arguments": {"query": "garden budget"}}])
        return "The search found: " + " | ".join(results)[:4000]
    if request.get("format"):  # structured output: the graph's triples
        triples = []
        if "Okonkwo" in last:
            triples.append({"subject": "Adaeze Okonkwo", "relation": "owns", "object": "Greenhouse Nine",
                            "subject_type": "person", "object_type": "thing"})
        return Reply(json={"triples": triples})
    for word in ("paving stone", "4200 euros"):
        n = re.search(r"\[(\d+)\] \([^)]*\)\n[^\n]*" + word, last)
        if n:
            return f"It is in your notes [{n.group(1)}]."
    return NOT_IN_MEMORY


@pytest.fixture
def llm() -> Iterator[OllamaTestServer]:
    with OllamaTestServer(models=["llama3.2"], reply_fn=_model) as s:
        yield s


@pytest.fixture
def doors(pg_url: str, tmp_path: Path, llm: OllamaTestServer) -> Iterator[Served]:
    home = tmp_path / "server-home"
    home.mkdir()
    save_settings(Settings(llm=LLMSettings(host=llm.url, model="llama3.2")), home)
    yield from serving(pg_url, home)


def _upload(client: httpx.Client, path: Path, route: str = "/ingest/upload") -> Any:
    with path.open("rb") as f:
        r = client.post(route, files={"file": (path.name, f)})
    assert r.status_code == 200, r.text
    return r.json()


def test_documents_by_upload_are_recalled_and_asked_only_by_their_user(doors: Served, tmp_path: Path):
    a, b = doors.client(doors.alice), doors.client(doors.bob)
    pdf = make_pdf(tmp_path / "allotment.pdf", ["Allotment rules. The water tap key is kept under the third "
                                                "paving stone by the tool shed, and the gate closes at dusk."])
    docx = make_docx(tmp_path / "plan.docx")
    text = tmp_path / "bob.txt"
    text.write_text("Bob's notes: the bicycle shed code is 1984 and the lamp needs a new battery.")
    got = [_upload(a, pdf)[0], _upload(a, docx)[0], _upload(b, text)[0]]
    assert [g["status"] for g in got] == ["added", "added", "added"], got

    hits = a.get("/memory/recall", params={"q": "where is the water tap key kept", "kind": "chunk"}).json()
    assert hits and "paving stone" in hits[0]["text"]
    hits = a.get("/memory/recall", params={"q": "annual garden budget", "kind": "chunk"}).json()
    assert hits and "4200 euros" in hits[0]["text"]
    assert b.get("/memory/recall", params={"q": "water tap key paving stone"}).json() == []
    assert [d["title"] for d in b.get("/documents").json()] == ["bob.txt"]
    assert len(a.get("/documents").json()) == 2

    r = a.post("/ask", json={"question": "Where is the water tap key?"})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["grounded"] and answer["answer"].startswith("It is in your notes")
    cited = int(re.search(r"\[(\d+)\]", answer["answer"]).group(1))
    source = next(s for s in answer["sources"] if s["n"] == cited)
    assert "paving stone" in source["text"] and source["document_id"] == got[0]["document_id"]

    theirs = {"question": "And the gate?", "conversation_id": answer["conversation_id"]}
    assert b.post("/ask", json=theirs).status_code == 404  # Alice's conversation is not Bob's to continue
    assert b.delete(f"/memory/{answer['conversation_id']}").status_code == 404
    r = b.post("/ask", json={"question": "Where is the water tap key?"})
    assert r.status_code == 200, r.text
    assert not r.json()["grounded"]
    assert all("paving stone" not in s["text"] for s in r.json()["sources"])

    # a document forgotten goes from recall; another user's id is not found
    assert b.delete(f"/memory/{got[0]['document_id']}").status_code == 404
    assert a.delete(f"/memory/{got[0]['document_id']}").status_code == 200
    assert a.get("/memory/recall", params={"q": "water tap key paving stone", "kind": "chunk"}).json() == []


def test_an_agent_searches_only_its_users_memory(doors: Served, tmp_path: Path):
    a, b = doors.client(doors.alice), doors.client(doors.bob)
    _upload(a, make_docx(tmp_path / "plan.docx"))

    def run(client: httpx.Client) -> list[dict[str, Any]]:
        with client.stream("POST", "/agent/run", json={"task": "What is the garden budget?"}) as r:
            assert r.status_code == 200
            return [json.loads(line) for line in r.iter_lines()]

    events = run(a)
    assert events[-1]["event"] == "done", events[-1]
    assert "4200 euros" in events[-1]["result"]["answer"]
    events = run(b)
    assert events[-1]["event"] == "done", events[-1]
    assert "4200" not in json.dumps(events)


def test_only_the_user_who_started_a_run_answers_or_stops_it(doors: Served):
    a, b = doors.client(doors.alice), doors.client(doors.bob)
    kept = a.post("/memory/remember", json={"text": "The old gym membership card is in the drawer."}).json()
    seen: list[dict[str, Any]] = []
    with a.stream("POST", "/agent/run", json={"task": f"Delete {kept['id']}", "agent": "Organiser"}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            event = json.loads(line)
            seen.append(event)
            if event["event"] == "confirm":
                run, call = event["run_id"], event["call_id"]
                assert b.post(f"/agent/run/{run}/confirm", json={"call_id": call, "approve": True}).status_code == 404
                assert b.post(f"/agent/run/{run}/stop").status_code == 404
                assert a.get(f"/memory/{kept['id']}").status_code == 200  # Bob's answer ran nothing
                ok = a.post(f"/agent/run/{run}/confirm", json={"call_id": call, "approve": True})
                assert ok.status_code == 200, ok.text
    assert seen[-1]["event"] == "done", seen[-1]
    assert a.get(f"/memory/{kept['id']}").status_code == 404


def test_the_graph_of_each_user(doors: Served):
    a, b = doors.client(doors.alice), doors.client(doors.bob)
    kept = a.post("/memory/remember", json={"text": "Adaeze Okonkwo owns Greenhouse Nine at the allotment."}).json()
    b.post("/memory/remember", json={"text": "Bob waters the tomatoes on Sundays."})
    r = a.post("/graph/extract")
    assert r.status_code == 200, r.text
    assert r.json()["edges"] == 1
    assert b.post("/graph/extract").json()["edges"] == 0

    entities = {e["name"] for e in a.get("/graph/entities").json()}
    assert {"Adaeze Okonkwo", "Greenhouse Nine"} <= entities
    view = a.get("/graph/neighbours", params={"entity": "Greenhouse Nine"}).json()
    assert [(e["rel"], e["sources"]) for e in view["edges"]] == [("owns", [kept["id"]])]
    assert a.get(f"/memory/{kept['id']}/graph").json()["edges"]
    assert b.get("/graph/entities").json() == []
    assert b.get("/graph/neighbours", params={"entity": "Greenhouse Nine"}).status_code == 404
    assert b.get(f"/memory/{kept['id']}/graph").status_code == 404


def test_chat_exports_by_upload(doors: Served, tmp_path: Path):
    a, b = doors.client(doors.alice), doors.client(doors.bob)
    export = write_chatgpt_zip(tmp_path / "chatgpt-export.zip")
    report = _upload(a, export, "/import/chatgpt/upload")
    assert report["conversations"] == 2 and report["messages"] > 0
    assert _upload(a, export, "/import/chatgpt/upload")["messages"] == 0  # again: nothing new
    hits = a.get("/memory/recall", params={"q": "how often to feed the sourdough starter"}).json()
    assert hits and "sourdough" in hits[0]["text"].lower()
    assert b.get("/memory/recall", params={"q": "sourdough starter"}).json() == []
    # a path on the server's disk is still refused
    r = a.post("/import/chatgpt", json={"path": str(export)})
    assert r.status_code == 403
    bad = tmp_path / "notes.json"
    bad.write_text("{not json")
    with bad.open("rb") as f:
        r = a.post("/import/claude/upload", files={"file": (bad.name, f)})
    assert r.status_code == 400 and "not valid JSON" in r.json()["detail"]
