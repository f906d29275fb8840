"""Partial exports: where an export is written until it is whole, and what a killed one leaves.

An export is written where no one sees it until it is whole: on Linux into an unnamed file in the target
folder (``O_TMPFILE``: an export killed midway leaves nothing, the system frees it), given its name only
once complete; elsewhere (or where the file system has no unnamed files) into
``.<name>.personal-llm-export-<pid>-<8 hex>.part``. Each export is noted in the profile
(``exports-in-progress/``) while it runs, so a partial file left by a killed export (plain text, unless
the export was encrypted) is deleted by the next start of any command on the profile, and every export
first deletes the stale partial files of this naming in its folder: those whose writer (the pid in the
name) is gone, or that were not written to for :data:`STALE_PART_SECONDS`.

"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import time
from pathlib import Path

log = logging.getLogger(__name__)

PART_MARK = "personal-llm-export"
STALE_PART_SECONDS = 3600
"""A partial export not written to for this long is stale whatever its pid says (pids are reused)."""
IN_PROGRESS_DIR = "exports-in-progress"
_FDS = "/proc/self/fd"
_NOTE = re.compile(r"^(\d+)-[0-9a-f]{8}\.part$")
_PART = re.compile(rf"^\..+\.{PART_MARK}-(\d+)-[0-9a-f]{{8}}\.part$", re.S)


def open_part(tmp: Path) -> tuple[int, bool]:
    """A private file to write the export into: unnamed in tmp's folder where the system can (Linux
    O_TMPFILE; False), else at tmp itself (True)."""
    flag = getattr(os, "O_TMPFILE", 0)
    if flag and os.path.isdir(_FDS):
        try:
            return os.open(tmp.parent, flag | os.O_WRONLY, 0o600), False
        except OSError as e:  # a file system without unnamed files (some network and FUSE ones)
            log.info("no unnamed file for the export here: %s", type(e).__name__)
    return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600), True


def name_unnamed(fd: int, path: Path) -> None:
    """Give an unnamed file (open_part's) a name: linkat through /proc/self/fd, following that link."""
    fds = os.open(_FDS, os.O_RDONLY)
    try:
        os.link(str(fd), path, src_dir_fd=fds, follow_symlinks=True)
    finally:
        os.close(fds)


def note_in_progress(home: Path, tmp: Path) -> Path | None:
    """Note in the profile where this export's partial file may appear, for clean_after_crash."""
    folder = home / IN_PROGRESS_DIR
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        note = folder / tmp.name.rsplit(f"{PART_MARK}-", 1)[1]
        fd = os.open(note, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.fsencode(str(tmp)))
        return note
    except OSError as e:  # a read-only profile: the export folder is still cleaned by the next export
        log.info("export not noted in the profile: %s", type(e).__name__)
        return None


def _running(pid: int, since: float) -> bool:
    """Whether the process with this pid is the one that was running at ``since`` (not a later one that
    was given the same pid)."""
    import psutil

    try:
        return bool(psutil.Process(pid).create_time() <= since + 1)
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # another user's process: not ours to judge
        return True


def _stale(pid: int, st: os.stat_result, now: float) -> bool:
    """Whether the export that wrote this partial file is over: its process is gone, or it was not
    written to for long."""
    return now - st.st_mtime > STALE_PART_SECONDS or not _running(pid, st.st_mtime)


def _remove_if_stale(path: Path, now: float, *, writer_gone: bool = False) -> bool:
    """Delete a partial export of this program's naming if it is stale (or its writer is known to be
    gone). True when it is gone."""
    found = _PART.match(path.name)
    if found is None:
        return False
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        return False  # only regular files of this user
    if not writer_gone and not _stale(int(found.group(1)), st, now):
        return False
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("a partial export could not be deleted: %s", type(e).__name__)
        return False
    log.info("deleted a partial export left by an export that did not finish")
    return True


def clean_partials(folder: Path, now: float | None = None) -> int:
    """Delete the stale partial exports of this program's naming in a folder. Returns how many."""
    now = time.time() if now is None else now
    try:
        names = [e.name for e in os.scandir(folder) if e.name.endswith(".part") and PART_MARK in e.name]
    except OSError:
        return 0
    return sum(_remove_if_stale(folder / n, now) for n in names)


def clean_after_crash(home: Path, now: float | None = None) -> int:
    """Run at every start on the profile: delete the partial files of exports that were killed (noted in
    the profile), and their notes. Returns how many partial files went."""
    folder = home / IN_PROGRESS_DIR
    if not folder.is_dir():
        return 0
    now = time.time() if now is None else now
    gone = 0
    for note in folder.iterdir():
        found = _NOTE.match(note.name)
        try:
            if found is None or _running(int(found.group(1)), note.stat().st_mtime):
                continue  # not ours, or its export is still running
            tmp = Path(os.fsdecode(note.read_bytes()))
        except OSError:
            continue
        existed = tmp.exists()
        if _PART.match(tmp.name) is None or _remove_if_stale(tmp, now, writer_gone=True):
            gone += existed
            with contextlib.suppress(OSError):
                note.unlink()
    return gone
