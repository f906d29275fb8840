"""A profile that lives on a server, used from the CLI as a person would: `connect` (plain HTTP on loopback,
and TLS with a real self-signed certificate pinned by its fingerprint), the commands through the server, a
revoked token, and the outbox: writes made while the server is down arrive once each, in order, also when the
server is killed in the middle of their delivery. A real server process on a real PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from engine import users
from engine.remote import fingerprint_of
from tests.postgres.serving import Server


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=180,
                       env=os.environ.copy())
    if check:
        assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    return p


def cli_json(*args: str):
    return json.loads(cli(*args, "--json").stdout)


@pytest.fixture
def served(pg_url: str, tmp_path: Path, profile_home: Path) -> Iterator[tuple[Server, str]]:
    token = users.add(pg_url, "alice")
    server = Server(pg_url, tmp_path / "server-home").start()
    try:
        yield server, token
    finally:
        server.kill(signal.SIGTERM)


def server_memories(pg_url: str) -> list[tuple[str, str, float]]:
    """(uid, text, created_at) of every memory in the database, in the order they were stored (read as the
    superuser, which row-level security does not hold)."""
    with psycopg.connect(pg_url) as con:
        return [(r[0], r[1], r[2]) for r in con.execute(
            "SELECT uid, text, created_at FROM personal_llm.memories ORDER BY id")]


def keychain(account: str) -> str | None:
    import keyring.core

    keyring.core._keyring_backend = None  # read the file again
    return keyring.get_password("personal-llm", account)


def files_hold(folder: Path, secret: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_connect_use_revoke_disconnect(served, pg_url: str, profile_home: Path):
    server, token = served
    bad = cli("connect", server.url, "--token", "pllm_not-a-token", "--profile", "laptop", check=False)
    assert bad.returncode == 1 and "refused this profile's token" in bad.stderr
    done = cli_json("connect", server.url, "--token", token, "--profile", "laptop")
    assert done["connected"] and done["url"] == server.url and done["fingerprint"] is None

    remembered = cli_json("--profile", "laptop", "remember", "The allotment's water tap key hangs in the shed.")
    assert remembered["id"].startswith("mem_") and "waiting" not in remembered
    assert [m[0] for m in server_memories(pg_url)] == [remembered["id"]]  # made here, kept as the server's id
    hits = cli_json("--profile", "laptop", "recall", "where is the key for the water tap")
    assert hits[0]["id"] == remembered["id"]
    assert cli_json("--profile", "laptop", "get", remembered["id"])["text"].startswith("The allotment's")
    assert [m["id"] for m in cli_json("--profile", "laptop", "list")] == [remembered["id"]]
    assert cli_json("--profile", "laptop", "stats")["memories"] == 1
    cli("--profile", "laptop", "update", remembered["id"], "--text", "The water tap key hangs in the blue shed.")
    assert server_memories(pg_url)[0][1] == "The water tap key hangs in the blue shed."
    assert cli("--profile", "laptop", "remember", "x" * 10, "--importance", "7", check=False).returncode != 0

    # the local default profile is untouched: no store was made for the server profile either
    assert not (profile_home / "memory.db").exists()
    laptop = profile_home / "profiles" / "laptop"
    assert not (laptop / "memory.db").exists()
    assert files_hold(profile_home, token) == []  # not in the profile's files, its settings or its logs
    account = "server-token-" + json.loads((laptop / "connection.json").read_text())["id"]
    assert keychain(account) == token

    users.remove(pg_url, "alice", forget=False)  # revoked: refused within the server's 10 s
    deadline = time.monotonic() + 40
    while True:
        p = cli("--profile", "laptop", "remember", "Written after the token was revoked.", check=False)
        if p.returncode != 0:
            break
        assert time.monotonic() < deadline
    assert "refused this profile's token" in p.stderr and "kept in the outbox" in p.stderr
    waiting = cli_json("--profile", "laptop", "outbox")
    assert [w["text"] for w in waiting] == ["Written after the token was revoked."]
    refused = cli("--profile", "laptop", "disconnect", check=False)
    assert refused.returncode == 1 and "wait to be sent" in refused.stderr
    assert cli_json("--profile", "laptop", "disconnect", "--discard") == {"disconnected": True, "url": server.url,
                                                                         "dropped": 1}
    assert keychain(account) is None  # the token left the keychain
    assert cli_json("--profile", "laptop", "recall", "water tap") == []  # a local profile of its own now
    assert cli("connect", "http://example.org:8765", "--token", token, check=False).stderr.count("TLS") == 1


def self_signed(folder: Path) -> tuple[Path, Path, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "home-server")])
    now = dt.datetime.now(dt.UTC)
    import ipaddress

    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file, cert.public_bytes(serialization.Encoding.DER)


def test_a_self_signed_server_is_pinned_by_its_fingerprint(pg_url: str, tmp_path: Path, profile_home: Path):
    token = users.add(pg_url, "alice")
    cert, key, der = self_signed(tmp_path)
    (tmp_path / "other").mkdir()
    cert2, key2, other = self_signed(tmp_path / "other")
    server = Server(pg_url, tmp_path / "server-home", tls=(cert, key)).start()
    try:
        shown = cli("connect", server.url, "--token", token, check=False)
        assert shown.returncode == 1 and "not signed by an authority" in shown.stderr
        assert fingerprint_of(der) in shown.stderr
        wrong = cli("connect", server.url, "--token", token, "--fingerprint", fingerprint_of(other), check=False)
        assert wrong.returncode == 1 and "not the" in wrong.stderr and not (profile_home / "connection.json").exists()
        typed = fingerprint_of(der).replace(":", "").lower()
        done = cli_json("connect", server.url, "--token", token, "--fingerprint", typed)
        assert done["fingerprint"] == fingerprint_of(der)
        uid = cli_json("remember", "The router's admin page is on port 8443.")["id"]
        assert cli_json("recall", "router admin port")[0]["id"] == uid
    finally:
        server.kill(signal.SIGTERM)
    # another server at the same address, with another certificate: refused, nothing sent to it
    impostor = Server(pg_url, tmp_path / "server-home", tls=(cert2, key2))
    impostor.port, impostor.url = server.port, server.url
    impostor.start()
    try:
        p = cli("recall", "router", check=False)
        assert p.returncode == 1 and "certificate" in p.stderr
    finally:
        impostor.kill(signal.SIGTERM)


def _offline_writes(n: int) -> list[tuple[str, str]]:
    """`n` captures and edits from the CLI while the server is down: (memory id, the text it should end with)."""
    made: list[tuple[str, str]] = []
    for i in range(n):
        if i % 5 == 4:  # every fifth: an edit of the capture before it (itself still in the outbox)
            uid, _ = made[-1]
            text = f"Edited note {i}: the parcel locker number is {1000 + i}."
            out = cli_json("update", uid, "--text", text)
            assert out == {"id": uid, "waiting": True}
            made[-1] = (uid, text)
        else:
            text = f"Captured note {i}: the meeting room {i} has the projector remote number {7000 + i}."
            out = cli_json("remember", text, "--kind", "episodic")
            assert out["waiting"] is True
            made.append((out["id"], text))
    return made


def _check_arrived(pg_url: str, made: list[tuple[str, str]]) -> None:
    stored = server_memories(pg_url)
    assert [(uid, text) for uid, text, _ in stored] == made  # each once, in the order made, edits applied
    times = [t for _, _, t in stored]
    assert times == sorted(times)


def test_writes_made_offline_arrive_once_in_order(served, pg_url: str, profile_home: Path):
    server, token = served
    cli("connect", server.url, "--token", token)
    server.kill()
    made = _offline_writes(50)
    assert len(made) == 40
    assert len(cli_json("outbox")) == 50
    p = cli("recall", "projector remote", check=False)
    assert p.returncode == 1 and "needs the server" in p.stderr and "50 writes wait" in p.stderr
    assert files_hold(profile_home, "projector remote") == []  # the outbox is encrypted
    server.start()
    hits = cli_json("recall", "projector remote number of meeting room 3")  # sends the outbox first
    assert cli_json("outbox") == []
    _check_arrived(pg_url, made)
    deadline = time.monotonic() + 60  # on a busy machine the server may still be embedding what arrived
    while not hits and time.monotonic() < deadline:
        time.sleep(2)
        hits = cli_json("recall", "projector remote number of meeting room 3")
    assert hits and {h["id"] for h in hits} <= {uid for uid, _ in made}


def test_a_server_killed_during_delivery_loses_and_doubles_nothing(served, pg_url: str, profile_home: Path):
    server, token = served
    cli("connect", server.url, "--token", token)
    server.kill()
    made = _offline_writes(50)
    server.start()
    sender = subprocess.Popen([sys.executable, "-m", "engine.cli", "outbox", "--send", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    deadline = time.monotonic() + 120
    while len(server_memories(pg_url)) < 8:
        assert time.monotonic() < deadline and sender.poll() is None
        time.sleep(0.02)
    server.kill()  # kill -9 in the middle of the delivery
    _, err = sender.communicate(timeout=120)
    assert sender.returncode == 1 and ("cannot be reached" in err or "did not answer" in err), err
    arrived = len(server_memories(pg_url))
    assert 8 <= arrived < 40
    left = cli_json("outbox")
    assert 0 < len(left) < 50
    server.start()
    cli("outbox", "--send")
    assert cli_json("outbox") == []
    _check_arrived(pg_url, made)


def test_without_a_keychain_a_passphrase_protects_the_token_and_the_outbox(served, pg_url: str, profile_home: Path,
                                                                           monkeypatch):
    server, token = served
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    monkeypatch.delenv("PERSONAL_LLM_PASSPHRASE", raising=False)
    refused = cli("connect", server.url, "--token", token, "--profile", "laptop", check=False)
    assert refused.returncode == 1 and "No keychain" in refused.stderr and "PERSONAL_LLM_PASSPHRASE" in refused.stderr
    laptop = profile_home / "profiles" / "laptop"
    assert not (laptop / "connection.json").exists()
    monkeypatch.setenv("PERSONAL_LLM_PASSPHRASE", "correct horse battery")
    assert cli_json("connect", server.url, "--token", token, "--profile", "laptop")["connected"]
    remembered = cli_json("--profile", "laptop", "remember", "The gate code is 1984")
    assert [m[0] for m in server_memories(pg_url)] == [remembered["id"]]
    server.stop()
    assert cli_json("--profile", "laptop", "remember", "The alarm code is 2468")["waiting"]
    assert files_hold(profile_home, token) == [] and files_hold(profile_home, "2468") == []  # never in the clear

    monkeypatch.setenv("PERSONAL_LLM_PASSPHRASE", "not the passphrase")
    wrong = cli("--profile", "laptop", "outbox", check=False)
    assert wrong.returncode == 1 and "does not unlock the server profile" in wrong.stderr
    monkeypatch.delenv("PERSONAL_LLM_PASSPHRASE")
    none = cli("--profile", "laptop", "outbox", check=False)
    assert none.returncode == 1 and "PERSONAL_LLM_PASSPHRASE" in none.stderr
    monkeypatch.setenv("PERSONAL_LLM_PASSPHRASE", "correct horse battery")
    assert [w["text"] for w in cli_json("--profile", "laptop", "outbox")] == ["The alarm code is 2468"]
    server.start()
    cli("--profile", "laptop", "outbox", "--send")
    assert [m[1] for m in server_memories(pg_url)] == ["The gate code is 1984", "The alarm code is 2468"]


def test_the_outbox_is_opened_once_per_process_and_shared_by_threads(served, pg_url: str, profile_home: Path,
                                                                     monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from engine import check_server, connect_profile, open_profile
    from engine.store.sqlite import outbox

    server, token = served
    home = profile_home / "profiles" / "laptop"
    home.mkdir(parents=True)
    connect_profile(home, check_server(server.url, token), token)
    opened: list[Path] = []
    real = outbox.OutboxFile.__init__

    def counted(self, path, key_pragma):  # noqa: ANN001 - the real file, opened and counted
        opened.append(path)
        real(self, path, key_pragma)

    monkeypatch.setattr(outbox.OutboxFile, "__init__", counted)
    app = open_profile(home, actor="desktop")
    try:
        with ThreadPoolExecutor(4) as pool:  # captures and the status bar's count from several threads at once
            made = list(pool.map(lambda i: app.remember(f"Note {i} about the allotment"), range(12)))
            assert all(pool.map(lambda _i: app.connection().waiting == 0, range(12)))
        assert len(opened) == 1  # it was opened three or four times per capture
        assert sorted(m[0] for m in server_memories(pg_url)) == sorted(r.id for r in made)
        server.stop()
        waiting = [app.remember(f"Offline note {i}") for i in range(3)]
        assert app.connection().waiting == 3 and len(opened) == 1
        server.start()
        app.send_outbox()
        assert {r.id for r in waiting} <= {m[0] for m in server_memories(pg_url)}
    finally:
        app.close()


def test_conflicts_a_passage_and_agents_from_a_server_profile_on_the_command_line(pg_url: str, tmp_path: Path,
                                                                                  profile_home: Path):
    """A server profile's CLI reads the account's conflicts and resolves one, shows a passage, lists the
    server's agents and runs one there (its steps and answer printed here)."""
    from engine.config import LLMSettings, Settings, save_settings
    from engine.memory_rules import new_uid
    from tests.ollama_server import OllamaTestServer, Reply

    token = users.add(pg_url, "alice")
    home = tmp_path / "server-home"
    home.mkdir()
    older, newer = new_uid("mem"), new_uid("mem")
    said = {"type": "memory", "kind": "fact", "importance": 0.5, "created_at": "2026-01-02T03:04:05+00:00",
            "updated_at": "2026-01-02T03:04:05+00:00"}
    with OllamaTestServer(models=["llama3.2"]) as llm:
        save_settings(Settings(llm=LLMSettings(host=llm.url, model="llama3.2")), home)
        server = Server(pg_url, home).start()
        try:
            with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
                c.post("/transfer/records", json={"records": [
                    {**said, "uid": older, "text": "The boiler code is 4471.", "conflict_with": newer},
                    {**said, "uid": newer, "text": "The boiler code is 4472.", "conflict_with": older}]}
                       ).raise_for_status()
                [doc] = c.post("/ingest/upload", files={"file": ("gate.md", b"The gate opens with code 1984.")}).json()
                [passage] = c.get(f"/documents/{doc['document_id']}/passages").json()
            cli("connect", server.url, "--token", token, "--profile", "desk")

            [pair] = cli_json("--profile", "desk", "conflicts")
            assert {pair["a"]["id"], pair["b"]["id"]} == {older, newer}
            assert cli_json("--profile", "desk", "resolve", older, "--keep", newer) == {"kept": [newer],
                                                                                        "archived": [older]}
            assert cli_json("--profile", "desk", "conflicts") == []
            shown = cli_json("--profile", "desk", "get", passage["id"])
            assert shown["text"] == "The gate opens with code 1984." and shown["document_id"] == doc["document_id"]
            shown = cli_json("--profile", "desk", "get", doc["document_id"])  # a document, as recall names it
            assert (shown["id"], shown["title"], shown["chunks"]) == (doc["document_id"], "gate.md", 1)
            printed = cli("--profile", "desk", "get", doc["document_id"]).stdout
            assert doc["document_id"] in printed and "1 passage" in printed
            missing = cli("--profile", "desk", "get", "doc_0000000000000000", check=False)
            assert missing.returncode == 1 and "No document with id doc_0000000000000000" in missing.stderr

            assert {"Research", "Organiser"} <= {a["name"] for a in cli_json("--profile", "desk", "agent", "list")}
            llm.script(Reply(tool_calls=[{"name": "search_memory", "arguments": {"query": "boiler code"}}]),
                       Reply(text="The boiler code is 4472 [1]."))
            ran = cli("--profile", "desk", "agent", "run", "What is the boiler code?")
            assert "search_memory" in ran.stdout and "The boiler code is 4472 [1]." in ran.stdout, ran.stdout
            missing = cli("--profile", "desk", "agent", "show", "Nobody", check=False)
            assert missing.returncode == 1 and "no agent called 'Nobody' on the server" in missing.stderr
        finally:
            server.kill(signal.SIGTERM)


