"""Where the profile lives, computed without importing the engine (which costs ~0.4 s at startup).

Mirrors `engine.config.home_dir()`; tests/gui/test_app.py checks that the two agree.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

HOME_ENV = "PERSONAL_LLM_HOME"


def profile_home() -> Path:
    env = os.environ.get(HOME_ENV)
    return Path(env).expanduser().resolve() if env else Path(platformdirs.user_data_dir("personal-llm"))


def named_profile(base: Path, name: str) -> Path:
    """The folder of the profile called `name` (engine.remote.profile_home: profiles/NAME under the default)."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name):
        raise SystemExit(f"{name[:70]!r} cannot name a profile: use letters, digits, '.', '_' and '-' (up to 64).")
    return base / "profiles" / name


def profile_kind(home: Path) -> str:
    """local (a store on this computer), server (`connection.json`: it lives on a server) or new (neither yet)."""
    if (home / "memory.db").exists():
        return "local"
    return "server" if (home / "connection.json").exists() else "new"


def saved_theme(home: Path) -> str:
    """The appearance chosen in Settings (`theme` in settings.json), read before the engine opens so the
    window's first paint already has it; "system" when unset or unreadable."""
    import json

    try:
        value = json.loads((home / "settings.json").read_text(encoding="utf-8")).get("theme", "system")
    except (OSError, ValueError, AttributeError):
        return "system"
    return value if value in ("system", "light", "dark") else "system"
