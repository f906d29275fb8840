"""Export and import: everything a user owns leaves in one file and comes back identical, merged, never twice."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import Engine, UserError
from engine.transfer import PassphraseRequired, WrongPassphrase, is_encrypted
from tests.integration.test_api import live  # noqa: F401 (the served app, a fixture)

CLI = shutil.which("personal-llm", path=str(Path(sys.executable).parent)) or "personal-llm"
PASS = "correct horse battery staple"
QUERIES = [
    "Which city is my sibling based in?",
    "garage door code",
    "how do I restart the router",
    "hiking trip",
    "when is the report due",
    "heat pump maintenance manual",
    "Alice",
]
SECRETS = ["Lisbon", "4321", "Tamalpais", "quarterly report", "filter every three months"]


@pytest.fixture
def other(request: pytest.FixtureRequest, backend: str, tmp_path: Path, embedder) -> Iterator[Engine]:
    """A second, fresh store to import into, on the test's backend: a new profile, or a new user of the same
    database (so every import on a server runs beside another user's rows)."""
    if backend == "sqlite":
        e = Engine.open(tmp_path / "other-profile", embedder=embedder)
    else:
        from engine import users
        from engine.config import load_settings

        db = request.getfixturevalue("pg_db")
        uid = db.add_user("bob", users.token_hash(users.make_token()))
        home = tmp_path / "bob-home"
        home.mkdir()
        e = Engine.for_user(db, uid, "bob", home=home, settings=load_settings(home), actor="sdk", embedder=embedder)
    yield e
    e.close()


def sql(con, query: str, args: tuple = ()) -> int:
    """Run one statement written for SQLite (`?`) on either backend; the new row's id for an INSERT."""
    if type(con).__module__.startswith("psycopg"):
        query = query.replace("?", "%s")
        returning = query.startswith("INSERT") and not query.startswith("INSERT INTO derivations")
        row = con.execute(query + (" RETURNING id" if returning else ""), args)
        return int(row.fetchone()[0]) if returning else 0
    return int(con.execute(query, args).lastrowid or 0)


def seed(eng: Engine) -> dict[str, str]:
    """A store with every kind of thing a user owns: memories of each kind and project, an archived one, a
    conflict, a derived fact, a document with chunks, graph edges from a memory and from a chunk."""
    ids = {
        "sister": eng.remember("My sister Alice lives in Lisbon.", project="family").id,
        "garage": eng.remember("The garage door code is 4321.").id,
        "router": eng.remember("To restart the router, hold the reset button for ten seconds.",
                               kind="procedural", project="home").id,
        "hike_old": eng.remember("Went hiking on Mount Tamalpais with Sam.", kind="episodic",
                                 at="2019-06-01T10:00").id,
        "hike_new": eng.remember("Went hiking on Mount Tamalpais with Sam.", kind="episodic",
                                 at=time.time() - 86_400).id,
        "report": eng.remember("The quarterly report is due on the 15th.", project="work", importance=0.9).id,
        "old_tea": eng.remember("I drink green tea every morning.").id,
        "coffee": eng.remember("I drink black coffee every morning, never tea.").id,
    }
    eng.update(ids["old_tea"], archived=True)
    now = time.time()
    with eng.mutation() as (con, touched):
        sql(con, "UPDATE memories SET conflict_with = ? WHERE uid = ?", (ids["garage"], ids["coffee"]))
        sql(con, "UPDATE memories SET conflict_with = ? WHERE uid = ?", (ids["coffee"], ids["garage"]))
        from engine.memory_rules import content_hash

        summary = sql(
            con, "INSERT INTO memories(uid, kind, text, content_hash, importance, created_at, updated_at, source) "
            "VALUES ('mem_summary00001', 'fact', 'I often hike on Mount Tamalpais.', ?, 0.7, ?, ?, 'rollup')",
            (content_hash("I often hike on Mount Tamalpais."), now, now))
        for src in (ids["hike_old"], ids["hike_new"]):
            sql(con, "INSERT INTO derivations(derived_id, source_id) SELECT ?, id FROM memories WHERE uid = ?",
                (summary, src))
        doc = sql(
            con, "INSERT INTO documents(uid, path, title, mime, content_hash, size, project, status, chunk_count, "
            "created_at, updated_at) VALUES ('doc_manual00001', '/home/me/manual.md', 'Heat pump manual', "
            "'text/markdown', 'abc123', 120, 'home', 'ready', 2, ?, ?)", (now, now))
        chunks = []
        for pos, text in enumerate(["Heat pump maintenance: clean the filter every three months.",
                                    "The outdoor unit needs half a metre of free space around it."]):
            chunks.append(sql(
                con, "INSERT INTO chunks(uid, document_id, position, text, content_hash, locator) VALUES (?,?,?,?,?,?)",
                (f"chk_manual0000{pos}", doc, pos, text, content_hash(text), f"§{pos + 1}")))
        touched.memories.add(summary)
        touched.chunks.update(chunks)
        names = {}
        for name in ("Alice", "Lisbon", "heat pump", "filter"):
            names[name] = sql(con, "INSERT INTO nodes(name, norm_name, created_at) VALUES (?,?,?)",
                              (name, name.casefold(), now))
        sql(con, "INSERT INTO edges(src, rel, dst, memory_id, created_at) SELECT ?, 'lives in', ?, id, ? "
                 "FROM memories WHERE uid = ?", (names["Alice"], names["Lisbon"], now, ids["sister"]))
        sql(con, "INSERT INTO edges(src, rel, dst, chunk_id, created_at) VALUES (?, 'has part', ?, ?, ?)",
            (names["heat pump"], names["filter"], chunks[0], now))
    ids["summary"] = "mem_summary00001"
    eng.embed_pending()
    return ids


def snapshot(eng: Engine) -> dict:
    """What a user sees: every memory's fields, the counts, and recall's ids in order for each query."""
    mems = eng.list_memories(archived=None, limit=1000)
    s = eng.stats()
    return {
        "memories": sorted((m.id, m.kind, m.text, m.project, m.importance, m.at, m.archived, m.conflict_with,
                            m.source) for m in mems),
        "counts": (s.memories, s.archived, s.conflicts, s.documents, s.chunks, s.nodes, s.edges, s.by_kind),
        "recall": {q: [h.id for h in eng.recall(q, k=8, record_access=False)] for q in QUERIES},
    }


def test_export_then_import_into_a_fresh_profile_is_identical(eng: Engine, other: Engine, tmp_path: Path):
    ids = seed(eng)
    out = tmp_path / "me.jsonl"
    r = eng.export(out)
    assert r.counts["memory"] == 9 and r.counts["document"] == 1 and r.counts["chunk"] == 2
    assert r.counts["edge"] == 2 and r.counts["node"] == 4 and r.counts["derivation"] == 2
    assert not r.encrypted and r.bytes == out.stat().st_size and oct(out.stat().st_mode & 0o777) == "0o600"

    lines = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert lines[0]["type"] == "header" and lines[0]["version"] == 1
    assert all("type" in x for x in lines)
    assert not any("embedding" in x or "vector" in x for x in lines)  # vectors are derived, never exported

    imp = other.import_(out)
    assert imp.format == "export"
    assert imp.added["memory"] == 9 and imp.added["chunk"] == 2 and imp.added["edge"] == 2
    assert imp.embedded == 11  # re-embedded from the rows
    before, after = snapshot(eng), snapshot(other)
    assert after == before
    assert after["recall"]["Which city is my sibling based in?"][0] == ids["sister"]

    # provenance survived by uid: forgetting the document in the copy removes its edge; the memory's stays
    other.forget("doc_manual00001")
    assert other.stats().edges == 1 and other.recall("heat pump filter", k=5, kind="chunk") == []
    # and the derivation: forgetting both hikes forgets the fact rolled up from them
    other.forget(ids["hike_old"])
    other.forget(ids["hike_new"])
    assert all(h.id != ids["summary"] for h in other.recall("hike Tamalpais", k=10))


def test_importing_twice_adds_nothing(eng: Engine, other: Engine, tmp_path: Path):
    seed(eng)
    out = tmp_path / "me.jsonl"
    eng.export(out)
    first = other.import_(out)
    state = snapshot(other)
    second = other.import_(out)
    assert second.added == {}
    assert second.skipped["memory"] == first.added["memory"] and second.skipped["audit"] > 0
    assert snapshot(other) == state
    # back into the store it came from: nothing new either
    assert eng.import_(out).added == {}


def test_same_content_under_another_id_is_not_duplicated(eng: Engine, other: Engine, tmp_path: Path):
    eng.remember("The garage door code is 4321.")
    eng.remember("Went hiking on Mount Tamalpais with Sam.", kind="episodic", at="2019-06-01")
    other.remember("the garage door code is 4321")  # same words, different case and punctuation
    other.remember("Went hiking on Mount Tamalpais with Sam.", kind="episodic", at="2024-03-02")
    out = tmp_path / "me.jsonl"
    eng.export(out)
    r = other.import_(out)
    assert r.added.get("memory") == 1 and r.skipped["memory"] == 1  # the earlier hike is a separate event
    assert other.stats().memories == 3


def test_plain_jsonl_from_another_tool(eng: Engine, tmp_path: Path):
    plain = tmp_path / "other-tool.jsonl"
    rows = [
        {"text": "My dentist is Dr. Okafor on Elm Street.", "kind": "fact", "project": "health"},
        {"text": "Ran the Lisbon half marathon.", "kind": "episodic", "at": "2023-03-19T09:00:00"},
        {"text": "To descale the kettle, boil vinegar and water.", "kind": "procedural", "source_app": "x"},
        {"text": "Prefers window seats on flights."},
    ]
    plain.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    r = eng.import_(plain)
    assert r.format == "plain" and r.added == {"memory": 4} and r.embedded == 4
    hits = eng.recall("Who is my dentist?", k=1)
    assert hits[0].text == rows[0]["text"] and hits[0].project == "health"
    marathon = eng.recall("half marathon", k=1, kind="episodic")[0]
    assert marathon.at is not None and marathon.at.startswith("2023-03-19")
    assert {m.kind for m in eng.list_memories(limit=10)} == {"fact", "episodic", "procedural"}
    assert all(m.source == "import" for m in eng.list_memories(limit=10))
    assert eng.import_(plain).added == {}  # again: nothing new

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "A fine line."}) + "\n" + json.dumps({"text": "x", "kind": "dream"}) + "\n")
    with pytest.raises(UserError, match="Line 2"):
        eng.import_(bad)
    bad.write_text(json.dumps({"text": "A fine line."}) + "\n" + json.dumps({"text": "x", "at": "someday"}) + "\n")
    with pytest.raises(UserError, match="Line 2"):
        eng.import_(bad)
    bad.write_text("not json at all\n")
    with pytest.raises(UserError, match="Line 1 is not valid JSON"):
        eng.import_(bad)
    assert eng.stats().memories == 4  # a bad file changes nothing


