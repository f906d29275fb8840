"""Export and import on a server's database: each user's export holds their rows alone, an import writes only
the importing user's rows (never matching, changing or counting another user's), and an export moves between
a server and a desktop profile both ways. (tests/integration/test_transfer.py runs the whole round trip on
both backends.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import Engine, users
from engine.config import Settings
from engine.store.postgres.database import Database

ALICE = [
    "The garage door code is 4321.",
    "My sister Alice lives in Lisbon.",
    "To bleed the radiators, start with the one nearest the boiler.",
]
BOB = ["The garage door code is 4321.", "Bob's vault combination is 8812, kept from everyone."]
TABLES = ("memories", "documents", "chunks", "conversations", "messages", "nodes", "edges", "audit", "tallies",
          "memory_vectors", "chunk_vectors")


@pytest.fixture
def engines(pg_db: Database, tmp_path: Path, embedder) -> Iterator[dict[str, Engine]]:
    out = {}
    for name in ("alice", "bob", "carol"):
        uid = pg_db.add_user(name, users.token_hash(users.make_token()))
        out[name] = Engine.for_user(pg_db, uid, name, home=tmp_path / "server", settings=Settings(), embedder=embedder)
    yield out
    for e in out.values():
        e.close()


def rows_of(eng: Engine) -> dict[str, list[tuple]]:
    """Every row of the user's tables, as the database holds them (times, counts, flags and all)."""
    with eng.store.read() as con:
        return {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in TABLES}


def memory_rows(eng: Engine) -> int:
    """The user's memories, the app's own events (a document added) among them: what an export holds."""
    with eng.store.read() as con:
        return int(con.execute("SELECT count(*) FROM memories").fetchone()[0])


def fill(eng: Engine, texts: list[str], doc: str, tmp_path: Path) -> None:
    for i, text in enumerate(texts):
        eng.remember(text, kind="episodic" if i == 2 else "fact", project="home" if i else None)
    eng.ingest_text(doc, f"notes of {eng.store.user_id}", project="home")
    eng.embed_pending()


def test_an_import_writes_only_its_users_rows_and_an_export_holds_only_its_users(engines, tmp_path: Path):
    alice, bob, carol = engines["alice"], engines["bob"], engines["carol"]
    fill(alice, ALICE, "The heat pump's filter is cleaned every three months.", tmp_path)
    fill(bob, BOB, "Bob's private diary: the spare key is under the third flowerpot.", tmp_path)

    out = tmp_path / "alice.jsonl"
    alice.export(out)
    text = out.read_text(encoding="utf-8")
    assert "Lisbon" in text and "heat pump" in text
    bob_uids = [m.id for m in bob.list_memories(limit=50)]
    for secret in ("8812", "flowerpot", *bob_uids):
        assert secret not in text  # nothing of Bob's rows, not even an id
    n = memory_rows(alice)
    assert n > len(ALICE) and json.loads(text.splitlines()[0])["counts"]["memory"] == n

    before = rows_of(alice)
    imp = bob.import_(out)
    # Alice's garage code is Bob's too (his own row, another uid): his is kept, hers skipped; the rest is new
    assert imp.added["memory"] == n - 1 and imp.skipped["memory"] == 1
    assert imp.added["document"] == 1 and imp.added["chunk"] >= 1 and imp.embedded >= len(ALICE)
    assert rows_of(alice) == before  # not one of Alice's rows read-and-changed, added or counted
    assert [h.text for h in bob.recall("Which city does my sister live in?", k=1)] == [ALICE[1]]

    # the same uids as Alice's rows are another user's rows: a third user gets everything anew
    third = carol.import_(out)
    assert third.added["memory"] == n and "memory" not in third.skipped
    assert rows_of(alice) == before

    # and Alice's own export back into her store adds nothing, whatever Bob and Carol hold
    again = alice.import_(out)
    assert again.added == {} and again.skipped["memory"] == n
    theirs = tmp_path / "bob.jsonl"
    bob.export(theirs)
    assert "8812" in theirs.read_text(encoding="utf-8")
    assert memory_rows(alice) == n and memory_rows(bob) == memory_rows(carol) + len(BOB)
    assert alice.recall("vault combination", k=3) == [] and alice.recall("flowerpot spare key", k=3) == []


