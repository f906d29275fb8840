"""kill -9 of `personal-llm serve --database` during concurrent writes of several users loses no acknowledged
write and leaves nothing half-written (tests/postgres/crash.py; bench/pg_crash.py runs many more trials)."""

from __future__ import annotations

import random
from pathlib import Path

import psycopg
import pytest

from engine import users
from tests.postgres.crash import Ledger, check, start_server, trial


def test_a_killed_server_loses_no_acknowledged_write(pg_url: str, tmp_path: Path):
    tokens = {name: users.add(pg_url, name) for name in ("ada", "bo", "cy")}
    ledger = Ledger()
    rng = random.Random(46)
    proc, address = start_server(pg_url, tmp_path / "server-home")
    try:
        for _ in range(2):
            proc, address, done = trial(pg_url, address, proc, tokens, tmp_path / "server-home", ledger, rng,
                                        min_acked=10, kill_within=1.0)
            assert done.acked >= 10
        assert sum(len(m) for m in ledger.acked.values()) >= 20
        assert all(ledger.acked[u] for u in tokens)  # every user's writes went through
        # and the check sees a lost write: one acknowledged memory deleted behind the server's back
        lost = next(iter(ledger.acked["bo"]))
        with psycopg.connect(pg_url) as con:
            con.execute("DELETE FROM personal_llm.memories WHERE uid = %s", (lost,))
        with pytest.raises(AssertionError, match="bo: 1 acknowledged memories lost"):
            check(pg_url, address, tokens, ledger)
    finally:
        proc.kill()
        proc.wait(30)
