"""A whole local store moved into an account on a server and back, as a person does it from the CLI (`push`,
then another device's profile on the same account, then `pull` into a new local profile): memories with their
times, importance and kinds, documents with their passages and vectors (not embedded again), a conversation
and the graph with its provenance. Idempotent and resumable: pushed twice, or after the server was killed
(kill -9) in the middle, nothing doubles. A real server process on a real PostgreSQL; the language model is
tests/ollama_server.py, the embedding model the real bundled one."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from engine import users
from engine.config import LLMSettings, Settings, save_settings
from tests.ollama_server import OllamaTestServer, Reply
from tests.postgres.serving import Server
from tests.postgres.test_devices import cli, cli_json, files_hold

WORDS = ("kettle", "violin", "garden", "passport", "bicycle", "ladder", "invoice", "harbour", "lantern", "orchard",
         "compass", "teapot", "blanket", "mirror", "satchel", "chimney", "pebble", "tunnel", "saddle", "canvas")
OWNED = (("Adaeze Okonkwo", "Greenhouse Nine"), ("Tomasz Wielki", "the red canal boat"))
TOTAL = 1003  # memories
LOGBOOK = "The lighthouse keeper's logbook is kept in the brass chest under the stairs."


def _model(request: dict[str, Any]) -> str | Reply:
    """Graph extraction (who owns what) and Ask (cites the passage that holds the logbook)."""
    messages = request.get("messages") or []
    last = messages[-1].get("content", "") if messages else ""
    if request.get("format"):
        return Reply(json={"triples": [{"subject": who, "relation": "owns", "object": what, "subject_type": "person",
                                        "object_type": "thing"} for who, what in OWNED if who in last]})
    cited = [n for n, block in re.findall(r"\[(\d+)\] (.*?)(?=\n\[\d+\] |\Z)", last, re.S) if "brass chest" in block]
    return f"It is in the brass chest [{cited[0]}]." if cited else "I don't have that in memory."


@pytest.fixture
def llm() -> Iterator[OllamaTestServer]:
    with OllamaTestServer(models=["llama3.2"], reply_fn=_model) as s:
        yield s


@pytest.fixture
def served(pg_url: str, tmp_path: Path, profile_home: Path, llm: OllamaTestServer) -> Iterator[tuple[Server, str]]:
    token = users.add(pg_url, "alice")
    home = tmp_path / "server-home"
    home.mkdir()
    save_settings(Settings(llm=LLMSettings(host=llm.url, model="llama3.2")), home)
    server = Server(pg_url, home).start()
    try:
        yield server, token
    finally:
        server.kill(signal.SIGTERM)


def _local_store(home: Path, folder: Path, llm_url: str) -> dict[str, Any]:
    """A local profile: two memories the graph is read from, 1,000 memories of every kind (some with projects
    and event times, five archived), a long one (embedded in windows), 20 documents (one long, of several
    passages), a conversation with Ask; everything embedded."""
    from engine import Engine
    from engine.memories import Remembered

    save_settings(Settings(llm=LLMSettings(host=llm_url, model="llama3.2")), home)
    items = [Remembered(f"{who} owns {what}.", kind="fact") for who, what in OWNED]
    items += [Remembered(f"Note {i}: the {WORDS[i % 20]} is kept beside the {WORDS[(i * 7 + 3) % 20]} in room "
                         f"{i} of building {i // 20}.", kind=("fact", "episodic", "procedural")[i % 3],
                         project="house" if i % 4 == 0 else None, importance=round(0.1 + (i % 9) / 10, 2),
                         at=f"2025-0{1 + i % 9}-1{i % 10}T08:00:00+00:00" if i % 3 == 1 else None)
              for i in range(1000)]
    items.append(Remembered(" ".join(f"On day {d} of the voyage the {WORDS[d % 20]} was stowed in hold {d % 7}."
                                     for d in range(120)), kind="episodic"))  # longer than the model's window
    folder.mkdir()
    for i in range(20):
        body = [f"Manual {i} for the {WORDS[i]}: clean it monthly and keep it dry."]
        if i == 7:
            body.append(LOGBOOK)
        if i == 0:  # several passages
            body += [f"Section {n}. The {WORDS[n % 20]} of the workshop needs oiling every {n + 2} weeks, and its "
                     f"spare parts are ordered from the supplier in {WORDS[(n + 5) % 20]} street." for n in range(200)]
        (folder / f"manual-{i:02}.txt").write_text("\n\n".join(body))
    with Engine.open(home, actor="sdk") as eng:
        results = eng.remember_many(items, embed="background")
        for r in results[2:7]:
            eng.update(r.id, archived=True)
        assert all(r.status == "added" for r in eng.ingest([folder]))
        eng.embed_pending()
        assert eng.extract_pending(limit=2).edges == 2  # the two owners, each tied to its memory
        asked = eng.ask("Where is the lighthouse keeper's logbook?")
        assert asked.grounded, asked
        return {"uids": [r.id for r in results], "conversation": asked.conversation_id}


def pg_rows(pg_url: str, sql: str) -> list[tuple]:
    """Rows of the database read as the superuser (which row-level security does not hold)."""
    with psycopg.connect(pg_url) as con:
        con.execute("SET search_path = personal_llm, public")
        return con.execute(sql).fetchall()


def pg_counts(pg_url: str) -> dict[str, int]:
    tables = ("memories", "documents", "chunks", "conversations", "messages", "nodes", "edges", "memory_vectors",
              "memory_windows", "chunk_vectors")
    return {t: pg_rows(pg_url, f"SELECT count(*) FROM {t}")[0][0] for t in tables}


def local_view(home: Path) -> dict[str, Any]:
    """What a local profile holds, to compare: memories (with every field a person sees), documents, passages,
    the conversation's turns, the graph's facts with their memories, and the vectors."""
    from engine import Engine
    from engine import store as rows

    with Engine.open(home, actor="sdk") as eng:
        memories = {m.id: (m.text, m.kind, m.project, m.importance, m.at, m.created_at, m.archived)
                    for m in eng.list_memories(limit=5000, archived=None)}
        documents = sorted((d.id, d.title, d.chunks, d.size) for d in eng.list_documents())
        with eng.store.read() as con:
            chunks = sorted(r[0] for r in con.execute("SELECT uid FROM chunks").fetchall())
            turns = con.execute("SELECT role, content FROM messages ORDER BY id").fetchall()
            windows = con.execute("SELECT count(*) FROM memory_windows").fetchone()[0]
            vecs = rows.transfer.vectors_of(con, "memories", list(memories))
            chunk_vecs = rows.transfer.vectors_of(con, "chunks", chunks)
        graph = {who: sorted((e.text, tuple(e.sources)) for e in eng.neighbours(who).edges) for who, _ in OWNED}
    return {"memories": memories, "documents": documents, "chunks": chunks, "turns": turns, "graph": graph,
            "windows": windows,
            "vectors": {uid: v for uid, (v, _) in vecs.items()}, "chunk_vectors": {u: v for u, (v, _) in chunk_vecs.items()}}


def test_a_whole_store_moves_into_the_account_and_back(served, pg_url: str, profile_home: Path, tmp_path: Path,
                                                        llm: OllamaTestServer):
    server, token = served
    made = _local_store(profile_home, tmp_path / "manuals", llm.url)
    local = local_view(profile_home)
    assert len(local["memories"]) == TOTAL and len(local["documents"]) == 20 and len(local["chunks"]) > 21
    assert len(local["vectors"]) == TOTAL and len(local["chunk_vectors"]) == len(local["chunks"])

    # kill -9 of the server in the middle of a push; pushed again, it finishes
    pusher = subprocess.Popen([sys.executable, "-m", "engine.cli", "push", server.url, "--token", token, "--batch",
                               "50", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=os.environ.copy())
    deadline = time.monotonic() + 300
    while pg_counts(pg_url)["memories"] < 100:
        assert time.monotonic() < deadline and pusher.poll() is None, pusher.stderr.read() if pusher.stderr else ""
        time.sleep(0.02)
    server.kill()
    _, err = pusher.communicate(timeout=120)
    assert pusher.returncode == 1 and ("cannot be reached" in err or "did not answer" in err), err
    cut = pg_counts(pg_url)
    assert 100 <= cut["memories"] < TOTAL
    server.start()
    started = time.monotonic()
    done = cli_json("push", server.url, "--token", token)
    took = time.monotonic() - started
    print(f"push of the rest: {done['records']} records in {took:.1f} s")
    assert done["memories"] == TOTAL and done["added"] == TOTAL - cut["memories"]
    assert done["sent"] <= done["records"] - cut["memories"]  # what the server held already was not sent
    assert done["added_by_type"].get("edge") == 2
    counts = pg_counts(pg_url)
    assert counts == {"memories": TOTAL, "documents": 20, "chunks": len(local["chunks"]), "conversations": 1,
                      "messages": len(local["turns"]), "nodes": 4, "edges": 2, "memory_vectors": TOTAL,
                      "memory_windows": local["windows"], "chunk_vectors": len(local["chunks"])}
    assert pg_rows(pg_url, "SELECT count(*) FROM memories WHERE embedded_hash IS DISTINCT FROM content_hash")[0][0] == 0
    audit = pg_rows(pg_url, "SELECT count(*), sum((detail->'added'->>'memory')::int) FROM audit WHERE action = 'push'")
    assert audit[0][1] == TOTAL  # every batch that landed is audited, with what it added
    assert pg_rows(pg_url, "SELECT DISTINCT actor FROM audit WHERE action = 'push'") == [("cli",)]  # by whom

    # pushed again: nothing doubles, and almost nothing travels (the server says what it holds): only the graph's
    # facts and the facts' derivations, which have no id of their own
    again = cli_json("push", server.url, "--token", token)
    assert again["added_by_type"] == {} and again["skipped_by_type"]["memory"] == TOTAL
    assert again["records"] == done["records"]
    assert again["sent"] == sum(again["skipped_by_type"].get(k, 0) for k in ("edge", "derivation", "fact_check"))
    assert again["sent"] <= 10 and again["sent_bytes"] < 10_000 < done["sent_bytes"] // 50, again
    assert pg_counts(pg_url) == counts

    # a turn added to the conversation here since: pushed again, only those turns (and the graph's facts) go
    from engine import Engine

    with Engine.open(profile_home, actor="sdk") as eng:
        eng.ask("Where is the lighthouse keeper's logbook kept?", conversation_id=made["conversation"])
    more = cli_json("push", server.url, "--token", token)
    assert more["added_by_type"] == {"message": 2} and more["sent"] == again["sent"] + 2, more
    counts["messages"] += 2
    local["turns"] = local_view(profile_home)["turns"]
    assert pg_counts(pg_url) == counts

    # the vectors travelled as they were: the server's equal the local store's
    uid = made["uids"][12]
    (text,) = pg_rows(pg_url, f"SELECT embedding::text FROM memory_vectors v JOIN memories m ON m.id = v.memory_id "
                              f"AND m.user_id = v.user_id WHERE m.uid = '{uid}'")[0]
    assert np.allclose(np.array(json.loads(text), dtype=np.float32), local["vectors"][uid], atol=1e-6)

    # another device's profile on the same account: recall, ask and the graph give what the first had
    cli("connect", server.url, "--token", token, "--profile", "desk")
    there = {m["id"]: m for m in cli_json("--profile", "desk", "list", "-n", "1000")}
    there.update({m["id"]: m for m in cli_json("--profile", "desk", "list", "--archived", "-n", "1000")})
    assert {k: (m["text"], m["kind"], m["project"], m["importance"], m["at"], m["created_at"], m["archived"])
            for k, m in there.items()} == local["memories"]
    hits = cli_json("--profile", "desk", "recall", "the compass kept beside the mirror in room 10")
    assert made["uids"][12] in [h["id"] for h in hits[:3]]
    answer = cli_json("--profile", "desk", "ask", "Where is the lighthouse keeper's logbook?")
    assert answer["grounded"] and answer["answer"].startswith("It is in the brass chest"), answer
    cited = int(re.search(r"\[(\d+)\]", answer["answer"]).group(1))
    assert LOGBOOK in next(s for s in answer["sources"] if s["n"] == cited)["text"]
    for who, _ in OWNED:
        view = cli_json("--profile", "desk", "graph", who)
        assert sorted((e["text"], tuple(e["sources"])) for e in view["edges"]) == local["graph"][who]

    # pulled into a new local profile: the same things, vectors included
    pulled = cli_json("--profile", "desk", "pull", "--into", "copy")
    assert pulled["added"] == TOTAL and pulled["vectors"] >= TOTAL + len(local["chunks"])
    assert cli_json("--profile", "desk", "pull", "--into", "copy")["added_by_type"] == {}  # again: nothing doubles
    copy_home = profile_home / "profiles" / "copy"
    assert files_hold(copy_home, "beside the") == []  # encrypted
    copy = local_view(copy_home)
    assert copy["memories"] == local["memories"]
    assert copy["documents"] == local["documents"] and copy["chunks"] == local["chunks"]
    asked_there = [("user", "Where is the lighthouse keeper's logbook?"), ("assistant", answer["answer"])]
    assert [tuple(t) for t in copy["turns"]] == [tuple(t) for t in local["turns"]] + asked_there
    assert copy["graph"] == local["graph"]
    assert set(copy["vectors"]) == set(local["vectors"]) and copy["windows"] == local["windows"] > 1
    assert all(np.allclose(copy["vectors"][u], local["vectors"][u], atol=1e-6) for u in made["uids"][:50])
    assert all(np.allclose(copy["chunk_vectors"][u], v, atol=1e-6) for u, v in local["chunk_vectors"].items())

    # a forget on the server takes the graph's facts drawn from that memory with it
    cli("--profile", "desk", "forget", made["uids"][0])
    gone = cli("--profile", "desk", "graph", OWNED[0][0], check=False)
    assert gone.returncode == 1 and "Nothing in the knowledge graph is called" in gone.stderr
    assert pg_counts(pg_url)["edges"] == 1 and cli_json("--profile", "desk", "graph", OWNED[1][0])["edges"]


def memory(text: str, **extra: Any) -> dict[str, Any]:
    """A memory record as a push sends it."""
    from engine.memory_rules import new_uid

    now = "2026-01-02T03:04:05+00:00"
    return {"type": "memory", "uid": new_uid("mem"), "kind": "fact", "text": text, "importance": 0.5,
            "created_at": now, "updated_at": now, **extra}


def test_the_bulk_route_refuses_bad_batches_clearly_and_keeps_users_apart(pg_url: str, tmp_path: Path):
    from tests.postgres.serving import serving

    for served in serving(pg_url, tmp_path / "server-home"):
        a, b = served.client(served.alice), served.client(served.bob)
        info = a.get("/transfer").json()
        assert info["space"][2] == 384 and info["max_records"] == 1000
        too_many = a.post("/transfer/records", json={"records": [memory(f"Note {i}") for i in range(1001)]})
        assert too_many.status_code == 413 and "at most 1000 records" in too_many.json()["detail"]
        bad = a.post("/transfer/records", json={"records": [memory("fine"), {**memory("x"), "importance": 7}]})
        assert bad.status_code == 422 and bad.json()["detail"].startswith("records[1] (memory): importance")
        unknown = a.post("/transfer/records", json={"records": [{"type": "audit", "at": "2026-01-02T03:04:05Z"}]})
        assert unknown.status_code == 422 and "not a type of record that moves" in unknown.json()["detail"]
        orphan = {"type": "chunk", "uid": "chk_x", "document": "doc_nowhere", "position": 0, "text": "A passage."}
        assert a.post("/transfer/records", json={"records": [orphan]}).status_code == 422
        vector = base64.b64encode(np.ones(384, dtype="<f4").tobytes()).decode()
        other = ["sentence-transformers", "another-model", 384, "v1"]
        refused = a.post("/transfer/records", json={"space": other, "records": [memory("x", vector=vector)]})
        assert refused.status_code == 409 and "another-model" in refused.json()["detail"]
        short = a.post("/transfer/records", json={"space": info["space"], "records": [memory("x", vector=vector[:40])]})
        assert short.status_code == 422
        huge = a.post("/transfer/records", content=b'{"records": [' + b'"x",' * 3_000_000 + b'"x"]}',
                      headers={"Content-Type": "application/json"})
        assert huge.status_code == 413
        assert a.get("/transfer").json()["counts"]["memory"] == 0  # nothing of a refused batch stayed

        kept = memory("The spare bicycle pump hangs behind the door.", vector=vector)
        done = a.post("/transfer/records", json={"space": info["space"], "records": [kept]})
        assert done.status_code == 200 and done.json() == {"added": {"memory": 1}, "skipped": {}, "vectors": 1}
        assert a.post("/transfer/records", json={"space": info["space"], "records": [kept]}).json()["skipped"] == {
            "memory": 1}
        page = a.get("/transfer/records").json()
        assert [r["uid"] for r in page["records"]] == [kept["uid"]] and page["next"] is None
        assert page["records"][0]["vector"] == vector  # as it came
        assert b.get("/transfer/records").json() == {"records": [], "next": None}  # Bob's own rows only
        assert b.get("/transfer").json()["counts"]["memory"] == 0
        theirs = b.post("/transfer/records", json={"space": info["space"], "records": [kept]}).json()
        assert theirs["added"] == {"memory": 1}  # the same id in Bob's account is Bob's own memory
        assert a.get("/transfer").json()["counts"]["memory"] == 1
        assert a.get("/transfer/records", params={"after": "nonsense"}).status_code == 400

        # what an account holds already, asked by a push before it sends: the user's own rows only
        asked = {"keys": {"memory": [kept["uid"], "mem_unknown"], "node": ["nobody"], "conversation": ["cnv_none"]}}
        assert a.post("/transfer/known", json=asked).json() == {"known": {"memory": [kept["uid"]], "node": [],
                                                                         "conversation": []}, "turns": {}}
        bob_known = b.post("/transfer/known", json={"keys": {"memory": [kept["uid"]]}}).json()
        assert bob_known["known"] == {"memory": [kept["uid"]]}  # his own copy (stored above)
        assert b.post("/transfer/known", json={"keys": {"memory": ["mem_x"]}}).json()["known"] == {"memory": []}
        wrong = a.post("/transfer/known", json={"keys": {"audit": ["x"]}})
        assert wrong.status_code in (400, 422) and "not a type of record a push asks about" in wrong.json()["detail"]
        lots = a.post("/transfer/known", json={"keys": {"memory": [f"mem_{i}" for i in range(5001)]}})
        assert lots.status_code == 413 and "at most 5000" in lots.json()["detail"]
