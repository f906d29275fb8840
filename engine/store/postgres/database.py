"""A PostgreSQL database serving many users: a connection pool whose transactions each act for one user,
and the operator's operations on the schema and the users.

The pool's connections work as `personal_llm_app`, a role that is never a superuser nor BYPASSRLS
(checked on every new connection), so row-level security holds for every statement the server runs;
`transaction(user_id)` sets `app.user_id` for that transaction only (`set_config(…, true)`, as
`SET LOCAL`), and a connection goes back to the pool without it. The URL's own role may be a superuser
(it acts as the app role through membership, `SET ROLE`), or a login role made a member of
`personal_llm_app` alone (docs/server.md), which is the safer way to run a server.

The operator's operations (`init`, users, tokens) connect with the URL's role on a connection of their
own and act as the owner role. Tokens never reach this module: only their SHA-256.

Nothing here logs or shows a URL's password: errors name the database with `describe`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from ...errors import NotFound, StoreTooNew, StoreUnavailable, UserError
from ..seam import register
from . import migrations
from .migrations import APP, OWNER, SCHEMA, USER_TABLES, Space

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10  # seconds to reach the server
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")
URL_FORM = "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"


class DatabaseUnavailable(StoreUnavailable):
    """The database cannot be reached or used (down, wrong address, refused, not set up)."""


def describe(url: str) -> str:
    """The database a URL names, without its password: postgresql://user@host:port/dbname."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.Error:
        return "(an unreadable URL)"
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    host, db = str(parts.get("host") or ""), parts.get("dbname") or ""
    if host.startswith("/"):  # a Unix socket's folder
        return f"postgresql://{user}{port}/{db}?host={host}"
    return f"postgresql://{user}{host}{port}/{db}"


def checked_url(url: str | None) -> str:
    """The URL, if it is one libpq can read; a clear error (that never repeats the URL: it may hold a
    password) otherwise."""
    if not url:
        raise UserError(f"No database given: pass --database {URL_FORM} or set PERSONAL_LLM_DATABASE.")
    if not url.startswith(("postgresql://", "postgres://")):
        raise UserError(f"Not a PostgreSQL URL: expected {URL_FORM}.")
    try:
        conninfo_to_dict(url)
    except psycopg.Error:
        raise UserError(f"Not a readable PostgreSQL URL: expected {URL_FORM} (special characters in the "
                        "password written as %XX).") from None
    return url


def _scrubbed(message: str, url: str) -> str:
    """libpq's first line, without the URL's password should it appear."""
    first = (message.strip().splitlines() or [""])[0]
    try:
        password = conninfo_to_dict(url).get("password")
    except psycopg.Error:
        password = None
    if password:
        first = first.replace(str(password), "***")
    return first


def explain(e: psycopg.Error, url: str) -> UserError:
    """A psycopg error as one for people, naming the database without its password."""
    where = describe(url)
    state = getattr(e, "sqlstate", None) or ""
    reason = _scrubbed(str(e), url)
    if isinstance(e, psycopg.OperationalError) and not state:  # libpq could not connect: no SQLSTATE
        said = reason.rsplit("FATAL:", 1)[-1].strip()
        if said.startswith("database ") and said.endswith("does not exist"):
            return DatabaseUnavailable(f"There is no PostgreSQL database {where}: create it first ({said}).")
        if "password authentication failed" in said or "no password supplied" in said:
            return DatabaseUnavailable(f"The PostgreSQL database {where} refused the login: {said}")
        return DatabaseUnavailable(f"Cannot connect to the PostgreSQL database {where}: {reason}")
    if state == "28P01" or state == "28000":
        return DatabaseUnavailable(f"The PostgreSQL database {where} refused the login: {reason}")
    if state == "3D000":
        return DatabaseUnavailable(f"There is no PostgreSQL database {where}: create it first ({reason}).")
    if state in ("58P01", "0A000") and "vector" in reason:
        return DatabaseUnavailable(
            f"pgvector is not installed on the PostgreSQL server of {where}: install it (Debian and Ubuntu: "
            f"postgresql-NN-pgvector) or use a managed PostgreSQL that offers the `vector` extension ({reason}).")
    if state == "42501":
        return DatabaseUnavailable(f"The role of {where} lacks a right this needs: {reason}")
    return DatabaseUnavailable(f"The PostgreSQL database {where} failed: {reason}")


