"""What every part of the engine shares: the store, the settings, who is acting, the vector space, the
audit log and the change feed. The facade builds one `Context` per open store and hands it to each part.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .audit import AuditLog
from .keys import Profile
from .settings_file import SettingsPreview
from .space import Mutation, VectorSpace
from .store import Connection, Store

if TYPE_CHECKING:
    from .config import Settings

log = logging.getLogger(__name__)

_BUILDING = threading.Lock()


@dataclass
class Changes:
    """What a write changed, so each view can decide whether to refresh."""

    action: str
    memories: set[str] = field(default_factory=set)
    documents: set[str] = field(default_factory=set)
    graph: bool = False


class ChangeFeed:
    """The listeners told, after each committed write, what it changed."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[Changes], None]] = []

    def subscribe(self, listener: Callable[[Changes], None]) -> None:
        self._listeners.append(listener)

    def emit(self, changes: Changes) -> None:
        for listener in list(self._listeners):
            try:
                listener(changes)
            except Exception:
                log.exception("change listener failed")

    def notify(self, action: str, *, memories: Iterable[str] = (), documents: Iterable[str] = (),
               graph: bool = False) -> None:
        self.emit(Changes(action, memories=set(memories), documents=set(documents), graph=graph))


@dataclass
class Context:
    """The shared core a part is built on. `settings` is replaced when the user saves new ones."""

    store: Store
    _settings: Settings | SettingsPreview  # a short command's: read, built on first use (engine/settings_file.py)
    profile: Profile | None  # a desktop profile's keys; None for a user of a server
    home: Path
    actor: str
    space: VectorSpace
    audit: AuditLog
    changes: ChangeFeed

    @property
    def settings(self) -> Settings:
        settings = self._settings
        if isinstance(settings, SettingsPreview):
            with _BUILDING:  # one build: a change a part makes to the settings is never made to a copy
                settings = self._settings
                if isinstance(settings, SettingsPreview):
                    settings = self._settings = settings.full()
        return settings

    @settings.setter
    def settings(self, value: Settings) -> None:
        self._settings = value

    @property
    def con(self) -> Connection:
        """This thread's connection to the store."""
        return self.store.con

    def mutation(self) -> Mutation:
        """`with ctx.mutation() as (con, touched):` — one transaction; the vector mirror follows it."""
        return self.space.mutation()
