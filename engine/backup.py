"""Encrypted snapshots of the store: `personal-llm backup now|list|restore SNAPSHOT`.

A snapshot is made with SQLite's online backup API (a consistent copy while other programs write), into a
file encrypted with the store's own data key, plus a copy of `profile.json` beside it (not secret: it holds
the wrapped keys, so the recovery key opens the snapshot on any machine). Files are 0600.

Retention (after each snapshot): the newest snapshot of each of the last 7 days that have one, and the
newest of each of the 4 weeks before those; older snapshots are deleted.

Restore replaces the store only after the snapshot was opened with its key and passed `integrity_check`,
and checks the store in place the same way (else the replaced one goes back). The replaced store is kept
aside as `memory.db.before-restore-<time>`, so that a restore made by mistake can be undone, for
:data:`KEEP_ASIDE_DAYS` days (the restore says until when), and no longer: the next open after that
deletes it, and so does every forget before then (`engine.erasure.after_forget`), since the copy still holds
what was forgotten and a forget cannot reach inside it (it may be under a key since rotated away).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .errors import NotFound, UserError, WrongKey
from .keyops import OpenStore
from .keys import Profile, _keyring_set, own_keychain_id, read_profile, write_profile
from .locking import InUse, precreate, private_dir, private_file, store_files
from .paths import PROFILE_FILE, STORE_FILE
from .store.sqlite import maintenance
from .store.sqlite.db import connect

log = logging.getLogger(__name__)

PREFIX = "memory-"
SUFFIX = ".db"
KEEP_DAILY = 7
KEEP_WEEKLY = 4
KEEP_ASIDE_DAYS = 7
"""How long the store a restore replaced is kept beside the restored one (unless a forget deletes it first)."""
ASIDE = ".before-restore-"
_ASIDE_TIME = "%Y%m%dT%H%M%S"


@dataclass(frozen=True)
class Snapshot:
    name: str
    path: Path
    at: float
    bytes: int


BACKUP_DIR_ENV = "PERSONAL_LLM_BACKUP_DIR"


def folder(home: Path, chosen: str | None = None) -> Path:
    """`$PERSONAL_LLM_BACKUP_DIR`, else the folder chosen in the settings (`backup.folder`: another disk, a
    synced folder), else `backups/` in the profile `home`."""
    env = os.environ.get(BACKUP_DIR_ENV) or chosen
    return Path(env).expanduser() if env else home / "backups"


INTERVALS = {"daily": 86400.0, "weekly": 7 * 86400.0}
OLD_WHEN_OFF = 14 * 86400.0  # with scheduled snapshots off, the last one is called old after two weeks


@dataclass(frozen=True)
class BackupStatus:
    """Where snapshots go, the newest one, whether the schedule wants one now, and whether it is old."""

    folder: Path
    schedule: str  # daily | weekly | off
    last: Snapshot | None
    count: int
    due: bool  # the schedule wants a snapshot now
    old: bool  # no snapshot, or the newest is more than twice the schedule's interval old
    from_env: bool  # the folder comes from $PERSONAL_LLM_BACKUP_DIR (the setting is not used)


def status(where: Path, schedule: str, now: float | None = None) -> BackupStatus:
    now = time.time() if now is None else now
    snaps = snapshots(where) if where.is_dir() else []
    last = snaps[0] if snaps else None
    age = None if last is None else now - last.at
    interval = INTERVALS.get(schedule)
    due = interval is not None and (age is None or age >= interval)
    old = age is None or age > (2 * interval if interval is not None else OLD_WHEN_OFF)
    return BackupStatus(where, schedule, last, len(snaps), due, old, bool(os.environ.get(BACKUP_DIR_ENV)))


def snapshots(where: Path) -> list[Snapshot]:
    """Newest first."""
    out = []
    for p in where.glob(f"{PREFIX}*{SUFFIX}"):
        try:
            at = datetime.strptime(p.stem.removeprefix(PREFIX), "%Y%m%dT%H%M%S%f").timestamp()
        except ValueError:
            continue
        out.append(Snapshot(p.stem, p, at, p.stat().st_size))
    return sorted(out, key=lambda s: s.at, reverse=True)


def backup_now(eng: OpenStore, where: Path | None = None,
               progress: Callable[[int, int], None] | None = None) -> Snapshot:
    where = where or folder(eng.home)
    try:
        private_dir(where)
    except OSError as e:  # a file where the folder should be, a place that cannot be written
        raise UserError(f"Snapshots cannot go to {where}: {e.strerror or e}. Choose another backup folder "
                        "(`personal-llm config set backup.folder PATH`); nothing was written.") from None
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S%f")
    final = where / f"{PREFIX}{stamp}{SUFFIX}"
    tmp = where / f".{final.name}.partial"
    precreate(tmp)
    dst = connect(tmp, eng.store._key_pragma, eng.store.cipher)  # a copy needs its store's page settings
    try:
        maintenance.copy_into(eng.store.con, dst, progress)  # online: consistent while other connections write
        ok = maintenance.integrity_ok(dst)
    finally:
        dst.close()
    if not ok:
        tmp.unlink(missing_ok=True)
        raise UserError("The snapshot did not verify; nothing was kept. Try again.")
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)
    prof = where / f"{PREFIX}{stamp}.{PROFILE_FILE}"
    shutil.copyfile(eng.home / PROFILE_FILE, prof)
    private_file(prof)
    eng.audit.record("backup", final.name, {"bytes": final.stat().st_size})
    prune(where)
    log.info("snapshot written (%d bytes)", final.stat().st_size)
    return Snapshot(final.stem, final, time.time(), final.stat().st_size)


def prune(where: Path, now: float | None = None) -> list[str]:
    """Apply the retention rule; returns the names deleted."""
    keep: set[str] = set()
    days: dict[str, Snapshot] = {}
    weeks: dict[str, Snapshot] = {}
    for s in snapshots(where):  # newest first: the first seen per day/week is the newest
        d = datetime.fromtimestamp(s.at)
        days.setdefault(d.strftime("%Y-%m-%d"), s)
    daily = sorted(days.values(), key=lambda s: s.at, reverse=True)[:KEEP_DAILY]
    keep |= {s.name for s in daily}
    oldest_daily = min((s.at for s in daily), default=now or time.time())
    for s in snapshots(where):
        if s.at < oldest_daily:
            year, week, _ = datetime.fromtimestamp(s.at).isocalendar()
            weeks.setdefault(f"{year}-{week:02d}", s)
    keep |= {s.name for s in sorted(weeks.values(), key=lambda s: s.at, reverse=True)[:KEEP_WEEKLY]}
    gone = []
    for s in snapshots(where):
        if s.name not in keep:
            s.path.unlink(missing_ok=True)
            (where / f"{s.name}.{PROFILE_FILE}").unlink(missing_ok=True)
            gone.append(s.name)
    return gone


def find(where: Path, name: str) -> Snapshot:
    for s in snapshots(where):
        if name in (s.name, s.path.name, str(s.path)):
            return s
    p = Path(name).expanduser()
    if p.is_file():
        return Snapshot(p.stem, p, p.stat().st_mtime, p.stat().st_size)
    raise NotFound(f"No snapshot named {name} in {where}.")


def restore(home: Path, snap: Snapshot, key_pragma: str) -> Path | None:
    """Put the snapshot in place of the store (or into an empty profile). Returns where the old store was
    kept aside, or None when there was none. The caller holds no engine on this profile."""
    try:
        con = connect(snap.path, key_pragma)
        ok = maintenance.integrity_ok(con)
        con.close()
    except WrongKey as e:
        raise WrongKey("This snapshot was made with another key (a rotation since?); restore its profile copy "
                       "and open it with the recovery key. Nothing was changed.") from e
    if not ok:
        raise UserError("The snapshot is damaged (integrity check failed); nothing was changed.")
    private_dir(home)
    in_use = InUse(home)
    try:
        with in_use.exclusive("the restore"):
            db = home / STORE_FILE
            aside = None
            if db.exists():
                aside = home / f"{STORE_FILE}{ASIDE}{datetime.now().strftime(_ASIDE_TIME)}"
                if _opens(db, key_pragma):  # fold its log into the file that is kept aside
                    cur = connect(db, key_pragma)
                    maintenance.checkpoint(cur)
                    cur.close()
                os.replace(db, aside)
                for extra in store_files(db)[1:]:
                    extra.unlink(missing_ok=True)
            tmp = home / f".{STORE_FILE}.restoring"
            shutil.copyfile(snap.path, tmp)
            private_file(tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, db)
            if not _sound(db, key_pragma):  # the copy in place is checked too; the replaced store goes back
                if aside is not None:
                    os.replace(aside, db)
                raise UserError("The restored store did not pass its check on this disk; the store it was to "
                                "replace is back in place. Check the disk and try again.")
            if read_profile(home) is None:
                prof = snap.path.with_name(f"{snap.name}.{PROFILE_FILE}")
                if prof.exists():
                    shutil.copyfile(prof, home / PROFILE_FILE)
                    private_file(home / PROFILE_FILE)
    finally:
        in_use.release()
    log.info("snapshot restored")
    return aside


def _sound(db: Path, key_pragma: str) -> bool:
    try:
        con = connect(db, key_pragma)
        try:
            return maintenance.integrity_ok(con)
        finally:
            con.close()
    except (WrongKey, UserError):
        return False


def aside_copies(home: Path) -> list[tuple[Path, float]]:
    """The stores restores replaced, still kept in the profile, with when each was put aside (oldest first)."""
    out = []
    for path in home.glob(f"{STORE_FILE}{ASIDE}*"):
        stamp = path.name.removeprefix(f"{STORE_FILE}{ASIDE}")[:15]
        try:
            at = datetime.strptime(stamp, _ASIDE_TIME).timestamp()
        except ValueError:
            at = path.stat().st_mtime
        out.append((path, at))
    return sorted(out, key=lambda x: x[1])


def aside_until(at: float) -> float:
    """When a store put aside at ``at`` is deleted."""
    return at + KEEP_ASIDE_DAYS * 86400


def kept_aside_note(aside: Path) -> tuple[str, str]:
    """What to tell the user about a store a restore just put aside, and until when (ISO time) it is kept."""
    until = datetime.fromtimestamp(aside_until(time.time()))
    return (f"The store it replaced is kept at {aside} until {until:%Y-%m-%d %H:%M}, so that this restore "
            "can be undone (move it back to memory.db), and then deleted; a forget deletes it sooner, because "
            "it still holds what you forget.", until.isoformat(timespec="seconds"))


def drop_aside(home: Path, *, expired_only: bool = False, now: float | None = None) -> list[str]:
    """Delete the stores restores replaced (only those kept past KEEP_ASIDE_DAYS with ``expired_only``),
    with their log files. Returns the names deleted."""
    now = time.time() if now is None else now
    gone = []
    for path, at in aside_copies(home):
        if expired_only and aside_until(at) > now:
            continue
        for f in store_files(path):
            try:
                f.unlink(missing_ok=True)
            except OSError as e:
                log.warning("a store kept aside by a restore could not be deleted: %s", type(e).__name__)
        if not path.exists():
            gone.append(path.name)
    if gone:
        log.info("deleted %d store(s) kept aside by a restore", len(gone))
    return gone


def _opens(db: Path, key_pragma: str) -> bool:
    try:
        connect(db, key_pragma).close()
        return True
    except WrongKey:
        return False


def restore_into_empty(home: Path, snap: Snapshot) -> bool:
    """A profile without a store: copy the snapshot and its profile in. True when this computer's keychain
    opens it; otherwise `personal-llm unlock --recovery-key …` does."""
    from .unlock import candidates, pragma_of

    prof = snap.path.with_name(f"{snap.name}.{PROFILE_FILE}")
    if not prof.exists():
        raise UserError(f"{prof.name} is missing next to the snapshot: it holds the snapshot's wrapped key.")
    private_dir(home)
    for src, name in ((snap.path, STORE_FILE), (prof, PROFILE_FILE)):
        tmp = home / f".{name}.restoring"
        shutil.copyfile(src, tmp)
        private_file(tmp)
        os.replace(tmp, home / name)
    profile = read_profile(home)
    assert profile is not None
    try:
        cands = candidates(profile, None, interactive=False)
    except UserError:
        return False
    for _, k in cands:
        if _opens(home / STORE_FILE, pragma_of(k)):
            if profile.key_source == "keychain" and isinstance(k, bytes):
                # the key came from the keychain entry of the profile the snapshot was made in: this copy gets
                # an entry of its own, so a rotation or a recovery here never writes over that profile's
                raw = own_keychain_id(profile.raw)
                _keyring_set(Profile.of(raw).key_account, k.hex())
                write_profile(home, raw)
            return True
    return False