@dataclass(frozen=True)
class UserRow:
    id: int
    name: str
    created_at: float
    removed_at: float | None
    tokens: int


@dataclass(frozen=True)
class InitResult:
    version: int  # the schema version now
    applied: int  # migrations applied by this run
    space_changed: bool  # the embedding space was made (or changed: every vector went)


class Database:
    """One PostgreSQL database: `transaction(user_id)` for the server's work as a user, and the operator's
    operations. The pool opens on the first transaction; `close()` closes it."""

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 8, timeout: float = 30.0) -> None:
        self.url = checked_url(url)
        self.where = describe(url)
        self._sizes = (min_size, max_size)
        self._timeout = timeout
        self._pool: ConnectionPool | None = None

    # -- the server's work ------------------------------------------------------------------------------

    def _configure(self, con: psycopg.Connection) -> None:
        """A new pool connection: act as the app role, in the schema, each statement in its own backend (no
        parallel workers: a user's exact vector search took one each, started for every search, and sorted
        its rows with their vectors, 43 ms where the backend alone takes 3 ms, while other requests wait for
        the same cores); refuse a role that escapes row-level security."""
        con.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(APP)))
        bypass = con.execute("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user").fetchone()
        if bypass is None or bypass[0]:
            raise DatabaseUnavailable(f"The role {APP} of {self.where} may bypass row-level security; refused.")
        schema = migrations.vector_schema(con)
        path = [SCHEMA, *([schema] if schema and schema != SCHEMA else [])]
        con.execute("SELECT set_config('search_path', %s, false), set_config('max_parallel_workers_per_gather', "
                    "'0', false)", (", ".join(f'"{p}"' for p in path),))
        con.commit()

    def pool(self) -> ConnectionPool:
        if self._pool is None:
            low, high = self._sizes
            pool = ConnectionPool(self.url, min_size=low, max_size=high, timeout=self._timeout,
                                  kwargs={"connect_timeout": CONNECT_TIMEOUT}, configure=self._configure,
                                  name="personal-llm", open=False)
            try:
                pool.open(wait=True, timeout=CONNECT_TIMEOUT + 5)
            except PoolTimeout:
                pool.close()
                raise self._first_failure() from None
            self._pool = pool
        return self._pool

    def _first_failure(self) -> UserError:
        """Why the pool could not open: one direct connection attempt, as the pool makes them."""
        try:
            with psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT) as con:
                self._configure(con)
        except psycopg.Error as e:
            return explain(e, self.url)
        except UserError as e:
            return e
        return DatabaseUnavailable(f"The PostgreSQL database {self.where} did not answer in time.")

    @contextmanager
    def transaction(self, user_id: int, *, snapshot: bool = False) -> Iterator[psycopg.Connection]:
        """A connection in a transaction acting for this user: every statement sees and writes only the
        user's rows. Commits when the block ends, rolls back when it raises. `snapshot`: every statement
        sees the same snapshot (REPEATABLE READ), not each its own (READ COMMITTED, the default)."""
        with self.pool().connection() as con:
            if snapshot:
                con.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            try:
                with con.transaction():
                    con.execute("SELECT set_config('app.user_id', %s, true)", (str(int(user_id)),))
                    yield con
            finally:
                if snapshot:
                    try:
                        con.isolation_level = None
                    except psycopg.Error:  # a broken connection: the pool drops a closed one
                        con.close()

    def token_user(self, token_hash: bytes) -> int | None:
        """The user a token (by its SHA-256) belongs to; None for no token or a removed user's."""
        with self.pool().connection() as con:
            row = con.execute(sql.SQL("SELECT {}.token_user(%s)").format(sql.Identifier(SCHEMA)),
                              (token_hash,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the operator's operations ----------------------------------------------------------------------

    @contextmanager
    def _admin(self) -> Iterator[psycopg.Connection]:
        """A connection of the URL's own role, in autocommit (each operation makes its transactions)."""
        try:
            con = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
        except psycopg.Error as e:
            raise explain(e, self.url) from None
        try:
            yield con
        except psycopg.Error as e:
            raise explain(e, self.url) from None
        finally:
            con.close()

    @contextmanager
    def _as_owner(self, con: psycopg.Connection) -> Iterator[psycopg.Connection]:
        """A transaction acting as the owner role, in the schema, on an initialised database."""
        version = migrations.applied(con)
        if version is None:
            raise DatabaseUnavailable(f"{self.where} has no Personal LLM schema yet: run `personal-llm server init`.")
        if version > migrations.SCHEMA_VERSION:
            raise StoreTooNew(self._too_new(version))
        if version < migrations.SCHEMA_VERSION:
            raise DatabaseUnavailable(f"The schema of {self.where} is older than this version of Personal LLM: "
                                      "run `personal-llm server init` to upgrade it.")
        with con.transaction():
            con.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(OWNER)))
            con.execute(migrations.search_path(con))
            yield con

    @staticmethod
    def _too_new(found: int) -> str:
        return (f"This database was set up by a newer version of Personal LLM (schema {found}, this version "
                f"knows {migrations.SCHEMA_VERSION}). Update Personal LLM; the database was left untouched.")

    def init(self, space: Space) -> InitResult:
        """Create the schema or bring it up to date (idempotent), and the vector columns of `space`."""
        with self._admin() as con:
            try:
                applied = migrations.migrate(con)
            except migrations.SchemaTooNew as e:
                raise StoreTooNew(self._too_new(e.found)) from None
            changed = migrations.ensure_space(con, space)
            return InitResult(migrations.current_version(con), applied, changed)

    def schema_version(self) -> int | None:
        with self._admin() as con:
            return migrations.applied(con)

    def add_user(self, name: str, token_hash: bytes) -> int:
        """A new user with one token; an error when the name is taken (also by a removed user)."""
        if not NAME.fullmatch(name):
            raise UserError("A user name is 1-64 letters, digits and . _ @ + - (starting with a letter or digit).")
        with self._admin() as con, self._as_owner(con):
            row = con.execute("INSERT INTO users(name, created_at) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING "
                              "RETURNING id", (name, time.time())).fetchone()
            if row is None:
                removed = con.execute("SELECT removed_at IS NOT NULL FROM users WHERE name = %s", (name,)).fetchone()
                if removed and removed[0]:
                    raise UserError(f"A removed user is called {name!r} and their rows are kept: choose another "
                                    f"name, or erase them first with `personal-llm server remove-user {name} --forget`.")
                raise UserError(f"There is already a user called {name!r}.")
            con.execute("INSERT INTO tokens(user_id, hash, created_at) VALUES (%s, %s, %s)",
                        (row[0], token_hash, time.time()))
            return int(row[0])

    def users(self) -> list[UserRow]:
        with self._admin() as con, self._as_owner(con):
            rows = con.execute(
                "SELECT u.id, u.name, u.created_at, u.removed_at, count(t.id) FROM users u "
                "LEFT JOIN tokens t ON t.user_id = u.id GROUP BY u.id ORDER BY u.name").fetchall()
        return [UserRow(int(r[0]), str(r[1]), float(r[2]), r[3], int(r[4])) for r in rows]

    def remove_user(self, name: str, *, forget: bool) -> dict[str, int]:
        """The user's tokens go, so nobody acts as them any more; their rows stay (the name stays taken).
        With `forget`, every row of theirs in every table goes too, and the user, in one transaction (as
        the app role with the user set: the same row-level security the server works under). Returns the
        rows deleted by table (with forget)."""
        with self._admin() as con, self._as_owner(con):
            row = con.execute("SELECT id FROM users WHERE name = %s FOR UPDATE", (name,)).fetchone()
            if row is None:
                raise NotFound(f"There is no user called {name!r} (`personal-llm server users` lists them).")
            user_id = int(row[0])
            con.execute("DELETE FROM tokens WHERE user_id = %s", (user_id,))
            if not forget:
                con.execute("UPDATE users SET removed_at = coalesce(removed_at, %s) WHERE id = %s",
                            (time.time(), user_id))
                return {}
            con.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(APP)))
            con.execute("SELECT set_config('app.user_id', %s, true)", (str(user_id),))
            gone = {}
            for table in USER_TABLES:
                gone[table] = con.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(table))).rowcount
            con.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(OWNER)))
            con.execute("DELETE FROM users WHERE id = %s", (user_id,))
            return gone


# calls of the row modules (engine/store/__init__.py) on a psycopg connection come to this backend
register(__package__ or "engine.store.postgres", psycopg.Connection, Database, errors=(psycopg.Error,))
