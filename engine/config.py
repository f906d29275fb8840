"""Where the profile lives and the user's settings. One environment variable moves everything."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import BaseModel, Field, ValidationError

from .errors import UserError

log = logging.getLogger(__name__)

APP_NAME = "personal-llm"
HOME_ENV = "PERSONAL_LLM_HOME"
STORE_FILE = "memory.db"
PROFILE_FILE = "profile.json"
SETTINGS_FILE = "settings.json"


def home_dir() -> Path:
    """The profile directory: `$PERSONAL_LLM_HOME`, else the platform's user data dir."""
    env = os.environ.get(HOME_ENV)
    return Path(env).expanduser().resolve() if env else Path(platformdirs.user_data_dir(APP_NAME))


def log_dir() -> Path:
    """Rotating logs go here (never memory text). Inside the profile when the profile is moved."""
    if os.environ.get(HOME_ENV):
        return home_dir() / "logs"
    return Path(platformdirs.user_log_dir(APP_NAME))


class LLMSettings(BaseModel):
    provider: Literal["ollama", "openai", "none"] = "ollama"
    host: str | None = None  # None: $OLLAMA_HOST, else http://127.0.0.1:11434
    model: str = "llama3.2"
    api_key: str | None = None
    timeout: float = 60.0


class IngestSettings(BaseModel):
    # Folders the HTTP API may ingest files from (engine/pathpolicy.py); the CLI and the app are not limited.
    allowed_folders: list[str] = Field(default_factory=list)


class BackupSettings(BaseModel):
    folder: str | None = None  # None: $PERSONAL_LLM_BACKUP_DIR, else backups/ in the profile (engine/backup.py)
    schedule: Literal["daily", "weekly", "off"] = "daily"  # how often the app takes a snapshot while it runs
class OcrSettings(BaseModel):
    # Read scanned PDF pages and image files (png, jpg, tiff, webp) with the offline OCR engine (engine/ocr.py).
    enabled: bool = True


class Settings(BaseModel):
    """User settings, stored as JSON next to the store. Nothing secret lives here."""

    llm: LLMSettings = Field(default_factory=LLMSettings)
    embedding_model: str = "all-MiniLM-L6-v2"  # or a local sentence-transformers model dir; "none" = lexical only
    hotkey: str = "Ctrl+Shift+Space"
    max_file_mb: float = 50.0
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    ocr: OcrSettings = Field(default_factory=OcrSettings)
    vector_cache: bool = True  # keep an in-memory mirror of the vectors for exact, fast search
    api_port: int = 8765
    api_allowed_origins: list[str] = Field(default_factory=list)
    api_max_body_mb: float = 10.0
    decay_after_days: int = 30
    archive_after_days: int = 180
    archive_floor: float = 0.1
    autostart: bool = False
    tray_notice_shown: bool = False
    theme: Literal["system", "light", "dark"] = "system"  # the desktop app's appearance
    api_enabled: bool = False  # the desktop app serves the HTTP API (127.0.0.1) while it runs
    backup: BackupSettings = Field(default_factory=BackupSettings)
    recovery_confirmed: bool = False  # the user confirmed in the app that they kept the recovery key


def write_atomic(path: Path, data: str) -> None:
    """Write a small file so that a crash leaves either the old or the new content, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
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


def load_settings(home: Path | None = None) -> Settings:
    path = (home or home_dir()) / SETTINGS_FILE
    if not path.exists():
        return Settings()
    try:
        return Settings.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as e:
        raise UserError(f"The settings file {path} is not valid ({type(e).__name__}); fix or delete it.") from e


def save_settings(settings: Settings, home: Path | None = None) -> None:
    write_atomic((home or home_dir()) / SETTINGS_FILE, settings.model_dump_json(indent=2))
