"""The engine's integration tests run on both storage backends: a test that takes the `eng` fixture runs once
on a desktop profile's encrypted SQLite file and once as a user of a server's PostgreSQL database (a real
PostgreSQL with pgvector, tests/pg_server.py; another user on the same database, so row-level security is in
every statement). A test about the SQLite file itself (its encryption, keys, backups, locks, its pages)
is marked `@pytest.mark.sqlite_only("why")` and runs on SQLite alone; a behaviour a server does not have yet is
marked `@pytest.mark.postgres_pending("what")`: on PostgreSQL it is expected to fail (strictly: once it passes
there, the mark must go)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pg_server import pg_db, pg_server, pg_template, pg_url  # noqa: F401

BACKENDS = ("sqlite", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "eng" not in metafunc.fixturenames:
        return
    only, pending = (metafunc.definition.get_closest_marker(m) for m in ("sqlite_only", "postgres_pending"))
    for mark in (only, pending):
        if mark is not None and not (mark.args or mark.kwargs.get("reason")):
            raise pytest.UsageError(f"{metafunc.definition.nodeid}: {mark.name} needs its reason")
    if only is not None:
        metafunc.parametrize("eng", ["sqlite"], indirect=True)
    elif pending is not None:
        reason = pending.args[0] if pending.args else pending.kwargs["reason"]
        metafunc.parametrize("eng", ["sqlite", pytest.param("postgres", marks=pytest.mark.xfail(
            reason=f"not yet on a server: {reason}", strict=True))], indirect=True)
    else:
        metafunc.parametrize("eng", BACKENDS, indirect=True)


@pytest.fixture
def backend(eng) -> str:
    """The backend the test's `eng` runs on."""
    return "sqlite" if eng.profile is not None else "postgres"


@pytest.fixture
def eng(request: pytest.FixtureRequest, profile_home: Path, embedder):
    """An open engine on the test's backend (see the module doc)."""
    from engine import Engine

    # a test that asks for it by name while it runs (request.getfixturevalue) gets the desktop's
    if getattr(request, "param", "sqlite") == "sqlite":
        e = Engine.open(profile_home, actor="sdk", embedder=embedder)
    else:
        from engine import users
        from engine.config import load_settings

        db = request.getfixturevalue("pg_db")
        db.add_user("someone-else", users.token_hash(users.make_token()))
        uid = db.add_user("alice", users.token_hash(users.make_token()))
        e = Engine.for_user(db, uid, "alice", home=profile_home, settings=load_settings(profile_home),
                            actor="sdk", embedder=embedder)
    yield e
    e.close()
