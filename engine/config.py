"""The user's settings, beside the store in the profile (engine/paths.py: where the profile lives). A short command
reads them without building these models where it can (engine/settings_file.py)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from .errors import UserError
from .locking import settings_lock
from .paths import APP_NAME as APP_NAME
from .paths import HOME_ENV as HOME_ENV
from .paths import PROFILE_FILE as PROFILE_FILE
from .paths import SETTINGS_FILE, write_atomic
from .paths import STORE_FILE as STORE_FILE
from .paths import home_dir as home_dir
from .paths import log_dir as log_dir

log = logging.getLogger(__name__)


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


class FactsSettings(BaseModel):
    # Facts from conversations as they are stored (engine/extraction.py), when a language model is configured.
    enabled: bool = True


class OcrSettings(BaseModel):
    # Read scanned PDF pages and image files (png, jpg, tiff, webp) with the offline OCR engine (engine/ocr.py).
    enabled: bool = True


Permission = Literal["read_only", "write", "sensitive"]
MemoryKind = Literal["fact", "episodic", "procedural"]
_ALL_KINDS: tuple[MemoryKind, ...] = ("fact", "episodic", "procedural")


class MemoryScope(BaseModel):
    """What an agent may read and write. `projects` None: every project (and memories without one)."""

    kinds: list[MemoryKind] = Field(default_factory=lambda: list(_ALL_KINDS))
    documents: bool = True  # may read documents' passages
    projects: list[str] | None = None
    write_kinds: list[MemoryKind] = Field(default_factory=list)  # empty: no writes
    write_projects: list[str] | None = None  # None: any project it may read


class AgentSettings(BaseModel):
    """One agent: a configuration, not code (docs/agents.md)."""

    name: str = Field(min_length=1, max_length=60)
    description: str = ""
    system_prompt: str = ""
    tools: list[str] = Field(default_factory=list)  # tool names; "mcp:SERVER" offers all of a server's tools
    scope: MemoryScope = Field(default_factory=MemoryScope)
    allowed: list[str] = Field(default_factory=list)  # `write` tools it runs without asking (sensitive always asks)
    max_steps: int = Field(default=6, ge=1, le=50)
    time_limit: float = Field(default=300.0, gt=0)  # seconds for the whole run
    tool_timeout: float = Field(default=30.0, gt=0)  # seconds for one tool call


class McpServerSettings(BaseModel):
    """Another MCP server whose tools agents may use: a program started over stdio."""

    name: str = Field(min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_-]+$")
    command: str
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    permissions: dict[str, Permission] = Field(default_factory=dict)  # tool → level; unlisted: sensitive


class AgentsSettings(BaseModel):
    agents: list[AgentSettings] = Field(default_factory=list)  # beside the built-in Research and Organiser
    mcp_servers: list[McpServerSettings] = Field(default_factory=list)


class Settings(BaseModel):
    """User settings, stored as JSON next to the store. Nothing secret lives here."""

    llm: LLMSettings = Field(default_factory=LLMSettings)
    embedding_model: str = "all-MiniLM-L6-v2"  # or a local sentence-transformers model dir; "none" = lexical only
    hotkey: str = "Ctrl+Shift+Space"
    max_file_mb: float = 50.0
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    ocr: OcrSettings = Field(default_factory=OcrSettings)
    facts: FactsSettings = Field(default_factory=FactsSettings)
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
    agents: AgentsSettings = Field(default_factory=AgentsSettings)


def load_settings(home: Path | None = None) -> Settings:
    path = (home or home_dir()) / SETTINGS_FILE
    if not path.exists():
        return Settings()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"The settings file {path} is not valid ({type(e).__name__}); fix or delete it.") from e
    return settings_of(data, path)


def settings_of(data: Any, path: Path) -> Settings:
    """The settings `data` (settings.json at `path`, parsed) holds."""
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        raise UserError(f"The settings file {path} is not valid ({type(e).__name__}); fix or delete it.") from e


def save_settings(settings: Settings, home: Path | None = None) -> None:
    write_atomic((home or home_dir()) / SETTINGS_FILE, settings.model_dump_json(indent=2))


def settings_changes(before: Settings, after: Settings) -> dict[str, Any]:
    """What `after` changed of `before`, as dotted names (`llm.model`, `ocr.enabled`, `theme`) to values;
    lists and the agents' section count as one value each."""
    out: dict[str, Any] = {}

    def walk(a: BaseModel, b: BaseModel, prefix: str) -> None:
        for name in type(a).model_fields:
            x, y = getattr(a, name), getattr(b, name)
            if isinstance(x, BaseModel) and isinstance(y, BaseModel) and name != "agents":
                walk(x, y, f"{prefix}{name}.")
            elif x != y:
                out[prefix + name] = y.model_copy(deep=True) if isinstance(y, BaseModel) else y

    walk(before, after, "")
    return out


def with_changes(settings: Settings, changes: Mapping[str, Any]) -> Settings:
    """`settings` with `changes` (as settings_changes gives them) applied, validated; the original is kept."""
    data = settings.model_dump()
    for key, value in changes.items():
        *path, field = key.split(".")
        at = data
        for part in path:
            at = at[part]
        if field not in at:
            raise UserError(f"There is no setting called {key}.")
        at[field] = value.model_dump() if isinstance(value, BaseModel) else value
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        problem = e.errors()[0]
        where = ".".join(str(p) for p in problem["loc"])
        raise UserError(f"The setting {where} cannot be {problem.get('input')!r}: {problem['msg']}.") from None


def update_settings(changes: Mapping[str, Any], home: Path | None = None) -> Settings:
    """Change only these settings in settings.json, keeping everything else as it is in the file now (another
    program may have changed other settings since this one read them). Returns the settings as saved."""
    home = home or home_dir()
    with settings_lock(home):
        saved = with_changes(load_settings(home), changes)
        if changes:
            save_settings(saved, home)
        return saved
