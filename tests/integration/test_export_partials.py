"""An export killed midway (kill -9 of a real `personal-llm export`) leaves no partial file behind: on Linux
the export is written into an unnamed file, which the system frees; where there are no unnamed files, the
named partial it leaves (plain text) is deleted by the next command on the profile, and by the next export
into that folder. Only this program's partial files are touched, and only stale ones."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine import Engine

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "engine.cli"]
NO_UNNAMED_FILES = [sys.executable, "-c",  # the CLI on a system (or file system) without O_TMPFILE
                    "import os, sys; del os.O_TMPFILE; from engine.cli.root import main; sys.exit(main())"]
WORDS = b"quartermaster"
IN_PROGRESS = "exports-in-progress"  # engine.IN_PROGRESS: where the profile notes running exports
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture
def store(profile_home: Path) -> Path:
    """A store whose export takes a few seconds (about 10 MB of JSON Lines)."""
    profile_home.mkdir(parents=True, exist_ok=True)
    (profile_home / "settings.json").write_text(json.dumps({"embedding_model": "none"}))
    with Engine.open(profile_home) as eng:
        for d in range(2):
            eng.ingest_text(" ".join(f"Paragraph {i} of ledger {d}: the quartermaster counts barrels of molasses."
                                     for i in range(40_000)), f"ledger {d}")
    return profile_home


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def kill_mid_export(command: list[str], folder: Path) -> str:
    """Start an export into ``folder`` and kill -9 it once it has written 1 MiB into a file there; what that
    file was."""
    proc = subprocess.Popen([*command, "export", str(folder / "out.jsonl")], env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the export finished before it could be killed"
            for fd in os.listdir(f"/proc/{proc.pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
                    written = os.stat(f"/proc/{proc.pid}/fd/{fd}").st_size
                except OSError:
                    continue
                if target.startswith(str(folder)) and written > 2**20:  # well under way
                    os.kill(proc.pid, signal.SIGKILL)
                    return target
            time.sleep(0.005)
        raise AssertionError("the export never opened a file in its folder")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def export_works(folder: Path) -> None:
    run = subprocess.run([*CLI, "export", "--json", str(folder / "out.jsonl")], env=env(), capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["counts"]["document"] == 2
    assert sorted(p.name for p in folder.iterdir()) == ["out.jsonl"]  # and nothing beside it
    with open(folder / "out.jsonl", "rb") as f:
        assert json.loads(f.readline())["type"] == "header"


def test_a_killed_export_leaves_no_partial_file(store: Path, tmp_path: Path):
    folder = tmp_path / "exports"
    folder.mkdir()
    target = kill_mid_export(CLI, folder)
    assert target.endswith("(deleted)")  # an unnamed file: the system freed it with the process
    assert list(folder.iterdir()) == []
    assert list((store / IN_PROGRESS).iterdir())  # the killed export's note
    run = subprocess.run([*CLI, "stats"], env=env(), capture_output=True, text=True)  # any command
    assert run.returncode == 0, run.stderr
    assert list((store / IN_PROGRESS).iterdir()) == []
    export_works(folder)


def test_where_files_cannot_be_unnamed_the_next_command_deletes_the_partial(store: Path, tmp_path: Path):
    folder = tmp_path / "exports"
    folder.mkdir()
    target = Path(kill_mid_export(NO_UNNAMED_FILES, folder))
    assert target.parent == folder and target.name.startswith(".out.jsonl.personal-llm-export-")
    assert target.exists() and WORDS in target.read_bytes()  # plain text of the store, left by the kill
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    run = subprocess.run([*CLI, "stats"], env=env(), capture_output=True, text=True)  # any command
    assert run.returncode == 0, run.stderr
    assert not target.exists() and list(folder.iterdir()) == []

    # killed again, and its note in the profile lost: the next export into the folder deletes the partial
    target = Path(kill_mid_export(NO_UNNAMED_FILES, folder))
    assert target.exists()
    for note in (store / IN_PROGRESS).iterdir():
        note.unlink()
    export_works(folder)


def test_only_stale_partials_of_this_programs_naming_are_deleted(tmp_path: Path):
    from engine import partials

    folder = tmp_path / "exports"
    folder.mkdir()
    gone_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout.strip()

    def part(name: str, *, age: float = 0) -> Path:
        p = folder / name
        p.write_bytes(b"partial")
        if age:
            os.utime(p, (time.time() - age, time.time() - age))
        return p

    dead = part(f".out.jsonl.personal-llm-export-{gone_pid}-0123abcd.part")
    running = part(f".out.jsonl.personal-llm-export-{os.getpid()}-0123abcd.part")  # this process: alive
    abandoned = part(f".old.jsonl.personal-llm-export-{os.getpid()}-89abcdef.part",
                     age=partials.STALE_PART_SECONDS + 60)  # alive pid, but not written to for long
    others = [part(".out.jsonl.k3j4h5g6.part"), part(f"notes.personal-llm-export-{gone_pid}-0123abcd.part"),
              part(f".out.jsonl.personal-llm-export-{gone_pid}-0123abcd.part.bak")]
    link = folder / f".x.personal-llm-export-{gone_pid}-fedcba98.part"
    link.symlink_to(others[0])  # not a regular file: left alone
    assert partials.clean_partials(folder) == 2
    assert not dead.exists() and not abandoned.exists()
    assert running.exists() and link.is_symlink() and all(p.exists() for p in others)