def audit_actors(pg_url: str, action: str = "remember") -> dict[str, str]:
    """{target: actor} of the account's log entries of this action (read as the superuser)."""
    with psycopg.connect(pg_url) as con:
        return {r[0]: r[1] for r in con.execute(
            "SELECT target, actor FROM personal_llm.audit WHERE action = %s ORDER BY id", (action,))}


def test_the_servers_activity_log_names_the_program_each_write_came_from(served, pg_url: str, profile_home: Path):
    """As on a local profile, the account's log says who wrote: the command line, the app; a write kept in
    the outbox keeps the app's name however late and by whichever program it is delivered. The name is only a
    label: one the server does not know is the HTTP API, as is a client that gives none."""
    from engine import open_profile

    server, token = served
    cli("connect", server.url, "--token", token, "--profile", "laptop")
    by_cli = cli_json("--profile", "laptop", "remember", "The bike lock code is 3141")["id"]
    app = open_profile(profile_home / "profiles" / "laptop", actor="desktop")
    try:
        by_app = app.remember("The boiler was serviced in May").id
        edited = "The boiler was serviced in June"
        app.update(by_app, text=edited)
        server.stop()
        kept = app.remember("The plumber's number is 555 0199").id  # waits in the outbox
        assert kept in app.waiting
    finally:
        app.close()
    server.start()
    cli("--profile", "laptop", "outbox", "--send")  # the command line delivers what the app wrote
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}) as c:
        by_api = c.post("/memory/remember", json={"text": "The gate code is 1984"}).json()["id"]
        claimed = c.post("/memory/remember", json={"text": "The shed key is on the hook"},
                         headers={"X-Personal-LLM-Door": "consolidation"}).json()["id"]
    assert audit_actors(pg_url) == {by_cli: "cli", by_app: "desktop", kept: "desktop", by_api: "api",
                                    claimed: "api"}
    assert audit_actors(pg_url, "update") == {by_app: "desktop"}
    assert cli_json("--profile", "laptop", "forget", by_cli)  # the command line's forget, said so
    assert audit_actors(pg_url, "forget") == {by_cli: "cli"}


