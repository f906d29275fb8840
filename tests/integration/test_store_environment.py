"""Honest errors for the environment: a read-only store or disk, a full disk, a damaged or locked store are
reported as what they are (engine/store/sqlite/db.py explain, the one place SQLite result codes are mapped),
never as "wrong key" or "internal error", by the engine, the CLI, the HTTP API and MCP.

Real conditions where the machine allows: a small tmpfs (full disk) and a read-only remount need root;
otherwise a read-only folder (chmod) stands in, and an injected SQLite error with the real result code
covers every case everywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlcipher3

from engine import Engine
from engine.errors import DiskFull, StoreCorrupt, StoreLocked, StoreReadOnly, StoreUnavailable
from engine.store import seam
from engine.store.sqlite.db import explain

ROOT = Path(__file__).resolve().parents[2]


def sqlite_error(code: int, message: str) -> sqlcipher3.OperationalError:
    e = sqlcipher3.OperationalError(message)
    e.sqlite_errorcode = code  # what SQLite sets on a real error
    return e


@pytest.mark.parametrize(("code", "message", "kind", "words"), [
    (13, "database or disk is full", DiskFull, "is full"),
    (8, "attempt to write a readonly database", StoreReadOnly, "read-only"),
    (8 | (3 << 8), "attempt to write a readonly database", StoreReadOnly, "read-only"),  # READONLY_CANTLOCK
    (11, "database disk image is malformed", StoreCorrupt, "damaged"),
    (5, "database is locked", StoreLocked, "busy"),
    (14, "unable to open database file", StoreUnavailable, "can't be opened"),
    (10 | (19 << 8), "disk I/O error", DiskFull, "is full"),  # IOERR_SHMSIZE: the -shm file could not grow
    (10 | (3 << 8), "disk I/O error", StoreUnavailable, "disk I/O error"),
])
def test_each_result_code_has_its_message(code: int, message: str, kind: type, words: str):
    env = explain(sqlite_error(code, message), "/p/memory.db")
    assert type(env) is kind and words in str(env) and "/p/memory.db" in str(env) or kind is StoreLocked
    assert explain(sqlite_error(1, "no such table: x")) is None  # a bug stays a bug


class _Failing:
    """A store connection whose writes fail with one SQLite error (reads work)."""

    def __init__(self, con: Any, error: Exception) -> None:
        self._con, self._error = con, error

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
            raise self._error
        return self._con.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        raise self._error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


seam.register("engine.store.sqlite", _Failing)  # its calls go where the connection's would


@pytest.fixture
def failing(eng: Engine, monkeypatch: pytest.MonkeyPatch) -> Any:
    """inject(code, message): from now on every store connection (of every thread, and the writer) fails its
    writes."""
    from engine.store.sqlite.db import Store

    real = Store.con.fget  # type: ignore[attr-defined]
    real_writer = Store.writer.fget  # type: ignore[attr-defined]

    def inject(code: int, message: str) -> None:
        error = sqlite_error(code, message)
        monkeypatch.setattr(Store, "con", property(lambda self: _Failing(real(self), error)))
        monkeypatch.setattr(Store, "writer", property(lambda self: _Failing(real_writer(self), error)))

    return inject


@pytest.mark.sqlite_only("a full disk and a read-only file are the SQLite file's conditions")
def test_a_full_disk_and_a_read_only_store_are_reported_by_the_engine(eng: Engine, failing: Any):
    failing(13, "database or disk is full")
    with pytest.raises(DiskFull, match="is full"):
        eng.remember("A fact that does not fit on the disk.")
    failing(8, "attempt to write a readonly database")
    with pytest.raises(StoreReadOnly, match="read-only"):
        eng.remember("A fact for a read-only store.")


@pytest.mark.sqlite_only("a full disk and a read-only file are the SQLite file's conditions")
def test_the_api_answers_507_and_503_with_the_message(eng: Engine, failing: Any):
    from fastapi.testclient import TestClient

    from engine.api import create_app

    app = create_app(eng, "t0ken")
    with TestClient(app, base_url="http://127.0.0.1", headers={"Authorization": "Bearer t0ken"}) as client:
        failing(13, "database or disk is full")
        r = client.post("/memory/remember", json={"text": "Too big for the disk."})
        assert r.status_code == 507 and "is full" in r.json()["detail"]
        failing(8, "attempt to write a readonly database")
        r = client.post("/memory/remember", json={"text": "Read-only."})
        assert r.status_code == 503 and "read-only" in r.json()["detail"]


@pytest.mark.sqlite_only("a full disk and a read-only file are the SQLite file's conditions")
def test_mcp_tools_return_the_message_as_a_tool_error(eng: Engine, failing: Any):
    from engine.mcp import _guarded

    failing(11, "database disk image is malformed")
    result = _guarded("remember", lambda: eng.remember("x"))  # type: ignore[arg-type,return-value]
    assert result.is_error and "damaged" in result.content[0].text


# ---------------------------------------------------------------------------------------------------
# real conditions
# ---------------------------------------------------------------------------------------------------
def _cli(home: Path, *args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PERSONAL_LLM_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", "import sys; from engine.cli import main; sys.exit(main())", *args],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp)


def _mount_tmpfs(where: Path, size_kb: int) -> bool:
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    where.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, 4096):
        pytest.skip("needs root to mount a small tmpfs (the injected-error tests cover this case)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _fill(disk: Path) -> None:
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (65536, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)


def test_a_really_full_disk_says_so_on_a_first_run_and_later(small_disk: Path, tmp_path: Path):
    home = small_disk / "profile"
    home.mkdir()
    (home / "settings.json").write_text('{"embedding_model": "none"}', encoding="utf-8")
    _fill(small_disk)
    first = _cli(home, "remember", "The first thing, on a full disk.", tmp=tmp_path)
    assert first.returncode == 1, first.stderr
    assert "is full" in first.stderr and "Traceback" not in first.stderr and "internal" not in first.stderr

    (small_disk / "filler").unlink()
    ok = _cli(home, "remember", "The boiler was serviced in March.", tmp=tmp_path)
    assert ok.returncode == 0, ok.stderr
    _fill(small_disk)
    outcomes = [_cli(home, "remember", os.urandom(40_000).hex(), tmp=tmp_path) for _ in range(4)]
    failed = [o for o in outcomes if o.returncode != 0]
    assert failed, "the disk never filled up"
    for o in failed:
        assert o.returncode == 1 and "is full" in o.stderr, o.stderr
        assert "Traceback" not in o.stderr and "does not open" not in o.stderr
    (small_disk / "filler").unlink()
    listed = _cli(home, "list", "--json", tmp=tmp_path)
    assert listed.returncode == 0 and "serviced in March" in listed.stdout  # nothing stored before was lost


def test_a_read_only_store_is_not_called_a_wrong_key(small_disk: Path, tmp_path: Path):
    home = small_disk / "profile"
    home.mkdir()
    (home / "settings.json").write_text('{"embedding_model": "none"}', encoding="utf-8")
    assert _cli(home, "remember", "Written before the disk became read-only.", tmp=tmp_path).returncode == 0
    assert subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], capture_output=True).returncode == 0
    for args in (("remember", "A new fact."), ("stats",)):
        r = _cli(home, *args, tmp=tmp_path)
        if r.returncode == 0:
            continue  # SQLite can read a WAL store on a read-only disk when its -shm is intact
        assert r.returncode == 1 and "read-only" in r.stderr, r.stderr
        assert "does not open" not in r.stderr and "Traceback" not in r.stderr
    r = _cli(home, "remember", "A new fact.", tmp=tmp_path)
    assert r.returncode == 1 and "read-only" in r.stderr


# ---------------------------------------------------------------------------------------------------
# reading and rescuing the memory when nothing can be written
# ---------------------------------------------------------------------------------------------------
LEFT_IN_THE_LOG = """
import os, sys
from engine import Engine
eng = Engine.open(actor="cli")
eng.remember(sys.argv[1])
os._exit(0)  # killed, in effect: the write-ahead log and its -shm stay, not checkpointed into the file
"""


def _profile_with_memories(home: Path, tmp: Path, *, killed: bool) -> None:
    """Two memories, closed cleanly (no -wal or -shm left); with `killed`, a third in the write-ahead log of
    a process that ended without closing."""
    home.mkdir()
    for text in ("The boiler was serviced in March.", "Our cat is called Marmalade."):
        assert _cli(home, "remember", text, tmp=tmp).returncode == 0
    assert not (home / "memory.db-shm").exists()
    if killed:
        env = {**os.environ, "PERSONAL_LLM_HOME": str(home), "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "-c", LEFT_IN_THE_LOG, "The spare key is under the blue pot."], env=env,
                       check=True, timeout=120, cwd=tmp)
        assert (home / "memory.db-wal").stat().st_size > 0


def _reads_and_rescues(home: Path, tmp: Path, why: str | None, *, killed: bool) -> None:
    """What must work with nothing writable: recall (by meaning; a memory only in the log), stats, the token,
    an export and a backup to another disk. `why`: the note that the store is open read-only (when it
    could not be opened otherwise)."""
    r = _cli(home, "recall", "which pet do we have", "--json", tmp=tmp)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["text"] == "Our cat is called Marmalade."
    assert "Traceback" not in r.stderr
    if why:
        assert f"open read-only because the disk {why}" in r.stderr
    if killed:
        r = _cli(home, "recall", "spare key", "--json", tmp=tmp)
        assert r.returncode == 0 and "blue pot" in json.loads(r.stdout)[0]["text"], r.stderr
    stats = _cli(home, "stats", "--json", tmp=tmp)
    assert stats.returncode == 0 and json.loads(stats.stdout)["memories"] == 2 + killed, stats.stderr
    assert any("read-only" in n for n in json.loads(stats.stdout)["notes"]) == bool(why)
    assert _cli(home, "token", tmp=tmp).returncode == 0
    out = tmp / "rescue"
    out.mkdir()
    r = _cli(home, "export", str(out / "memory.jsonl"), tmp=tmp)
    assert r.returncode == 0, r.stderr
    assert "Marmalade" in (out / "memory.jsonl").read_text(encoding="utf-8")
    env = {**os.environ, "PERSONAL_LLM_HOME": str(home), "PYTHONPATH": str(ROOT), "PERSONAL_LLM_BACKUP_DIR": str(out)}
    r = subprocess.run([sys.executable, "-m", "engine.cli", "backup", "now"], capture_output=True, text=True,
                       env=env, timeout=120, cwd=tmp)
    assert r.returncode == 0, r.stderr
    assert list(out.glob("memory-*"))


@pytest.mark.parametrize("killed", [False, True], ids=["closed", "killed-writer"])
def test_a_full_disk_still_recalls_exports_and_backs_up_elsewhere(small_disk: Path, tmp_path: Path, killed: bool):
    home = small_disk / "profile"
    _profile_with_memories(home, tmp_path, killed=killed)
    _fill(small_disk)
    _reads_and_rescues(home, tmp_path, None if killed else "holding it is full", killed=killed)  # killed: -shm left
    r = _cli(home, "remember", "A new fact.", tmp=tmp_path)
    assert r.returncode == 1 and "is full" in r.stderr and "Traceback" not in r.stderr

    (small_disk / "filler").unlink()  # space again: writable again, and nothing was lost
    assert _cli(home, "remember", "A fact after the disk was freed.", tmp=tmp_path).returncode == 0
    stats = json.loads(_cli(home, "stats", "--json", tmp=tmp_path).stdout)
    assert stats["memories"] == 3 + killed and not any("read-only" in n for n in stats["notes"])


@pytest.mark.parametrize("killed", [False, True], ids=["closed", "killed-writer"])
def test_a_read_only_profile_still_recalls_exports_and_backs_up_elsewhere(small_disk: Path, tmp_path: Path,
                                                                          killed: bool):
    home = small_disk / "profile"
    _profile_with_memories(home, tmp_path, killed=killed)
    assert subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], capture_output=True).returncode == 0
    _reads_and_rescues(home, tmp_path, "or folder holding it is read-only", killed=killed)
    r = _cli(home, "remember", "A new fact.", tmp=tmp_path)
    assert r.returncode == 1 and "read-only" in r.stderr and "Traceback" not in r.stderr
