"""settings.json as a short command reads it: without building the settings' models (engine/config.py), whose
library (pydantic) costs a cold process ~0.15 s, when the file holds settings they would accept as written.

A CLI `recall` opens the engine with `read_settings`: the file is read and its shape checked against `SHAPE`
(each setting of the right JSON type, a choice among its choices; anything else, such as an agent of the
user's, is left to the models). Settings that pass are kept as read (`SettingsPreview`), and the engine uses
the two it needs to open from them; the models are built from them when anything else asks for the settings,
as they were read. A file that does not pass is read by the models at once, as `load_settings` always did: a
broken file is the same error, a value the models convert ("5" for a number) is converted the same way.

Also here, for the same reason: the stamp of settings.json and a section of it another program saves.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .paths import SETTINGS_FILE, home_dir

if TYPE_CHECKING:
    from pydantic import BaseModel

    from .config import Settings

# The JSON each setting may hold for the models to take it as written (engine/config.py's fields;
# tests/unit/test_settings_file.py checks that the two agree): "str", "str?" (or null), "int", "float" (or a
# whole number, which the model makes a float), "bool", "[str]" (a list of strings), "[]" (only an empty list:
# agents and MCP servers are the models' to check), a tuple of the choices, or a section's own shape.
SHAPE: dict[str, Any] = {
    "llm": {"provider": ("ollama", "openai", "none"), "host": "str?", "model": "str", "api_key": "str?",
            "timeout": "float"},
    "embedding_model": "str",
    "hotkey": "str",
    "max_file_mb": "float",
    "ingest": {"allowed_folders": "[str]"},
    "ocr": {"enabled": "bool"},
    "facts": {"enabled": "bool"},
    "vector_cache": "bool",
    "api_port": "int",
    "api_allowed_origins": "[str]",
    "api_max_body_mb": "float",
    "decay_after_days": "int",
    "archive_after_days": "int",
    "archive_floor": "float",
    "autostart": "bool",
    "tray_notice_shown": "bool",
    "theme": ("system", "light", "dark"),
    "api_enabled": "bool",
    "backup": {"folder": "str?", "schedule": ("daily", "weekly", "off")},
    "recovery_confirmed": "bool",
    "agents": {"agents": "[]", "mcp_servers": "[]"},
}

# what an engine reads of the settings to open (its embedding model, the vector mirror), where the file says
# nothing: the models' defaults (the test checks these too)
DEFAULTS: dict[str, Any] = {"embedding_model": "all-MiniLM-L6-v2", "vector_cache": True}

_EXACT = 2**53  # a whole number a float holds exactly


def _text(value: Any) -> bool:
    if type(value) is not str:
        return False
    try:
        value.encode("utf-8")  # a lone surrogate (a JSON escape) is the models' to judge
    except UnicodeEncodeError:
        return False
    return True


def fits(value: Any, shape: Any) -> bool:
    """True when `value` (parsed JSON) has this shape: the models take it as it is. Keys not in the shape
    are ignored, as the models ignore them."""
    if isinstance(shape, dict):
        return type(value) is dict and all(fits(value[k], s) for k, s in shape.items() if k in value)
    if isinstance(shape, tuple):
        return type(value) is str and value in shape
    if shape == "str":
        return _text(value)
    if shape == "str?":
        return value is None or _text(value)
    if shape == "int":
        return type(value) is int and abs(value) < 2**63
    if shape == "float":
        return type(value) is float or (type(value) is int and abs(value) < _EXACT)
    if shape == "bool":
        return type(value) is bool
    if shape == "[str]":
        return type(value) is list and all(_text(x) for x in value)
    if shape == "[]":
        return type(value) is list and not value
    raise ValueError(f"unknown shape {shape!r}")


class SettingsPreview:
    """Settings read from settings.json that the models take as written (`fits`), not yet built: what an
    engine needs to open, from the file; everything else through `full()`, the models built from the same
    data (engine/context.py builds them when a part first asks for the settings)."""

    def __init__(self, data: dict[str, Any], path: Path):
        self.data = data
        self.path = path

    @property
    def embedding_model(self) -> str:
        return cast(str, self.data.get("embedding_model", DEFAULTS["embedding_model"]))

    @property
    def vector_cache(self) -> bool:
        return cast(bool, self.data.get("vector_cache", DEFAULTS["vector_cache"]))

    @property
    def llm(self) -> Any:
        return self.full().llm

    def full(self) -> Settings:
        from .config import settings_of

        return settings_of(self.data, self.path)


def read_settings(home: Path | None = None) -> Settings | SettingsPreview:
    """The profile's settings as `load_settings` reads them, or, when settings.json fits `SHAPE` (or there
    is none), the same settings not yet built (`SettingsPreview`)."""
    path = (home or home_dir()) / SETTINGS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        data = {}
    except (OSError, ValueError):
        data = None  # the models' reader says what is wrong
    if isinstance(data, dict) and fits(data, SHAPE):
        return SettingsPreview(data, path)
    from .config import load_settings

    return load_settings(home)


def settings_stamp(home: Path | None = None) -> tuple[int, int, int] | None:
    """Changes whenever settings.json is written (each save replaces the file); None when there is none."""
    try:
        st = ((home or home_dir()) / SETTINGS_FILE).stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


_Section = TypeVar("_Section", bound="BaseModel")


class SavedSection:
    """One section of settings.json (`llm`, `agents`) as another program saves it while this one runs (the
    CLI's `config set`, the app, an edit by hand): `changed(current)` looks at the file (one stat) and gives
    the section saved there when the file changed since the last look and that section differs from
    `current`, else None. A half-written or broken file is skipped; it is read again at its next change."""

    def __init__(self, home: Path, name: str, *, seen: bool = True):
        self.home = home
        self.name = name
        self._stamp = settings_stamp(home) if seen else None  # not `seen`: the first look reads the file

    def seen(self) -> None:
        """The file as it is now is in use (this process saved it)."""
        self._stamp = settings_stamp(self.home)

    def changed(self, current: _Section) -> _Section | None:
        from .config import load_settings
        from .errors import UserError

        stamp = settings_stamp(self.home)
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        try:
            saved = getattr(load_settings(self.home), self.name)
        except UserError:  # half written or broken: keep what works
            return None
        return None if saved == current else cast(_Section, saved)