def test_tidying_up_a_server_profile_finds_a_contradiction_there(pg_url: str, tmp_path: Path, profile_home: Path):
    """`personal-llm consolidate` (and the app's Tidy up, the same method) on a server profile tidies the account
    up on the server, with the server's language model: two facts that contradict each other are flagged and
    listed by `conflicts`, as on a local profile."""
    from engine import open_profile
    from engine.config import LLMSettings, Settings, save_settings
    from tests.ollama_server import OllamaTestServer, Reply

    def model(request: dict) -> Reply:
        title, prompt = request["format"]["title"], request["messages"][-1]["content"]
        if title == "TripleExtraction":
            return Reply(json={"triples": [{"subject": "the boiler", "relation": "has code", "object": code}
                                           for code in ("4471", "4472") if f"code is {code}" in prompt]})
        if title == "ContradictionVerdict":
            return Reply(json={"contradicts": "4471" in prompt and "4472" in prompt})
        return Reply(json={"facts": []})

    token = users.add(pg_url, "alice")
    home = tmp_path / "server-home"
    home.mkdir()
    with OllamaTestServer(models=["llama3.2"], reply_fn=model) as llm:
        save_settings(Settings(llm=LLMSettings(host=llm.url, model="llama3.2")), home)
        server = Server(pg_url, home).start()
        try:
            cli("connect", server.url, "--token", token, "--profile", "desk")
            older = cli_json("--profile", "desk", "remember", "The boiler code is 4471.")["id"]
            newer = cli_json("--profile", "desk", "remember", "The boiler code is 4472.")["id"]
            assert cli_json("--profile", "desk", "conflicts") == []

            report = cli_json("--profile", "desk", "consolidate")
            assert report["conflicts"] == [[older, newer]]
            [pair] = cli_json("--profile", "desk", "conflicts")
            assert (pair["a"]["id"], pair["b"]["id"]) == (older, newer)
            assert cli_json("--profile", "desk", "get", older)["conflict_with"] == newer
            app = open_profile(profile_home / "profiles" / "desk", actor="desktop")  # the app's Tidy up now
            try:
                assert app.consolidate().conflicts == [] and len(app.conflicts()) == 1  # judged once
                assert "tidy" not in app.unavailable()
            finally:
                app.close()
        finally:
            server.kill(signal.SIGTERM)


