"""The engine's link to a language model: one router per open store, built from the current settings on
first use and rebuilt after the settings change. Graph extraction, consolidation and answers share it."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from .context import Context
from .settings_file import SavedSection

if TYPE_CHECKING:  # the client (and pydantic, its models') loads when first used: a recall never uses it
    from .config import LLMSettings
    from .llm import Health, LLMRouter

log = logging.getLogger(__name__)


class LanguageModel:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self._router: LLMRouter | None = None
        self._lock = threading.Lock()  # one per engine: two open stores don't wait on each other
        self._saved = SavedSection(ctx.home, "llm")

    def _follow_saved_settings(self) -> None:
        """Another program (`personal-llm config set llm.…`, the app) saved other language-model settings
        while this engine runs (a server, the app): use them from now on, as a restart would."""
        saved = self._saved.changed(self.ctx.settings.llm)
        if saved is None:
            return
        self.ctx.settings = self.ctx.settings.model_copy(update={"llm": saved})
        self._router = None  # its connections go when the calls still using it return (LLMRouter)
        log.info("language model settings changed on disk: reconnecting")

    def settings(self) -> LLMSettings:
        """The language-model settings in use (those another program saved meanwhile included), without
        building the router."""
        with self._lock:
            self._follow_saved_settings()
            return self.ctx.settings.llm

    @property
    def router(self) -> LLMRouter:
        """The language-model router for the current settings, built on first use (and again when the saved
        settings changed)."""
        with self._lock:
            self._follow_saved_settings()
            if self._router is None:
                from .llm import LLMConfig, LLMRouter

                self._router = LLMRouter(LLMConfig.model_validate(self.ctx.settings.llm.model_dump()))
            return self._router

    def reset(self) -> None:
        """Drop the router (after `settings.llm` changed, or on close); the next use builds a new one. It is
        not closed here: a health check, an answer or an extraction on another thread may still be using it,
        and its connections go when they return (LLMRouter)."""
        with self._lock:
            self._router = None
            self._saved.seen()  # saved by this engine: already in use

    def status(self, *, refresh: bool = False) -> Health:
        """Can the configured model answer? Cached; `detail` is written for people."""
        return self.router.health(refresh=refresh)

    def ready(self) -> tuple[LLMRouter | None, str]:
        """The router when its model can answer now (health is cached), else None and why not."""
        router = self.router
        health = router.health()
        return (router if health.ok else None), health.detail

    @staticmethod
    def check(settings: LLMSettings) -> Health:
        """Check a configuration (saved or not) with a fresh router, asking the server now."""
        from .llm import LLMConfig, LLMRouter

        with LLMRouter(LLMConfig.model_validate(settings.model_dump())) as router:
            return router.health(refresh=True)