def test_encrypted_export_hides_everything_and_needs_the_passphrase(eng: Engine, other: Engine, tmp_path: Path):
    seed(eng)
    out = tmp_path / "me.enc"
    r = eng.export(out, encrypt_passphrase=PASS)
    assert r.encrypted and is_encrypted(out)
    data = out.read_bytes()
    for secret in [*SECRETS, "mem_", "doc_manual", "Alice"]:
        assert secret.encode() not in data, secret
    assert PASS.encode() not in data

    with pytest.raises(PassphraseRequired, match="encrypted"):
        other.import_(out)
    with pytest.raises(WrongPassphrase, match="passphrase does not open"):
        other.import_(out, passphrase="wrong horse")
    assert other.stats().memories == 0

    tampered = tmp_path / "tampered.enc"
    raw = bytearray(data)
    raw[-5] ^= 0x01
    tampered.write_bytes(bytes(raw))
    with pytest.raises(UserError, match="(?i)damaged|altered"):
        other.import_(tampered, passphrase=PASS)
    truncated = tmp_path / "truncated.enc"
    truncated.write_bytes(data[: len(data) - 40])
    with pytest.raises(UserError, match="(?i)truncated|damaged|altered"):
        other.import_(truncated, passphrase=PASS)
    assert other.stats().memories == 0

    imp = other.import_(out, passphrase=PASS)
    assert imp.encrypted and imp.added["memory"] == 9
    assert snapshot(other) == snapshot(eng)


