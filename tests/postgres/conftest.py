"""The PostgreSQL tests: a real server (tests/pg_server.py) for each test process, a database for each test."""

from tests.pg_server import pg_db, pg_empty_url, pg_server, pg_template, pg_url  # noqa: F401
from tests.postgres.serving import served  # noqa: F401
