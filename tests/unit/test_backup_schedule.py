"""When a scheduled snapshot is due and when the newest one counts as old (engine/backup.py `status`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from engine import backup

NOW = datetime(2026, 6, 15, 12, 0, 0)


def snapshot(folder: Path, at: datetime) -> None:
    (folder / f"memory-{at:%Y%m%dT%H%M%S%f}.db").write_bytes(b"x" * 10)


@pytest.mark.parametrize(("schedule", "age", "due", "old"), [
    ("daily", timedelta(hours=3), False, False),
    ("daily", timedelta(hours=25), True, False),
    ("daily", timedelta(days=3), True, True),
    ("weekly", timedelta(days=3), False, False),
    ("weekly", timedelta(days=8), True, False),
    ("weekly", timedelta(days=15), True, True),
    ("off", timedelta(days=10), False, False),
    ("off", timedelta(days=15), False, True),
])
def test_due_and_old_follow_the_schedule(tmp_path: Path, schedule: str, age: timedelta, due: bool, old: bool):
    snapshot(tmp_path, NOW - age - timedelta(days=30))  # an older one does not count
    snapshot(tmp_path, NOW - age)
    st = backup.status(tmp_path, schedule, NOW.timestamp())
    assert (st.due, st.old, st.count) == (due, old, 2)
    assert st.last is not None and abs(st.last.at - (NOW - age).timestamp()) < 1e-3


def test_no_snapshot_is_due_and_old_unless_the_schedule_is_off(tmp_path: Path):
    assert (backup.status(tmp_path / "missing", "daily").due, backup.status(tmp_path, "daily").old) == (True, True)
    off = backup.status(tmp_path, "off")
    assert (off.due, off.old, off.last) == (False, True, None)


def test_the_folder_is_the_environment_then_the_setting_then_the_profile(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(backup.BACKUP_DIR_ENV, raising=False)
    assert backup.folder(tmp_path) == tmp_path / "backups"
    assert backup.folder(tmp_path, str(tmp_path / "chosen")) == tmp_path / "chosen"
    monkeypatch.setenv(backup.BACKUP_DIR_ENV, str(tmp_path / "env"))
    assert backup.folder(tmp_path, str(tmp_path / "chosen")) == tmp_path / "env"
    assert backup.status(tmp_path / "env", "daily").from_env
