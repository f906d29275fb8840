"""`personal-llm serve --database URL`: the HTTP API of a real server process for the users of a real
PostgreSQL database, each request acting as its token's user."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from engine import users
from tests.postgres.serving import Served


@pytest.fixture
def server(served: Served) -> tuple[str, str, str, str]:
    return served.url, served.alice, served.bob, served.pg_url


def test_each_request_acts_as_its_tokens_user(server):
    url, alice, bob, _ = server
    a = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {alice}"}, timeout=60)
    b = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {bob}"}, timeout=60)
    r = a.post("/memory/remember", json={"text": "The boiler's service code is 4471, on the sticker inside the door."})
    assert r.status_code == 200, r.text
    uid = r.json()["id"]
    b.post("/memory/remember", json={"text": "Bob's bicycle lock combination is written in the blue notebook."})

    hits = a.get("/memory/recall", params={"q": "boiler service code"}).json()
    assert [h["id"] for h in hits][:1] == [uid]
    assert b.get("/memory/recall", params={"q": "boiler service code"}).json() == []
    assert b.get(f"/memory/{uid}").status_code == 404
    assert b.delete(f"/memory/{uid}").status_code == 404
    assert a.get("/stats").json()["memories"] == 1 and b.get("/stats").json()["memories"] == 1

    r = a.patch(f"/memory/{uid}", json={"text": "The boiler's service code changed to 5582 after the repair."})
    assert r.status_code == 200, r.text
    assert b.patch(f"/memory/{uid}", json={"text": "Bob was here."}).status_code == 404
    hits = a.get("/memory/recall", params={"q": "boiler code after the repair"}).json()
    assert hits[0]["id"] == uid and "5582" in hits[0]["text"]

    assert a.delete(f"/memory/{uid}").status_code == 200
    assert a.get("/stats").json()["memories"] == 0


def test_tokens_paths_and_listening(server, tmp_path: Path):
    url, alice, _, pg_url = server
    assert httpx.get(f"{url}/stats").status_code == 401
    assert httpx.get(f"{url}/stats", headers={"Authorization": "Bearer pllm_not-a-token"}).status_code == 401
    secret = tmp_path / "server-file.txt"
    secret.write_text("a file on the server's disk")
    r = httpx.post(f"{url}/ingest", json={"paths": [str(secret)]}, headers={"Authorization": f"Bearer {alice}"})
    assert r.status_code == 403 and "upload" in r.json()["detail"]

    users.remove(pg_url, "alice", forget=False)
    deadline = time.monotonic() + 30
    while httpx.get(f"{url}/stats", headers={"Authorization": f"Bearer {alice}"}).status_code != 401:
        assert time.monotonic() < deadline, "a removed user's token still works"
        time.sleep(1)


def test_listening_beyond_loopback_needs_tls(pg_url: str, tmp_path: Path):
    env = {**os.environ, "PERSONAL_LLM_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "engine.cli", "serve", "--database", pg_url, "--host", "0.0.0.0",
                           "--port", "0"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--tls-cert" in done.stderr and "Traceback" not in done.stderr


def test_imports_in_flight_do_not_hold_other_users_writes(server):
    """PostgreSQL runs different users' transactions side by side: while Alice's two big imports are being
    embedded and stored, Bob's single memory is stored at once (it waited for one of them to finish when every
    user's writes shared two workers, as a SQLite file's writer does)."""
    import threading

    url, alice, bob, _ = server
    a = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {alice}"}, timeout=600)
    b = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {bob}"}, timeout=600)
    b.post("/memory/remember", json={"text": "Warm: the model is loaded and Bob's engine made."}).raise_for_status()
    finished: list[float] = []

    def batch(n: int) -> None:
        items = [{"text": f"Imported note {n}.{i}: the shed's {i}th shelf holds box {i * 7 + n}.", "kind": "episodic"}
                 for i in range(1000)]
        a.post("/memory/batch", json={"items": items}).raise_for_status()
        finished.append(time.monotonic())

    imports = [threading.Thread(target=batch, args=(n,)) for n in range(2)]
    for t in imports:
        t.start()
    time.sleep(1.0)  # both in flight
    r = b.post("/memory/remember", json={"text": "Bob's train to Porto leaves at 9:40 from platform 4."})
    stored = time.monotonic()
    assert r.status_code == 200, r.text
    assert not finished, "Bob's write waited for an import of Alice's"
    for t in imports:
        t.join()
    assert a.get("/stats").json()["memories"] == 2000 and b.get("/stats").json()["memories"] == 2
    assert len(finished) == 2 and stored < min(finished)
