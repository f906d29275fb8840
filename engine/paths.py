"""Where the profile lives: one environment variable moves everything. Standard library only (platformdirs
when the profile is not moved), so that a short command can find its profile without importing the engine."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .locking import private_dir

APP_NAME = "personal-llm"
HOME_ENV = "PERSONAL_LLM_HOME"
STORE_FILE = "memory.db"
PROFILE_FILE = "profile.json"
SETTINGS_FILE = "settings.json"
CONNECTION_FILE = "connection.json"  # a profile that lives on a server (engine/remote.py)


def home_dir() -> Path:
    """The profile directory: `$PERSONAL_LLM_HOME`, else the platform's user data dir."""
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME))


def log_dir() -> Path:
    """Rotating logs go here (never memory text). Inside the profile when the profile is moved."""
    if os.environ.get(HOME_ENV):
        return home_dir() / "logs"
    import platformdirs

    return Path(platformdirs.user_log_dir(APP_NAME))


def cache_dir() -> Path:
    """What can be made again (the embedding runtime's check of its graph, the keychain backend found last):
    cache/ in the profile when the profile is moved, else the platform's user cache dir."""
    if os.environ.get(HOME_ENV):
        return home_dir() / "cache"
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME))


def write_atomic(path: Path, data: str) -> None:
    """Write a small file so that a crash leaves either the old or the new content, never half. The file is
    private (0600: mkstemp makes it so), in a folder of the owner's alone."""
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
