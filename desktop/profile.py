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


def saved_theme(home: Path) -> str:
    """The appearance chosen in Settings (`theme` in settings.json), read before the engine opens so the
    window's first paint already has it; "system" when unset or unreadable."""
    import json

    try:
        value = json.loads((home / "settings.json").read_text(encoding="utf-8")).get("theme", "system")
    except (OSError, ValueError, AttributeError):
        return "system"
    return value if value in ("system", "light", "dark") else "system"
