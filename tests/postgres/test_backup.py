"""A backup of a server's database is `pg_dump`; a restore on another PostgreSQL is the roles made first,
then `pg_restore` (docs/server.md, "Backups"): the users' tokens work there and their memories are found."""

from __future__ import annotations

import subprocess
from pathlib import Path

from engine import Engine, users
from engine.config import Settings
from engine.store.postgres.database import Database
from engine.store.postgres.migrations import ROLES
from tests.pg_server import LocalServer


def test_pg_dump_and_pg_restore_keep_users_tokens_and_memories(pg_server: LocalServer, pg_url: str, embedder,
                                                                tmp_path: Path):
    token = users.add(pg_url, "alice")
    with Database(pg_url) as db:
        alice = users.authenticate(db, token)
        assert alice is not None
        eng = Engine.for_user(db, alice, "alice", home=tmp_path / "a", settings=Settings(), embedder=embedder)
        kept = eng.remember("The spare key to the shed hangs behind the kitchen calendar.").id
        eng.close()
    dump = tmp_path / "personal_llm.dump"
    subprocess.run([str(pg_server.bin / "pg_dump"), "-Fc", "-f", str(dump), "-d", pg_url], check=True,
                   capture_output=True)

    other = LocalServer().start()
    try:
        with other.admin() as con:
            for role in ROLES:
                con.execute(f"CREATE ROLE {role} NOLOGIN")
            con.execute("CREATE DATABASE personal_llm")
        url = other.url("personal_llm")
        subprocess.run([str(other.bin / "pg_restore"), "--exit-on-error", "-d", url, str(dump)], check=True,
                       capture_output=True)
        _, done = users.init(url)
        assert done.applied == 0 and not done.space_changed  # the restored schema is this version's, vectors kept
        with Database(url) as db:
            assert users.authenticate(db, token) == alice  # the same token, from its hash in the dump
            eng = Engine.for_user(db, alice, "alice", home=tmp_path / "b", settings=Settings(), embedder=embedder)
            try:
                assert eng.get(kept).text.startswith("The spare key")
                hits = eng.recall("where is the key for the garden shed?", k=3)
                assert hits and hits[0].id == kept and "vector" in hits[0].via
            finally:
                eng.close()
    finally:
        other.stop()
