"""The `personal-llm server` contract, run as an operator would: the installed command against a real
PostgreSQL (its database given by --database or PERSONAL_LLM_DATABASE), and its errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg

from tests.pg_server import LocalServer

CLI = shutil.which("personal-llm", path=str(Path(sys.executable).parent)) or "personal-llm"
PASSWORD = "s3cret-Pa55"


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "server", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def ok_json(*args: str, env: dict | None = None):
    p = run(*args, "--json", env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def with_password(url: str) -> str:
    """The same database, the URL carrying a password (the test server trusts its socket: it is ignored)."""
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@")


def test_the_server_contract_end_to_end(pg_empty_url: str, profile_home: Path):
    url = with_password(pg_empty_url)
    first = ok_json("init", "--database", url)
    assert first["schema_version"] >= 1 and first["migrations_applied"] == first["schema_version"]
    assert PASSWORD not in json.dumps(first) and first["database"].startswith("postgresql://postgres@")
    again = ok_json("init", "--database", url)
    assert again["migrations_applied"] == 0 and again["schema_version"] == first["schema_version"]

    env = {"PERSONAL_LLM_DATABASE": url}
    alice = ok_json("add-user", "alice", env=env)
    assert set(alice) == {"user", "token"} and alice["user"] == "alice" and alice["token"].startswith("pllm_")
    human = run("add-user", "bob", env=env)
    assert human.returncode == 0 and "shown only this once" in human.stdout
    bob_token = human.stdout.strip().splitlines()[-1]
    assert bob_token.startswith("pllm_") and bob_token != alice["token"]
    listed = ok_json("users", env=env)
    assert [(u["user"], u["tokens"], u["removed"]) for u in listed] == [("alice", 1, False), ("bob", 1, False)]
    assert all(alice["token"] not in json.dumps(u) for u in listed)

    duplicate = run("add-user", "alice", env=env)
    assert duplicate.returncode == 1 and "already a user called 'alice'" in duplicate.stderr
    unknown = run("remove-user", "carol", env=env)
    assert unknown.returncode == 1 and "no user called 'carol'" in unknown.stderr

    removed = ok_json("remove-user", "bob", env=env)
    assert removed == {"user": "bob", "forgotten": False, "rows": {}}
    forgotten = ok_json("remove-user", "alice", "--forget", env=env)
    assert forgotten["forgotten"] and all(n == 0 for n in forgotten["rows"].values())
    assert [u["user"] for u in ok_json("users", env=env)] == ["bob"]
    with psycopg.connect(pg_empty_url) as con:
        assert con.execute("SELECT count(*) FROM personal_llm.tokens").fetchone()[0] == 0
    for p in (duplicate, unknown, human):
        assert PASSWORD not in p.stdout + p.stderr
    assert_no_password_in_logs(profile_home)


def assert_no_password_in_logs(home: Path) -> None:
    for f in [p for p in home.rglob("*") if p.is_file()] if home.exists() else []:
        assert PASSWORD.encode() not in f.read_bytes(), f


def test_clear_errors_that_never_show_the_password(pg_server: LocalServer, profile_home: Path):
    nowhere = LocalServer()  # a folder with no server in it
    try:
        cases = {
            nowhere.url("db", password=PASSWORD): "Cannot connect to the PostgreSQL database postgresql://postgres@",
            f"postgresql://u:{PASSWORD}@[::1": "Not a readable PostgreSQL URL",
            f"mysql://u:{PASSWORD}@localhost/db": "Not a PostgreSQL URL",
            pg_server.url("no_such_db", password=PASSWORD): "There is no PostgreSQL database",
        }
        for url, message in cases.items():
            p = run("init", "--database", url)
            assert p.returncode == 1 and message in p.stderr, p.stderr
            assert PASSWORD not in p.stdout + p.stderr and "Traceback" not in p.stderr
        never_set_up = pg_server.url("postgres", password=PASSWORD)
        p = run("users", "--database", never_set_up)
        assert p.returncode == 1 and "server init" in p.stderr and PASSWORD not in p.stderr
        p = run("users", env={"PERSONAL_LLM_DATABASE": ""})
        assert p.returncode == 1 and "PERSONAL_LLM_DATABASE" in p.stderr
    finally:
        nowhere.stop()
    assert_no_password_in_logs(profile_home)
