"""The PostgreSQL tests: a real server (tests/pg_server.py) for each test process, a database for each test."""

import pytest

from tests.pg_server import pg_db, pg_empty_url, pg_server, pg_template, pg_url  # noqa: F401
from tests.postgres.rows import Both
from tests.postgres.serving import served  # noqa: F401


@pytest.fixture
def both(profile_home, pg_db) -> Both:  # noqa: F811
    """A scenario of row calls run on the SQLite backend and as Alice on PostgreSQL (tests/postgres/rows.py)."""
    return Both(profile_home, pg_db)
