"""The HTTP API against a running server (uvicorn on 127.0.0.1) over real HTTP, with a real encrypted store."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Engine
from engine.api import bind_socket, create_app, host_is_loopback

CLI = shutil.which("personal-llm", path=str(Path(sys.executable).parent)) or "personal-llm"
ALLOWED_ORIGIN = "http://localhost:5173"
BODY_LIMIT = 64 * 1024


@dataclass
class Live:
    url: str
    token: str
    client: httpx.Client
    eng: Engine
    app: Any = None

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


@pytest.fixture
def live(eng: Engine) -> Iterator[Live]:
    """The API app served by uvicorn in a thread, on a free loopback port; an authorised client."""
    token = eng.api_token()
    app = create_app(eng, token, [ALLOWED_ORIGIN], max_body_bytes=BODY_LIMIT)
    sock = bind_socket(0)
    server = uvicorn.Server(uvicorn.Config(app, access_log=False, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        yield Live(url, token, client, eng, app)
    server.should_exit = True
    thread.join(timeout=20)
    sock.close()


def allow_folders(eng: Engine, *folders: Path) -> None:
    """What `personal-llm folders allow` does: the API may then ingest files under these folders."""
    from engine.config import load_settings, save_settings

    settings = load_settings(eng.home)
    settings.ingest.allowed_folders = [str(f) for f in folders]
    save_settings(settings, eng.home)


def remember(live: Live, text: str, **fields: Any) -> dict:
    r = live.client.post("/memory/remember", json={"text": text, **fields})
    assert r.status_code == 200, r.text
    return r.json()


# ---------------------------------------------------------------------------------------------------
# security
# ---------------------------------------------------------------------------------------------------
def test_every_route_needs_the_token(live: Live):
    routes = [("GET", "/stats"), ("GET", "/memory/recall?q=x"), ("POST", "/memory/remember"), ("POST", "/ask"),
              ("POST", "/ingest"), ("GET", "/memory/mem_x"), ("PATCH", "/memory/mem_x"), ("DELETE", "/memory/mem_x"),
              ("GET", "/nowhere")]
    with httpx.Client(base_url=live.url, timeout=30) as anon:
        for method, path in routes:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {live.token}"},
                            {"Authorization": live.token}):
                r = anon.request(method, path, headers=headers, json={"text": "should not be stored"})
                assert r.status_code == 401, (method, path, headers, r.status_code)
                assert r.headers["www-authenticate"] == "Bearer"
                assert "token" in r.json()["detail"]
        assert live.eng.stats().memories == 0
        # the schema pages hold no user data and are open (the Swagger UI has an Authorize button)
        page = anon.get("/docs")
        assert page.status_code == 200
        # everything the page loads comes from this server: it works offline and tells no CDN it ran
        loads = re.findall(r'(?:src|href)="([^"]+)"', page.text) + re.findall(r"url: '([^']+)'", page.text)
        assert loads and all(u.startswith("/") for u in loads), loads
        for u in loads:
            got = anon.get(u)
            assert got.status_code == 200 and got.content, u
        bundle = anon.get("/docs/assets/swagger-ui-bundle.js").text
        assert "SwaggerUIBundle" in bundle and 'PACKAGE_VERSION:"5.' in bundle  # Swagger UI 5: it reads OpenAPI 3.1
        assert anon.get("/docs/assets/../../stats").status_code in (401, 404)  # no way out of the assets
        spec = anon.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert {"/ingest", "/ask", "/memory/remember", "/memory/recall", "/memory/{id}", "/stats"} <= spec["paths"].keys()


def test_foreign_host_is_refused(live: Live):
    for host in ("evil.example", "evil.example:8765", "127.0.0.1.evil.example", "localhost.evil", "[::2]:80",
                 "localhost:notaport", ""):
        r = live.client.get("/stats", headers={"Host": host})
        assert r.status_code == 403, host
        assert "localhost" in r.json()["detail"]
    for host in ("localhost", f"localhost:{live.port}", f"127.0.0.1:{live.port}", "[::1]", f"[::1]:{live.port}",
                 "LOCALHOST"):
        assert live.client.get("/stats", headers={"Host": host}).status_code == 200, host


def test_mcp_over_http_needs_the_token_and_a_loopback_host(live: Live):
    """The desktop's API serves the MCP tools at /mcp too (the SDK's streamable-HTTP client), under the same
    rules as every route: the bearer token, a loopback Host."""
    import anyio
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> None:
        client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {live.token}"}, timeout=60)
        async with streamable_http_client(f"{live.url}/mcp", http_client=client) as (r, w), \
                ClientSession(r, w) as session:
            await session.initialize()
            assert "recall" in {t.name for t in (await session.list_tools()).tools}
            kept = await session.call_tool("remember", {"text": "The piano tuner comes on the first Monday."})
            assert not kept.is_error and kept.structured_content
            hits = await session.call_tool("recall", {"query": "when does the piano tuner come"})
            assert hits.structured_content and hits.structured_content["hits"][0]["id"] == kept.structured_content["id"]

    anyio.run(main)
    assert live.eng.stats().memories == 1
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    with httpx.Client(base_url=live.url, timeout=30) as anon:
        assert anon.post("/mcp", json=hello, headers=accept).status_code == 401
    assert live.client.post("/mcp", json=hello, headers={**accept, "Host": "evil.example"}).status_code == 403


def test_host_check_unit_cases():
    assert host_is_loopback("localhost:1") and host_is_loopback("[::1]:8765") and host_is_loopback("127.0.0.1")
    assert not host_is_loopback(None) and not host_is_loopback("[::1]x") and not host_is_loopback("10.0.0.1")


def test_cors_only_for_allowed_origins(live: Live):
    pre = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
    ok = live.client.options("/memory/remember", headers={"Origin": ALLOWED_ORIGIN, **pre})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    bad = live.client.options("/memory/remember", headers={"Origin": "https://evil.example", **pre})
    assert "access-control-allow-origin" not in bad.headers
    r = live.client.get("/stats", headers={"Origin": "https://evil.example"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    r = live.client.get("/stats", headers={"Origin": ALLOWED_ORIGIN})
    assert r.headers["access-control-allow-origin"] == ALLOWED_ORIGIN


# ---------------------------------------------------------------------------------------------------
# memory round trips
# ---------------------------------------------------------------------------------------------------
def test_remember_then_recall_with_event_time(live: Live):
    sister = remember(live, "My sister Alice lives in Lisbon.", project="family", importance=0.9)
    assert sister["id"].startswith("mem_") and not sister["merged"]
    assert sister["memory"]["project"] == "family" and sister["memory"]["importance"] == 0.9
    # the same event, years apart: only `at` differs, and recency follows it
    recent_at = (datetime.now(UTC) - timedelta(days=2)).isoformat()
    old = remember(live, "Went hiking on Mount Tamalpais with Sam.", kind="episodic", at="2019-06-01T10:00:00Z")
    new = remember(live, "Went hiking on Mount Tamalpais with Sam.", kind="episodic", at=recent_at)
    assert old["id"] != new["id"] and old["memory"]["at"].startswith("2019-06-01T10:00")

    hits = live.client.get("/memory/recall", params={"q": "hiking on Tamalpais", "k": 5}).json()
    hikes = [h for h in hits if h["kind"] == "episodic"]
    assert [h["id"] for h in hikes] == [new["id"], old["id"]]
    assert hikes[0]["recency"] > 0.9 > 0.01 > hikes[1]["recency"]
    assert hikes[1]["at"].startswith("2019-06-01")

    hits = live.client.get("/memory/recall", params={"q": "Which city is my sibling based in?", "k": 1}).json()
    assert hits[0]["id"] == sister["id"] and {"id", "kind", "text", "score"} <= hits[0].keys()
    scoped = live.client.get("/memory/recall", params={"q": "sister Lisbon", "project": "work"}).json()
    assert scoped == []
    since = [h["id"] for h in live.client.get("/memory/recall", params={"q": "hiking", "since": "2020-01-01"}).json()]
    assert new["id"] in since and old["id"] not in since

    got = live.client.get(f"/memory/{sister['id']}").json()
    assert got["text"] == "My sister Alice lives in Lisbon." and got["kind"] == "fact"
    stats = live.client.get("/stats").json()
    assert stats["memories"] == 3 and stats["by_kind"]["episodic"] == 2


def test_a_conversation_stored_in_one_request_keeps_every_turn_once(live: Live):
    turns = [{"text": f"Turn {i}: we planned the {('garden', 'budget', 'trip')[i % 3]} for week {i}.",
              "kind": "episodic", "project": "talk", "at": f"2024-05-01T10:{i:02d}:00Z"} for i in range(25)]
    turns.append(dict(turns[3]))  # sent twice: still one memory
    r = live.client.post("/memory/batch", json={"items": turns})
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out) == 26 and out[25]["id"] == out[3]["id"] and out[25]["merged"]
    assert len({x["id"] for x in out}) == 25
    hits = live.client.get("/memory/recall", params={"q": "planned the trip for week 5", "k": 3}).json()
    assert hits and hits[0]["id"] == out[5]["id"]
    assert live.client.post("/memory/batch", json={"items": []}).status_code == 422
    assert live.client.post("/memory/batch", json={"items": [{"text": ""}]}).status_code == 422


def test_forget_removes_it_from_recall_and_ask(live: Live):
    keep = remember(live, "The garage door code is 4321.")
    gone = remember(live, "The wifi password at the cabin is bluefinch77.")
    ask = live.client.post("/ask", json={"question": "What is the wifi password at the cabin?"})
    assert ask.status_code == 200, ask.text
    assert gone["id"] in [s["id"] for s in ask.json()["sources"]]

    r = live.client.delete(f"/memory/{gone['id']}")
    assert r.status_code == 200 and r.json() == {"id": gone["id"], "type": "memory", "removed": r.json()["removed"]}
    assert live.client.get(f"/memory/{gone['id']}").status_code == 404
    again = live.client.delete(f"/memory/{gone['id']}")
    assert again.status_code == 404 and gone["id"] in again.json()["detail"]
    hits = live.client.get("/memory/recall", params={"q": "wifi password cabin bluefinch77", "k": 10}).json()
    assert gone["id"] not in [h["id"] for h in hits]
    body = live.client.post("/ask", json={"question": "What is the wifi password at the cabin?"}).json()
    assert gone["id"] not in [s["id"] for s in body["sources"]] and "bluefinch77" not in body["answer"]
    assert live.client.get(f"/memory/{keep['id']}").status_code == 200


def test_patch_edits_a_memory_and_recall_follows_at_once(live: Live):
    mem = remember(live, "The spare key is under the blue flowerpot.", project="home")
    r = live.client.patch(f"/memory/{mem['id']}", json={"text": "The spare key is in the mailbox.", "importance": 0.9})
    assert r.status_code == 200, r.text
    assert r.json()["text"] == "The spare key is in the mailbox." and r.json()["importance"] == 0.9
    assert r.json()["project"] == "home"  # fields not sent stay as they were
    hits = live.client.get("/memory/recall", params={"q": "spare key flowerpot"}).json()
    assert [h["text"] for h in hits if h["id"] == mem["id"]] in ([], ["The spare key is in the mailbox."])
    assert live.client.get("/memory/recall", params={"q": "where is the spare key mailbox"}).json()[0]["id"] == mem["id"]

    r = live.client.patch(f"/memory/{mem['id']}", json={"project": None, "at": "2024-05-01T09:30:00+00:00"})
    assert r.status_code == 200 and r.json()["project"] is None and r.json()["at"].startswith("2024-05-01T09:30")
    r = live.client.patch(f"/memory/{mem['id']}", json={"archived": True})
    assert r.json()["archived"] is True
    assert live.client.get("/memory/recall", params={"q": "spare key mailbox"}).json() == []

    for body in ({"txt": "typo"}, {"importance": 3}, {"text": ""}, {"kind": "secret"}, {"at": "someday"}):
        bad = live.client.patch(f"/memory/{mem['id']}", json=body)
        assert bad.status_code == 422, (body, bad.text)
        assert "typo" not in bad.text  # errors never echo the input
    missing = live.client.patch("/memory/mem_doesnotexist", json={"text": "x"})
    assert missing.status_code == 404 and "mem_doesnotexist" in missing.json()["detail"]
    assert live.client.get(f"/memory/{mem['id']}").json()["text"] == "The spare key is in the mailbox."


def test_ask_without_a_language_model_returns_passages(live: Live):
    m = remember(live, "My sister Alice lives in Lisbon.")
    body = live.client.post("/ask", json={"question": "Where does my sister live?"}).json()
    assert body["llm_available"] is False and body["sources"][0]["id"] == m["id"]
    assert "Lisbon" in body["answer"] and body["conversation_id"]
    assert live.client.post("/ask", json={"question": "x" * 10_001}).status_code == 422


@pytest.mark.sqlite_only("a server reads no paths of its own (docs/server.md)")
def test_ingest_text_and_a_path(live: Live, tmp_path: Path):
    r = live.client.post("/ingest", json={"text": "Heat pump maintenance: clean the filter every three months.",
                                          "title": "Heat pump notes", "project": "home"})
    assert r.status_code == 200, r.text
    assert r.json()[0]["status"] == "added" and r.json()[0]["document_id"].startswith("doc_")
    note = tmp_path / "boat.md"
    note.write_text("# Boat\n\nThe sailing boat is moored at pier 7 in Sausalito.\n", encoding="utf-8")
    allow_folders(live.eng, tmp_path)
    r = live.client.post("/ingest", json={"paths": [str(note)]})
    assert r.status_code == 200, r.text
    assert [(x["path"], x["status"]) for x in r.json()] == [(str(note), "added")]
    missing = live.client.post("/ingest", json={"paths": [str(tmp_path / "nope.txt")]})
    assert missing.status_code in (200, 400) and "Traceback" not in missing.text
    hits = live.client.get("/memory/recall", params={"q": "where is the boat moored", "k": 3}).json()
    assert hits[0]["kind"] == "chunk" and "pier 7" in hits[0]["text"]
    doc = hits[0]["document_id"]
    assert live.client.delete(f"/memory/{doc}").json()["type"] == "document"
    hits = live.client.get("/memory/recall", params={"q": "where is the boat moored", "k": 3}).json()
    assert all(h.get("document_id") != doc for h in hits)


def test_a_document_is_read_by_its_id(live: Live):
    """`GET /documents/{id}`: one document as the listing shows it (what `personal-llm get doc_…` prints, on a
    server profile too); an unknown id is a 404."""
    r = live.client.post("/ingest", json={"text": "Heat pump maintenance: clean the filter every three months.",
                                          "title": "Heat pump notes", "project": "home"})
    uid = r.json()[0]["document_id"]
    r = live.client.get(f"/documents/{uid}")
    assert r.status_code == 200, r.text
    assert r.json() == next(d for d in live.client.get("/documents").json() if d["id"] == uid)
    assert (r.json()["title"], r.json()["project"], r.json()["chunks"]) == ("Heat pump notes", "home", 1)
    missing = live.client.get("/documents/doc_0000000000000000")
    assert missing.status_code == 404 and "No document with id doc_0000000000000000" in missing.json()["detail"]


# ---------------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------------
def test_oversized_bodies_get_413(live: Live):
    big = "x" * (BODY_LIMIT + 10)
    r = live.client.post("/memory/remember", json={"text": big})
    assert r.status_code == 413 and "limit" in r.json()["detail"]

    def chunked() -> Iterator[bytes]:  # no Content-Length: the limit is counted as the body arrives
        yield b'{"text": "'
        for _ in range(20):
            yield b"y" * 8192
        yield b'"}'

    r = live.client.post("/memory/remember", content=chunked(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert live.eng.stats().memories == 0
    assert live.client.get("/stats").status_code == 200  # the server is fine afterwards


def test_a_50_mb_body_is_answered_413_not_reset(live: Live):
    """A client that sends its whole body before it reads the answer and asks for the connection to be
    closed after it (Python's urllib does both) gets the 413 and its JSON, not a connection reset: the
    server reads and drops the body before it answers and closes."""
    import urllib.error
    import urllib.request

    body = b"x" * (50 * 1024 * 1024)
    for headers, status in (({"Authorization": f"Bearer {live.token}"}, 413), ({}, 401)):
        request = urllib.request.Request(f"{live.url}/memory/remember", data=body, method="POST",
                                         headers={**headers, "Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        assert refused.value.code == status
        detail = json.loads(refused.value.read())["detail"]
        assert ("limit" in detail) if status == 413 else ("token" in detail)
    assert live.client.get("/stats").status_code == 200


def test_invalid_input_gets_422_and_engine_refusals_400(live: Live):
    cases = [
        ("POST", "/memory/remember", {}),
        ("POST", "/memory/remember", {"text": ""}),
        ("POST", "/memory/remember", {"text": "x", "kind": "dream"}),
        ("POST", "/memory/remember", {"text": "x", "importance": 2}),
        ("POST", "/memory/remember", {"text": "x", "at": "someday"}),
        ("POST", "/memory/remember", ["not", "an", "object"]),
        ("POST", "/ask", {"question": ""}),
        ("POST", "/ingest", {}),
        ("POST", "/ingest", {"paths": ["relative/file.txt"]}),
        ("POST", "/ingest", {"paths": ["/tmp/a.txt"], "text": "both"}),
        ("GET", "/memory/recall?q=x&k=0", None),
        ("GET", "/memory/recall?k=3", None),
        ("GET", "/memory/recall?q=x&kind=dream", None),
        ("GET", "/memory/recall?q=x&since=someday", None),
    ]
    for method, path, body in cases:
        r = live.client.request(method, path, json=body)
        assert r.status_code == 422, (path, body, r.text)
        detail = r.json()["detail"]
        assert isinstance(detail, list) and {"loc", "msg", "type"} <= detail[0].keys()
        assert "Traceback" not in r.text
    r = live.client.post("/memory/remember", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    for blank in ("   ", "\u0000", "\u200b", "\ufeff", "\u0001\u0002", "\u202e \u200d"):  # the engine's own check
        r = live.client.post("/memory/remember", json={"text": blank})
        assert r.status_code == 400 and "nothing to remember" in r.json()["detail"], (blank, r.text)
    made = live.client.post("/memory/remember", json={"text": "The gate code is 4471."}).json()["id"]
    r = live.client.patch(f"/memory/{made}", json={"text": "\u200b"})
    assert r.status_code == 400 and live.client.get(f"/memory/{made}").json()["text"] == "The gate code is 4471."
    assert live.client.get("/stats").json()["memories"] >= 1
    assert live.client.get("/memory/mem_doesnotexist").status_code == 404


def test_unexpected_errors_are_generic_500_and_logged_without_text(live: Live, monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture):
    private = "".join(["my", " bank ", "PIN is 9931"])

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(private)

    monkeypatch.setattr(live.eng, "stats", broken)
    with caplog.at_level(logging.INFO, logger="engine.api"):
        r = live.client.get("/stats")
    assert r.status_code == 500 and r.json() == {"detail": "Internal error; details are in the server log."}
    assert private not in r.text
    logged = "\n".join(rec.getMessage() for rec in caplog.records)
    assert "RuntimeError" in logged and "broken" in logged and private not in logged


def test_a_request_path_cannot_forge_a_line_of_the_log(live: Live, caplog: pytest.LogCaptureFixture):
    forged = "2026-12-03 00:00:00,000 ERROR engine.api: FORGED"
    with caplog.at_level(logging.INFO, logger="engine.api"):
        path = "/x%0A" + forged.replace(" ", "%20") + "%00%0D"
        assert live.client.get(path).status_code == 404
        assert httpx.get(live.url + path).status_code == 401  # no token
        deadline = time.monotonic() + 5  # the server logs a request after its answer is sent
        while sum("FORGED" in rec.getMessage() for rec in caplog.records) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    lines = [rec.getMessage() for rec in caplog.records if "FORGED" in rec.getMessage()]
    assert len(lines) >= 2 and all("\n" not in m and "\r" not in m and "\x00" not in m for m in lines), lines
    assert all("\\n" + forged in m for m in lines)  # shown escaped: what was asked stays readable


# ---------------------------------------------------------------------------------------------------
# two processes writing at once
# ---------------------------------------------------------------------------------------------------
@pytest.mark.sqlite_only("the CLI writes to the desktop profile's file")
def test_the_cli_and_the_server_write_at_the_same_time(live: Live, tmp_path: Path):
    plain = tmp_path / "bulk.jsonl"
    plain.write_text("\n".join(json.dumps({"text": f"Imported note number {i} about topic {i * 7}."})
                               for i in range(200)), encoding="utf-8")
    proc = subprocess.Popen([CLI, "import", str(plain), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ), stdin=subprocess.DEVNULL)
    stored: set[str] = set()
    created: list[str] = []  # not merged into an earlier near-duplicate
    errors: list[str] = []

    def writer(n: int) -> None:
        with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {live.token}"}, timeout=60) as c:
            i = 0
            while proc.poll() is None or i < 5:
                r = c.post("/memory/remember", json={"text": f"Server note {n}-{i} on the balcony plants."})
                if r.status_code != 200:
                    errors.append(r.text)
                else:
                    stored.add(r.json()["id"])
                    if not r.json()["merged"]:
                        created.append(r.json()["id"])
                i += 1
                time.sleep(0.2)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    out, err = proc.communicate(timeout=300)
    for t in threads:
        t.join(timeout=120)
    assert proc.returncode == 0, err
    assert errors == []
    assert json.loads(out)["added"] == {"memory": 200}
    # a note stored before its vector existed may merge into a near-duplicate when the vector arrives
    # (the same rule as a note embedded at once): every note is still there, as itself or merged
    live.client.get("/memory/recall", params={"q": "balcony plants", "k": 1})  # embeds what is pending
    surviving = {i for i in created if live.client.get(f"/memory/{i}").status_code == 200}
    stats = live.client.get("/stats").json()
    assert stats["memories"] == 200 + len(surviving) and len(surviving) >= 1 and set(created) == stored
    hits = live.client.get("/memory/recall", params={"q": "Imported note number 123", "k": 3}).json()
    assert any("number 123 " in h["text"] for h in hits)
    hits = live.client.get("/memory/recall", params={"q": "balcony plants", "k": 3}).json()
    assert hits and all(h["id"] in stored for h in hits)


# ---------------------------------------------------------------------------------------------------
# property-based: requests generated from the OpenAPI document never get a 5xx
# ---------------------------------------------------------------------------------------------------
def _resolve(spec: dict, schema: dict) -> dict:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        schema = spec["components"]["schemas"][name]
    return schema


def _from_schema(spec: dict, schema: dict, depth: int = 0) -> st.SearchStrategy[Any]:
    """A hypothesis strategy for values of a JSON schema (the subset FastAPI emits), sometimes off-schema."""
    schema = _resolve(spec, schema)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"]) | st.text(max_size=8)
    if "anyOf" in schema:
        return st.one_of([_from_schema(spec, s, depth) for s in schema["anyOf"]])
    kind = schema.get("type")
    if kind == "string":
        if schema.get("format") == "date-time":
            return st.datetimes().map(datetime.isoformat) | st.text(max_size=12)
        return st.text(min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 60), 60))
    if kind == "integer":
        return st.integers(min_value=schema.get("minimum", -10), max_value=schema.get("maximum", 10**6)) | st.integers()
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False) | st.integers()
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(_from_schema(spec, schema.get("items", {}), depth + 1), max_size=3)
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        fields = {name: _from_schema(spec, s, depth + 1) for name, s in props.items()}
        return st.fixed_dictionaries(
            {k: v for k, v in fields.items() if k in required},
            optional={k: v for k, v in fields.items() if k not in required},
        )
    return st.none() | st.booleans() | st.integers() | st.text(max_size=10)


def _no_real_paths(missing: str, body: Any) -> Any:
    return {**body, "paths": [missing]} if isinstance(body, dict) and body.get("paths") else body


def _operations(spec: dict, tmp_path: Path) -> list[st.SearchStrategy[tuple[str, str, dict, dict, Any]]]:
    ops = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            params = op.get("parameters", [])
            path_params = {p["name"]: _from_schema(spec, p["schema"]).map(str) | st.sampled_from(["mem_x", "doc_x"])
                           for p in params if p["in"] == "path"}
            query = {p["name"]: _from_schema(spec, p["schema"]) for p in params if p["in"] == "query"}
            body: st.SearchStrategy[Any] = st.none()
            if "requestBody" in op and "application/json" not in op["requestBody"]["content"]:
                body = st.none() | st.text(max_size=20)  # the upload form (multipart) has tests of its own
            elif "requestBody" in op:
                schema = op["requestBody"]["content"]["application/json"]["schema"]
                body = _from_schema(spec, schema)
                if path == "/ingest":  # never let a fuzzer ingest real files from this machine
                    body = body.map(functools.partial(_no_real_paths, str(tmp_path / "does-not-exist.txt")))
                body = body | st.none() | st.text(max_size=20) | st.lists(st.integers(), max_size=2)
            ops.append(st.tuples(
                st.just(method.upper()), st.just(path), st.fixed_dictionaries(path_params),
                st.fixed_dictionaries({}, optional=query), body))
    return ops


def test_requests_generated_from_the_openapi_never_get_a_5xx(live: Live, tmp_path: Path):
    live.client.post("/memory/remember", json={"text": "A seed memory so recall has something to rank."})
    spec = live.client.get("/openapi.json").json()
    seen: list[tuple[str, str, int]] = []

    def check(call: tuple[str, str, dict, dict, Any]) -> None:
        method, path, path_params, query, body = call
        url = path
        for name, value in path_params.items():
            url = url.replace("{" + name + "}", quote(value, safe="") or "x")
        query = {k: v for k, v in query.items() if v is not None}
        kwargs: dict[str, Any] = {"params": {k: json.dumps(v) if isinstance(v, dict | list) else str(v)
                                             for k, v in query.items()}}
        if body is not None:
            kwargs["json"] = body
        r = live.client.request(method, url, **kwargs)
        seen.append((method, path, r.status_code))
        assert r.status_code < 500, (method, url, query, body, r.status_code, r.text)
        streamed = spec["paths"][path][method.lower()]["responses"].get("200", {}).get("content", {})
        if 200 <= r.status_code < 300 and "application/x-ndjson" in streamed:  # a stream of lines (an export)
            assert r.headers["content-type"].startswith("application/x-ndjson")
            return
        assert r.headers["content-type"].startswith("application/json")
        r.json()

    # every operation gets its own draws (one draw from all of them left some never tried as routes grew)
    for operation in _operations(spec, tmp_path):
        settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck),
                 database=None)(given(operation)(check))()
    assert {(m, p) for m, p, _ in seen} >= {(m.upper(), p) for p, item in spec["paths"].items() for m in item}
    assert any(200 <= s < 300 for _, _, s in seen)


def test_a_wrong_path_or_method_says_which_endpoints_exist(live: Live):
    r = live.client.get("/recall?q=car")
    assert r.status_code == 404 and "GET /recall" in r.json()["detail"] and "/memory/recall" in r.json()["detail"]
    r = live.client.put("/memory/recall")
    assert r.status_code == 405 and "does not take PUT (it takes GET)" in r.json()["detail"]
    assert "GET" in r.headers["allow"]
    r = live.client.put("/memory/remember", json={"text": "x"})
    assert r.status_code == 405 and "(it takes POST)" in r.json()["detail"]
    for path in ("/memory/remember", "/memory/batch"):  # not "No memory with id remember."
        r = live.client.get(path)
        assert r.status_code == 405 and f"{path} does not take GET (it takes POST)" in r.json()["detail"]
        assert r.headers["allow"] == "POST"
    # a 404 raised by an endpoint keeps its own message
    r = live.client.post("/agent/run/nope/stop")
    assert r.status_code == 404 and r.json()["detail"] == "There is no run nope going on."


def test_recall_is_answered_as_its_fastapi_route_answers(live: Live):
    """GET /memory/recall has a route of its own in front of FastAPI's (no per-request dependency solving):
    every answer, error and status is the one FastAPI's route gives, and that route still makes the schema."""
    from engine.limits import MAX_QUERY_CHARS

    remember(live, "Alice moved to Lisbon in May; she works at the aquarium.", project="p")
    remember(live, "Bob: did you see the aquarium?", kind="episodic")
    asked: list[Any] = [
        {"q": "Lisbon"}, {"q": "aquarium", "k": "1", "kind": "episodic"}, {"q": "Lisbon", "project": "p"},
        {"q": "Lisbon", "project": "p", "unscoped": "true", "archived": "1", "used": "false"},
        {"q": "aquarium", "since": "2020-01-01T00:00:00", "until": "2999-01-01T00:00:00+02:00"},
        [("q", "nothing"), ("q", "Lisbon"), ("k", "2")], {"q": "Lisbon", "other": "ignored"},
        {}, {"q": ""}, {"q": "x" * (MAX_QUERY_CHARS + 1)}, {"q": "x", "k": "0"}, {"q": "x", "k": "many"},
        {"q": "x", "k": ""}, {"q": "x", "kind": "poem"}, {"q": "x", "since": "yesterday"},
        {"q": "x", "until": "0001-01-01T00:00:00"}, {"q": "x", "used": "maybe"}, {"q": "x", "project": "p" * 10_000},
        {"k": "x", "kind": "poem", "used": "2"},
    ]

    def answers() -> list[tuple[int, Any]]:
        out = []
        for params in asked:
            r = live.client.get("/memory/recall", params=params)
            body = r.json()
            if r.status_code == 200:  # the time since it was stored moves on between the two rounds
                body = [{k: v for k, v in hit.items() if k not in ("recency", "score")} for hit in body]
            out.append((r.status_code, r.headers["content-type"], body))
        for method in ("HEAD", "PUT", "POST"):
            r = live.client.request(method, "/memory/recall", params={"q": "x"})
            out.append((r.status_code, r.headers.get("allow"), r.text))
        return out

    routes = live.app.router.routes
    direct = [r for r in routes if getattr(r, "name", None) == "recall_directly"]
    assert len(direct) == 1
    schema = live.client.get("/openapi.json").json()
    mine = answers()
    assert [a[0] for a in mine[:7]] == [200] * 7 and mine[0][2] and all(a[0] == 422 for a in mine[7:-3])
    routes.remove(direct[0])  # FastAPI's own route answers from now on
    assert answers() == mine
    assert live.client.get("/openapi.json").json() == schema and "/memory/recall" in schema["paths"]


def test_a_path_holding_nul_is_a_404_before_any_route(live: Live):
    """NUL, sent as %00 (or a literal %00 sent as %2500), wherever it is in the path, also after a ? or #
    sent encoded: the route never sees it (PostgreSQL cannot compare a text holding NUL)."""
    for path in ("/memory/%00", "/memory/a%3F%00b", "/memory/a%23b%00", "/documents/x%2500", "/nowhere%00"):
        for method in ("GET", "DELETE"):
            r = live.client.request(method, path)
            assert r.status_code == 404 and r.json() == {"detail": "No such item"}, (method, path, r.text)
    assert httpx.get(live.url + "/memory/%00").status_code == 401  # the token is checked first
    assert live.client.get("/memory/recall", params={"q": "nothing stored"}).status_code == 200


def test_the_servers_connections_send_without_waiting_for_acks():
    """Nagle's algorithm off on every accepted connection: with it on, a response's body waited for the
    client's delayed ACK of its headers, 40 ms on each request of a kept-alive connection."""
    import asyncio
    import socket

    from engine.api import bind_socket

    async def accepted_nodelay() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport):
                sock = transport.get_extra_info("socket")
                seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        listening = bind_socket(0)
        server = await asyncio.get_running_loop().create_server(Probe, sock=listening)  # as uvicorn serves it
        port = listening.getsockname()[1]
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            value = await asyncio.wait_for(seen, 10)
            writer.close()
            return value
        finally:
            server.close()

    assert asyncio.run(accepted_nodelay()) != 0