def test_an_export_moves_between_a_server_and_a_desktop(engines, tmp_path: Path, embedder):
    alice = engines["alice"]
    fill(alice, ALICE, "The heat pump's filter is cleaned every three months.", tmp_path)
    alice.update(alice.list_memories(limit=10)[0].id, archived=True)
    server_file = tmp_path / "server.jsonl"
    alice.export(server_file, encrypt_passphrase="a long passphrase")

    def fields(eng: Engine) -> list[tuple]:
        return sorted((m.id, m.kind, m.text, m.project, m.importance, m.at, m.created_at, m.archived, m.source)
                      for m in eng.list_memories(archived=None, limit=100))

    with Engine.open(tmp_path / "desktop", embedder=embedder) as desk:
        imp = desk.import_(server_file, passphrase="a long passphrase")
        assert imp.added["memory"] == memory_rows(alice) and imp.added["document"] == 1
        assert fields(desk) == fields(alice)
        assert desk.stats().chunks == alice.stats().chunks
        desk.remember("The desktop alone knows the bike lock is 0707.")
        desk_file = tmp_path / "desktop.jsonl"
        desk.export(desk_file)
        expected = fields(desk)
    back = engines["bob"].import_(desk_file)
    assert back.added["memory"] == memory_rows(alice) + 1
    assert fields(engines["bob"]) == expected
    assert [h.text for h in engines["bob"].recall("bike lock", k=1)] == ["The desktop alone knows the bike lock is 0707."]


def cli(*args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=300,
                       env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
    if check:
        assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    return p


def test_a_server_profile_exports_and_imports_through_the_api(served, profile_home: Path, tmp_path: Path):
    """`personal-llm export` and `import` on profiles connected to a real server: the export is the account's
    (encrypted on the device), the import goes into the importing account alone."""
    alice, bob = served.client(served.alice), served.client(served.bob)
    for text in ALICE:
        assert alice.post("/memory/remember", json={"text": text, "project": "home"}).status_code == 200
    assert alice.post("/ingest/upload", files={"file": ("boiler.md", b"# Boiler\n\nThe boiler's service code is 77.")},
                      ).status_code == 200
    assert bob.post("/memory/remember", json={"text": BOB[1]}).status_code == 200
    cli("connect", served.url, "--token", served.alice, "--profile", "alice")
    cli("connect", served.url, "--token", served.bob, "--profile", "bob")

    out = tmp_path / "alice.enc"
    secret = {"PERSONAL_LLM_EXPORT_PASSPHRASE": "a long passphrase"}
    done = json.loads(cli("--profile", "alice", "export", str(out), "--encrypt", "--json", env=secret).stdout)
    assert done["encrypted"] and done["counts"]["memory"] >= len(ALICE) and done["counts"]["chunk"] >= 1
    data = out.read_bytes()
    assert b"Lisbon" not in data and b"boiler" not in data  # encrypted on the device
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    before = alice.get("/export").content

    imported = json.loads(cli("--profile", "bob", "import", str(out), "--json", env=secret).stdout)
    assert imported["encrypted"] and imported["added"]["memory"] == done["counts"]["memory"]
    assert imported["added"]["document"] == 1 and imported["embedded"] >= len(ALICE)
    hits = bob.get("/memory/recall", params={"q": "Which city does my sister live in?", "k": 1}).json()
    assert [h["text"] for h in hits] == [ALICE[1]]
    assert bob.get("/memory/recall", params={"q": "boiler service code", "k": 3}).json()

    after = alice.get("/export").content  # Alice's account: the same records (but the export just logged)
    strip = lambda raw: [x for x in raw.decode().splitlines()[1:] if '"type":"audit"' not in x.replace(" ", "")]  # noqa: E731
    assert strip(after) == strip(before)
    assert b"8812" not in after
    again = json.loads(cli("--profile", "bob", "import", str(out), "--json", env=secret).stdout)
    assert "memory" not in again["added"] and again["skipped"]["memory"] == done["counts"]["memory"]

    wrong = cli("--profile", "bob", "import", str(out), env={"PERSONAL_LLM_EXPORT_PASSPHRASE": "nope"}, check=False)
    assert wrong.returncode == 1 and "passphrase" in wrong.stderr
    plain = tmp_path / "bob.jsonl"
    mine = json.loads(cli("--profile", "bob", "export", str(plain), "--json").stdout)
    assert "8812" in plain.read_text(encoding="utf-8") and mine["counts"]["memory"] == imported["added"]["memory"] + 1
