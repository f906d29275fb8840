"""A real `personal-llm serve --database URL` process for the tests, on the test's real PostgreSQL, with two
users (alice and bob) and their tokens."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from engine import users


def start(args: list[str], env: dict[str, str], stderr: int = subprocess.PIPE) -> tuple[subprocess.Popen, str]:
    """Start `personal-llm serve` with these arguments; the process and the URL it announced."""
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", *args, "--json"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert proc.stdout is not None
    text = ""
    try:
        while True:  # the announcement: one JSON object, printed as it is printed (over a few lines)
            line = proc.stdout.readline()
            if not line:
                proc.wait(10)
                raise AssertionError(f"the server did not start (exit code {proc.returncode}): "
                                     f"{proc.stderr.read() if proc.stderr else ''}")
            text += line
            try:
                return proc, json.loads(text)["url"]
            except json.JSONDecodeError:
                continue
    except BaseException:
        proc.kill()  # never left running behind a failed start
        proc.wait(10)
        raise


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`personal-llm serve --database URL` in a process of its own, on a fixed port (started again on it)."""

    def __init__(self, pg_url: str, home: Path, tls: tuple[Path, Path] | None = None):
        self.pg_url, self.home, self.tls = pg_url, home, tls
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> Server:
        args = ["--database", self.pg_url, "--port", str(self.port)]
        if self.tls:
            args += ["--tls-cert", str(self.tls[0]), "--tls-key", str(self.tls[1])]
        self.proc, _ = start(args, {**os.environ, "PERSONAL_LLM_HOME": str(self.home)}, stderr=subprocess.DEVNULL)
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)
        self.proc = None

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


@dataclass
class Served:
    url: str
    alice: str  # tokens
    bob: str
    pg_url: str
    home: Path  # the server's PERSONAL_LLM_HOME (its settings)

    def client(self, token: str, timeout: float = 120) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)


def serving(pg_url: str, home: Path, extra_env: dict[str, str] | None = None) -> Iterator[Served]:
    alice, bob = users.add(pg_url, "alice"), users.add(pg_url, "bob")
    env = {**os.environ, "PERSONAL_LLM_HOME": str(home), **(extra_env or {})}
    proc, url = start(["--database", pg_url, "--port", "0"], env)
    try:
        yield Served(url, alice, bob, pg_url, home)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def served(pg_url: str, tmp_path: Path) -> Iterator[Served]:
    yield from serving(pg_url, tmp_path / "server-home")
