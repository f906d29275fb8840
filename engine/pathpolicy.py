"""What a client of the HTTP API may make the server read from disk.

The CLI and the desktop app act for the user at the keyboard and read any file the user names. A client
of the API is a program that holds the token; it may ask the server to ingest files only:

- **under a folder the user allowed** (``settings.ingest.allowed_folders``; ``personal-llm folders allow
  PATH`` adds one) **or watches** (``personal-llm watch add PATH``, engine/watch.py). Paths are compared after resolving symbolic links, so a link inside an allowed folder
  that leads out of it is refused, and so is ``..``;
- **never** from the places that hold secrets, even inside an allowed folder: the profile (the store, its
  settings and logs), the keychain file, ``~/.ssh``, ``~/.gnupg``, cloud and container credentials
  (``~/.aws``, ``~/.config/gcloud``, ``~/.azure``, ``~/.docker``, ``~/.kube``), password stores and browser
  profiles, and files such as ``.env``, ``.netrc`` or ``id_rsa`` wherever they are;
- **never through a hard link** to a file in one of those places: a regular file with more than one link
  is compared, by ``(st_dev, st_ino)``, with the files of the protected places (an index of them is built
  when the first such file is met, and kept for :data:`LINK_INDEX_SECONDS` unless a protected place's
  own folder changed; a file with one link costs one ``stat``). A resolved path cannot show a hard link: both names are the file.

Everything else goes through the upload form (the client sends the bytes). A refused path named in a
request is a 403 for the whole request; a refused file met while walking an allowed folder is a
``failed`` result with the reason, and the walk goes on.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import stat
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import UserError

log = logging.getLogger(__name__)

# Relative to the user's home folder.
SECRET_DIRS = (
    ".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".config/gcloud", ".password-store",
    ".local/share/keyrings", ".local/share/python_keyring", ".config/python_keyring",
    ".mozilla", ".thunderbird", ".config/google-chrome", ".config/chromium", ".config/BraveSoftware",
    ".config/microsoft-edge", ".config/vivaldi", ".config/opera", ".var/app",
    "Library/Keychains", "Library/Cookies", "Library/Application Support/Google/Chrome",
    "Library/Application Support/Firefox", "Library/Application Support/BraveSoftware",
    "Library/Application Support/Microsoft Edge", "Library/Safari",
    "AppData/Roaming/Mozilla", "AppData/Local/Google/Chrome", "AppData/Local/Microsoft/Edge",
    "AppData/Local/BraveSoftware", "AppData/Roaming/Microsoft/Credentials", "AppData/Local/Microsoft/Credentials",
    "AppData/Roaming/Microsoft/Protect",
)
SECRET_NAMES = (
    ".env", ".env.*", "*.env", ".netrc", "_netrc", ".pgpass", ".git-credentials", ".npmrc", ".pypirc",
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "credentials", "credentials.*", "*.kdbx",
)

LINK_INDEX_SECONDS = 30.0
"""How long the index of the protected places' files is trusted before it is built again (shared by every
policy with the same places: a server builds it once for many requests)."""
MAX_PROTECTED_FILES = 200_000
"""Past this many files in the protected places, a file with more than one link is refused unchecked."""


class PathRefused(UserError):
    """A path a client asked the server to read is outside the policy (HTTP 403)."""


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(os.path.abspath(os.path.expanduser(str(path)))))


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _show(path: str | Path) -> str:
    from .ingest import display_path

    return display_path(path)


def keyring_files() -> list[Path]:
    """Files the configured keychain backend keeps secrets in (file-based backends only)."""
    try:
        import keyring

        kr = keyring.get_keyring()
    except Exception as e:  # no backend at all: nothing to protect here
        log.info("no keyring backend to protect: %s", type(e).__name__)
        return []
    out = []
    for backend in [kr, *getattr(kr, "backends", [])]:
        file_path = getattr(backend, "file_path", None)
        if isinstance(file_path, str) and file_path:
            out.append(Path(file_path))
    return out


_INDEXES: dict[tuple[tuple[Path, str], ...], tuple[float, tuple[int, ...], dict[tuple[int, int], str]]] = {}
_INDEX_LOCK = threading.Lock()


def _changed_at(path: Path) -> int:
    try:
        return os.stat(path, follow_symlinks=False).st_mtime_ns
    except OSError:
        return 0


def _index(places: Iterable[tuple[Path, str]]) -> dict[tuple[int, int], str]:
    """(st_dev, st_ino) of every regular file in or at these places (symbolic links not followed), with
    the place's label; stops past MAX_PROTECTED_FILES."""
    out: dict[tuple[int, int], str] = {}
    for place, label in places:
        todo = [str(place)]
        try:
            st = os.stat(place, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            out[(st.st_dev, st.st_ino)] = label
            continue
        while todo:
            try:
                with os.scandir(todo.pop()) as it:
                    entries = list(it)
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        out.setdefault((st.st_dev, st.st_ino), label)
                except OSError:
                    continue
                if len(out) > MAX_PROTECTED_FILES:
                    return out
    return out


class PathPolicy:
    """Callable as an ingest ``allow`` hook: ``policy(path)`` is None when the path may be read, else why not."""

    def __init__(self, allowed: Iterable[str | Path], *, profile: Path, home: Path | None = None,
                 extra_denied: Iterable[str | Path] = ()) -> None:
        home = home or Path.home()
        self.allowed = [_real(p) for p in allowed]
        denied: list[tuple[Path, str]] = [(_real(profile), "your Personal LLM profile")]
        for f in keyring_files():
            denied += [(_real(f), "the keychain file"), (_real(f).parent, "the keychain's folder")]
        denied += [(_real(home / d), f"~/{d}") for d in SECRET_DIRS]
        denied += [(_real(p), _show(p)) for p in extra_denied]
        self.denied = denied

    @classmethod
    def for_engine(cls, eng: Any) -> PathPolicy:
        """The policy for an open engine, with the allowed and watched folders as saved now (`personal-llm
        folders allow` and `watch add` take effect without restarting the server)."""
        from .config import load_settings, log_dir

        home: Path = eng.home
        try:
            settings = load_settings(home)
        except UserError:
            settings = eng.settings
        watched = eng.watched_paths() if hasattr(eng, "watched_paths") else []
        return cls([*settings.ingest.allowed_folders, *watched], profile=home, extra_denied=[log_dir()])

    def secret(self, path: str | Path) -> str | None:
        """Why this path is a place of secrets the API never reads, or None."""
        real = _real(path)
        for folder, label in self.denied:
            if _within(real, folder):
                return f"{_show(path)} is in {label}, which the API never reads"
        for name in {Path(path).name, real.name}:
            if any(fnmatch.fnmatch(name.lower(), pat) for pat in SECRET_NAMES):
                return f"{_show(path)} looks like a file of secrets ({name}), which the API never reads"
        return self.linked_at(path)

    def linked_at(self, path: str | Path) -> str | None:
        """Why the file at ``path`` (links followed) is a hard link to a protected file, or None."""
        try:
            st = os.stat(path)
        except OSError:
            return None  # gone or unreadable: the read says so
        return self.linked(path, st)

    def linked(self, path: str | Path, st: os.stat_result) -> str | None:
        """Why the file ``st`` describes (``path`` names it) is a hard link to a protected file, or None.

        Only a regular file with more than one link can be one; such a file is looked up in the index of
        the protected places' files. Pass the ``fstat`` of an opened file to check what was really opened."""
        if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
            return None
        inodes = self._protected_inodes()
        if inodes is None:
            return (f"{_show(path)} has other names (hard links), and the places of secrets hold too many files "
                    "to check that it is none of theirs; upload the file instead (POST /ingest/upload)")
        label = inodes.get((st.st_dev, st.st_ino))
        if label is None:
            return None
        return f"{_show(path)} is a hard link to a file in {label}, which the API never reads"

    def _protected_inodes(self) -> dict[tuple[int, int], str] | None:
        places = tuple(self.denied)
        tops = tuple(_changed_at(p) for p, _ in places)  # a file added to ~/.ssh, say, is seen at once
        with _INDEX_LOCK:
            built = _INDEXES.get(places)
            if built is None or built[1] != tops or time.monotonic() - built[0] > LINK_INDEX_SECONDS:
                built = (time.monotonic(), tops, _index(places))
                _INDEXES.clear()  # one set of places per process in practice; never more than one kept
                _INDEXES[places] = built
        return built[2] if len(built[2]) <= MAX_PROTECTED_FILES else None

    def __call__(self, path: Path) -> str | None:
        if (why := self.secret(path)) is not None:
            return why
        real = _real(path)
        if any(_within(real, folder) for folder in self.allowed):
            return None
        shown = _show(path)
        if not self.allowed:
            return (f"{shown}: the API reads files only from folders you allowed, and none are allowed yet. "
                    "Allow one with `personal-llm folders allow PATH`, or upload the file (POST /ingest/upload).")
        if real != Path(os.path.abspath(path)):
            return (f"{shown} leads (through a symbolic link) outside the folders you allowed for the API; "
                    "upload the file instead (POST /ingest/upload)")
        return (f"{shown} is outside the folders you allowed for the API (`personal-llm folders` lists them); "
                "upload the file instead (POST /ingest/upload)")

    def check_request(self, paths: Iterable[str | Path]) -> None:
        """Raise PathRefused for the first path of a request that may not be read."""
        for p in paths:
            if (why := self(Path(p))) is not None:
                raise PathRefused(why)
