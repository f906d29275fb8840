"""The store a restore replaces is kept aside for a week so the restore can be undone, and no longer; a
forget deletes it at once, because it still holds what was forgotten. Checked as someone holding the key
would: every file in the profile is read, stores decrypted page by page (and their logs), the rest raw."""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path

import pytest

from engine import Engine, backup
from tests.forensics import everything, layout
from tests.integration.test_safety import data_key

MARKER = b"quetzalcoatl8812"


def files_holding(home: Path, key: bytes, needle: bytes) -> list[str]:
    """Every file under the profile that holds ``needle``: SQLCipher stores (any name) decrypted with the
    key, page by page with their -wal; everything else as raw bytes."""
    found = []
    for path in sorted(p for p in home.rglob("*") if p.is_file()):
        if path.name.endswith(("-wal", "-shm")):
            continue  # read with its store
        try:
            layout(path, key)
        except (AssertionError, ValueError):
            if needle in path.read_bytes():
                found.append(str(path.relative_to(home)))
            continue
        if any(needle in page for _, _, page in everything(path, key)):
            found.append(str(path.relative_to(home)))
    return found


@pytest.fixture
def backups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Snapshots on another disk (outside the profile): a snapshot keeps what is forgotten after it."""
    where = tmp_path / "elsewhere"
    monkeypatch.setenv(backup.BACKUP_DIR_ENV, str(where))
    return where


def test_a_forget_after_a_restore_leaves_the_forgotten_text_in_no_file_of_the_profile(
        profile_home: Path, embedder, backups: Path):
    with Engine.open(profile_home, embedder=embedder) as eng:
        mem = eng.remember(f"The vault combination is {MARKER.decode()}, said the caretaker.", embed="sync")
        eng.remember("The tomatoes need water every second day.", embed="sync")
        snap = eng.backup_now()
    key = data_key(profile_home)
    snap, aside, opens = Engine.restore_snapshot(profile_home, snap.name)
    assert opens and aside is not None and aside.exists()
    assert set(files_holding(profile_home, key, MARKER)) == {"memory.db", aside.name}  # the check sees both

    with Engine.open(profile_home, embedder=embedder) as eng:
        assert [m.id for m in eng.list_memories() if MARKER.decode() in m.text] == [mem.id]
        eng.forget(mem.id)
        eng.compact()
        assert eng.recall(MARKER.decode()) == []
    assert files_holding(profile_home, key, MARKER) == []
    assert not aside.exists() and backup.aside_copies(profile_home) == []
    assert files_holding(profile_home, key, b"tomatoes") == ["memory.db"]  # the scan reads the store


def test_the_replaced_store_is_kept_for_a_week_and_the_user_is_told(profile_home: Path, embedder,
                                                                      backups: Path):
    with Engine.open(profile_home, embedder=embedder) as eng:
        eng.remember("The spare key is under the blue flowerpot.")
        snap = eng.backup_now()
    _snap, first, _ = Engine.restore_snapshot(profile_home, snap.name)
    assert first is not None
    note = Engine.kept_aside_note(first)
    until = datetime.fromtimestamp(time.time() + backup.KEEP_ASIDE_DAYS * 86400)
    assert f"kept at {first} until {until:%Y-%m-%d}" in note and "a forget deletes it sooner" in note
    # one restored eight days ago (its name says when), one now
    old_at = datetime.fromtimestamp(time.time() - 8 * 86400).strftime("%Y%m%dT%H%M%S")
    old = first.with_name(f"memory.db.before-restore-{old_at}")
    os.rename(first, old)
    assert [p for p, _ in backup.aside_copies(profile_home)] == [old]
    _snap, recent, _ = Engine.restore_snapshot(profile_home, snap.name)  # it opens the store first
    assert recent is not None and [p for p, _ in backup.aside_copies(profile_home)] == [recent]  # the old one went
    with Engine.open(profile_home, embedder=embedder) as eng:  # an open deletes the expired ones only
        assert [p for p, _ in backup.aside_copies(profile_home)] == [recent]
        assert eng.list_memories()[0].text == "The spare key is under the blue flowerpot."


def test_the_cli_says_until_when_the_replaced_store_is_kept(profile_home: Path, backups: Path):
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    cli = [sys.executable, "-m", "engine.cli"]
    (profile_home).mkdir(parents=True, exist_ok=True)
    (profile_home / "settings.json").write_text(json.dumps({"embedding_model": "none"}))
    subprocess.run([*cli, "remember", "A note to restore."], env=env, check=True, capture_output=True)
    made = json.loads(subprocess.run([*cli, "backup", "now", "--json"], env=env, check=True, capture_output=True,
                                     text=True).stdout)
    run = subprocess.run([*cli, "backup", "restore", made["snapshot"], "--json"], env=env, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    kept = datetime.fromisoformat(out["previous_store_kept_until"])
    assert abs(kept.timestamp() - (time.time() + backup.KEEP_ASIDE_DAYS * 86400)) < 600
    assert Path(out["previous_store_kept_at"]).exists()