def test_export_is_atomic(eng: Engine, tmp_path: Path):
    seed(eng)
    out = tmp_path / "me.jsonl"
    out.write_text("the previous export\n")

    def crash(done: int, total: int) -> None:
        raise RuntimeError("disk pulled out")

    with pytest.raises(RuntimeError):
        eng.export(out, progress=crash)
    assert out.read_text() == "the previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".me.jsonl")) == []
    with pytest.raises(UserError, match="folder"):
        eng.export(tmp_path)


def test_truncated_plain_export_is_refused(eng: Engine, other: Engine, tmp_path: Path):
    seed(eng)
    out = tmp_path / "me.jsonl"
    eng.export(out)
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(lines[:-3]), encoding="utf-8")
    with pytest.raises(UserError, match="incomplete"):
        other.import_(cut)
    assert other.stats().memories == 0
    newer = tmp_path / "newer.jsonl"
    newer.write_text(json.dumps({**json.loads(lines[0]), "version": 99}) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="newer version"):
        other.import_(newer)


@pytest.mark.sqlite_only("the CLI of a desktop profile, on its own file; a server profile's `export` and `import` "
                         "(through the HTTP API) run against a real server in tests/postgres/test_transfer_on_postgres.py")
def test_cli_export_and_import_round_trip(eng: Engine, tmp_path: Path, profile_home: Path):
    seed(eng)
    expected = snapshot(eng)
    eng.close()
    out = tmp_path / "cli.enc"
    env = {**os.environ, "PERSONAL_LLM_EXPORT_PASSPHRASE": PASS}
    p = subprocess.run([CLI, "export", str(out), "--encrypt", "--json"], capture_output=True, text=True,
                       timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["encrypted"] is True

    fresh = {**env, "PERSONAL_LLM_HOME": str(tmp_path / "fresh")}
    p = subprocess.run([CLI, "import", str(out), "--json"], capture_output=True, text=True, timeout=300, env=fresh,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["added"]["memory"] == 9
    p = subprocess.run([CLI, "import", str(out)], capture_output=True, text=True, timeout=300,
                       env={**fresh, "PERSONAL_LLM_EXPORT_PASSPHRASE": "nope"}, stdin=subprocess.DEVNULL)
    assert p.returncode == 1 and p.stderr.startswith("error: ") and "passphrase" in p.stderr
    assert "Traceback" not in p.stderr
    p = subprocess.run([CLI, "export", str(tmp_path / "x.enc"), "--encrypt"], capture_output=True, text=True,
                       timeout=300, env={k: v for k, v in env.items() if k != "PERSONAL_LLM_EXPORT_PASSPHRASE"},
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 1 and "PERSONAL_LLM_EXPORT_PASSPHRASE" in p.stderr
    assert not (tmp_path / "x.enc").exists()

    with Engine.open(tmp_path / "fresh", embedder=eng.embedder) as copy:
        assert snapshot(copy) == expected


def test_http_export_and_import(live, other: Engine, tmp_path: Path):  # noqa: F811 (the fixture imported above)
    """GET /export streams what `export` writes (from one snapshot); POST /import merges a file's bytes."""
    seed(live.eng)
    r = live.client.get("/export")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in r.content.decode("utf-8").splitlines()]
    header, records = lines[0], lines[1:]
    assert header["type"] == "header" and len(records) == sum(header["counts"].values())
    assert header["counts"]["memory"] == 9 and header["counts"]["chunk"] == 2 and header["counts"]["edge"] == 2

    imp = other.import_upload(r.content, "me.jsonl")
    assert imp.added["memory"] == 9 and imp.embedded == 11
    assert snapshot(other) == snapshot(live.eng)

    again = live.client.post("/import", files={"file": ("me.jsonl", r.content)})
    assert again.status_code == 200, again.text
    assert again.json()["added"] == {} and again.json()["skipped"]["memory"] == 9
    plain = json.dumps({"text": "Prefers the aisle seat on night trains.", "kind": "fact"}) + "\n"
    added = live.client.post("/import", files={"file": ("plain.jsonl", plain.encode())}).json()
    assert added["added"] == {"memory": 1} and added["format"] == "plain"
    assert live.eng.recall("night train seat", k=1)[0].text == "Prefers the aisle seat on night trains."
    held = snapshot(live.eng)

    encrypted = tmp_path / "me.enc"
    other.export(encrypted, encrypt_passphrase=PASS)
    refused = live.client.post("/import", files={"file": ("me.enc", encrypted.read_bytes())})
    assert refused.status_code == 400 and "passphrase" in refused.json()["detail"]
    wrong = live.client.post("/import", files={"file": ("me.enc", encrypted.read_bytes())},
                             data={"passphrase": "wrong horse"})
    assert wrong.status_code == 400
    bad = live.client.post("/import", files={"file": ("bad.jsonl", b'{"text": "x", "kind": "dream"}\n')})
    assert bad.status_code == 400 and "Line 1" in bad.json()["detail"]
    assert snapshot(live.eng) == held  # the refused files changed nothing
    opened = live.client.post("/import", files={"file": ("me.enc", encrypted.read_bytes())}, data={"passphrase": PASS})
    assert opened.status_code == 200 and opened.json()["encrypted"] is True
    assert opened.json()["skipped"]["memory"] == 9 and "memory" not in opened.json()["added"]