def test_mcp_on_a_server_profile_uses_the_server(served, pg_url: str, profile_home: Path):
    """`personal-llm mcp` on a profile that lives on a server remembers and recalls there (it made a store of
    its own in the profile's folder, which nothing else read), and the server's log names MCP as the door."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    server, token = served
    cli("connect", server.url, "--token", token, "--profile", "desk")
    desk = profile_home / "profiles" / "desk"
    env = {k: v for k, v in os.environ.items() if k != "OLLAMA_HOST"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "engine.cli", "--profile", "desk", "mcp"],
                                   env=env, cwd=str(Path(__file__).resolve().parents[2]))

    async def scenario() -> dict:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            kept = await session.call_tool("remember", {"text": "The allotment key is under the third stone."})
            assert not kept.is_error, kept.content
            found = await session.call_tool("recall", {"query": "allotment key", "k": 3})
            assert not found.is_error, found.content
            return {"kept": kept.structured_content, "found": found.structured_content}

    out = anyio.run(scenario)
    uid = out["kept"]["id"]
    assert [m[:2] for m in server_memories(pg_url)] == [(uid, "The allotment key is under the third stone.")]
    assert [h["id"] for h in out["found"]["hits"]] == [uid]
    assert audit_actors(pg_url) == {uid: "mcp"}
    assert not (desk / "memory.db").exists()
