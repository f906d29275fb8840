"""MCP over streamable HTTP at /mcp of `personal-llm serve --database URL`: the SDK's own client, on a real
server process and a real PostgreSQL; each request acts as its token's user."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import httpx2
import psycopg
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.postgres.serving import Served


async def _call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content


def _session(url: str, token: str):
    return streamable_http_client(f"{url}/mcp", http_client=httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=120))


def test_mcp_over_http_acts_as_each_tokens_user(served: Served):
    async def main() -> None:
        async with _session(served.url, served.alice) as (ra, wa), ClientSession(ra, wa) as alice, \
                _session(served.url, served.bob) as (rb, wb), ClientSession(rb, wb) as bob:
            await alice.initialize()
            await bob.initialize()
            tools = {t.name for t in (await alice.list_tools()).tools}
            assert {"remember", "recall", "ask", "forget", "mark_used", "watched_folders"} <= tools

            kept = await _call(alice, "remember", text="The allotment's water tap key is under the third "
                                                       "paving stone by the shed.")
            await _call(bob, "remember", text="Bob's squash racket is being restrung at the sports shop.")
            hits = (await _call(alice, "recall", query="where is the allotment tap key"))["hits"]
            assert hits and hits[0]["id"] == kept["id"]
            assert (await _call(bob, "recall", query="allotment tap key paving stone"))["hits"] == []
            mine = (await _call(bob, "recall", query="squash racket"))["hits"]
            assert [h["text"][:10] for h in mine] == ["Bob's squa"]

            answer = await _call(alice, "ask", question="Where is the allotment tap key?")
            assert answer["grounded"] and any(s.get("id") == kept["id"] for s in answer["sources"]), answer
            assert not (await _call(bob, "ask", question="Where is the allotment tap key?"))["grounded"]

            stats = json.loads((await bob.read_resource("memory://stats")).contents[0].text)
            assert stats["memories"] == 1

            refused = await bob.call_tool("forget", {"id": kept["id"], "confirm": kept["id"]})
            assert refused.is_error  # not his
            gone = await _call(alice, "forget", id=kept["id"], confirm=kept["id"])
            assert gone["id"] == kept["id"] and gone["type"] == "memory"
            assert (await _call(alice, "recall", query="allotment tap key"))["hits"] == []

    anyio.run(main)
    with psycopg.connect(served.pg_url) as con:  # the log names MCP as the door, as on a desktop profile
        assert sorted(con.execute("SELECT DISTINCT actor, action FROM personal_llm.audit WHERE action IN "
                                  "('remember', 'forget')").fetchall()) == [("mcp", "forget"), ("mcp", "remember")]


def test_mcp_needs_a_users_token(served: Served):
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    assert httpx.post(f"{served.url}/mcp", json=hello, headers=headers).status_code == 401
    wrong = {**headers, "Authorization": "Bearer pllm_not-a-token"}
    assert httpx.post(f"{served.url}/mcp", json=hello, headers=wrong).status_code == 401
    ok = httpx.post(f"{served.url}/mcp", json=hello, headers={**headers, "Authorization": f"Bearer {served.alice}"})
    assert ok.status_code == 200 and ok.json()["result"]["serverInfo"]["name"] == "personal-llm"
