"""Embeddings from a local Ollama (`embedding_model = "ollama:NAME"`: nomic-embed-text, bge-m3, …).

The model runs in Ollama, asked through the official `ollama` client at the host the language model uses
(`llm.host` when `llm.provider` is ollama, else $OLLAMA_HOST or 127.0.0.1:11434). Its space is stamped
with the model's name, its dimension (read from a first vector) and its digest in Ollama, so pulling another
version of the model re-embeds too (engine/space.py). A long text is cut by Ollama to the model's context
(`truncate`), not embedded as windows.

Ollama is a server that may be down: a failure is an `EmbeddingUnavailable` (recall matches words, remember
keeps the text for the background to embed later) and is remembered for RETRY_SECONDS, so that recalls and
captures meanwhile do not wait on a dead host each time; after that the next use asks again.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from .embeddings import Embedder, EmbeddingSpace, EmbeddingUnavailable
from .lazy import lazy_module

if TYPE_CHECKING:
    import httpx
    import ollama
else:
    httpx = lazy_module("httpx")
    ollama = lazy_module("ollama")

log = logging.getLogger(__name__)

PREFIX = "ollama:"
RETRY_SECONDS = 30.0
CONNECT_TIMEOUT = 5.0
BATCH = 32  # texts per request
PROBE = "dimension"


def is_ollama_choice(value: str) -> bool:
    return value.lower().startswith(PREFIX)


def model_of(choice: str) -> str:
    return choice[len(PREFIX):].strip()


def _canonical(name: str) -> str:
    """Ollama's full name: `nomic-embed-text` is `nomic-embed-text:latest`."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


class OllamaEmbedder(Embedder):
    """An embedding model served by Ollama (see the module doc)."""

    retries = True

    def __init__(self, choice: str, *, host: str, api_key: str | None = None, timeout: float = 60.0):
        super().__init__(choice)
        self.name = model_of(choice)
        self.host = host
        self._api_key = api_key
        self._timeout = timeout
        self._client: Any = None
        self._dimension: int | None = None
        self._digest = ""
        self._failed_at = 0.0
        self._lock = threading.Lock()

    # --- identity -------------------------------------------------------------------------------------
    @property
    def space(self) -> EmbeddingSpace:
        self.load()
        assert self._dimension is not None
        return EmbeddingSpace("ollama", self.model_name, self._dimension, f"ollama:{self._digest[:16] or 'unknown'}")

    @property
    def runtime(self) -> str | None:
        return "ollama" if self._dimension is not None else None

    @property
    def ready(self) -> bool:
        return self._dimension is not None and not self._failing()

    @property
    def failed(self) -> EmbeddingUnavailable | None:
        return self._error if self._failing() else None

    def _failing(self) -> bool:
        return self._error is not None and time.monotonic() - self._failed_at < RETRY_SECONDS

    # --- errors ---------------------------------------------------------------------------------------
    def _fail(self, error: EmbeddingUnavailable) -> EmbeddingUnavailable:
        self._error, self._failed_at = error, time.monotonic()
        self._loaded.set()
        return error

    def _mapped(self, e: Exception) -> EmbeddingUnavailable:
        """A client exception as the sentence people read (never the texts)."""
        if isinstance(e, ollama.ResponseError):
            message = str(e.error)
            if e.status_code == 404 and "not found" in message.lower():
                return EmbeddingUnavailable(
                    f"The embedding model '{self.name}' is not installed in Ollama at {self.host}: run "
                    f"`ollama pull {self.name}`, or choose another model in settings.")
            detail = " ".join(message.split())[:200]
            return EmbeddingUnavailable(f"Ollama at {self.host} could not embed with '{self.name}' "
                                        f"(HTTP {e.status_code}: {detail}).")
        if isinstance(e, ConnectionError | httpx.ConnectError | httpx.ConnectTimeout):
            return EmbeddingUnavailable(f"Ollama is not running at {self.host}: start it with `ollama serve` to "
                                        f"search by meaning with '{self.name}'.")
        if isinstance(e, httpx.TimeoutException):
            return EmbeddingUnavailable(f"Ollama at {self.host} did not answer within {self._timeout:g} seconds.")
        return EmbeddingUnavailable(f"Ollama at {self.host} could not be asked for embeddings ({type(e).__name__}).")

    def _call(self, texts: list[str]) -> list[list[float]]:
        if self._failing():
            assert self._error is not None
            raise self._error
        try:
            reply = self._client.embed(model=self.name, input=texts, truncate=True)
            vecs = list(reply.embeddings)
        except Exception as e:  # the client's and httpx's errors: mapped, never raised raw
            error = self._mapped(e)
            log.warning("ollama embeddings failed (%s)", type(e).__name__)
            raise self._fail(error) from None
        if len(vecs) != len(texts):
            raise self._fail(EmbeddingUnavailable(f"Ollama at {self.host} answered {len(vecs)} vectors for "
                                                  f"{len(texts)} texts."))
        self._error = None
        return vecs

    # --- loading --------------------------------------------------------------------------------------
    def load(self):
        """Reach Ollama and learn the model's dimension and digest; later calls return at once."""
        if self._dimension is not None:
            return self
        with self._lock:
            if self._dimension is not None:
                return self
            t0 = time.perf_counter()
            if self._client is None:
                headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else None
                self._client = ollama.Client(host=self.host, headers=headers,
                                             timeout=httpx.Timeout(self._timeout, connect=min(CONNECT_TIMEOUT,
                                                                                               self._timeout)))
            vec = self._call([PROBE])[0]
            try:
                listed = self._client.list().models
                self._digest = next((str(m.digest or "") for m in listed
                                     if _canonical(str(m.model)) == _canonical(self.name)), "")
            except Exception as e:
                log.info("ollama: the model list could not be read (%s)", type(e).__name__)
            self._dimension = len(vec)
            self._model = self
            self.load_seconds = time.perf_counter() - t0
            self._loaded.set()
            log.info("ollama embedding model ready in %.2fs (%d dimensions)", self.load_seconds, self._dimension)
            return self

    # --- encoding -------------------------------------------------------------------------------------
    def encode(self, texts: list[str], *, batch_size: int = 64, small: bool | None = None) -> np.ndarray:
        self.load()
        if not texts:
            return np.zeros((0, self._dimension or 0), dtype=np.float32)
        out: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            out += self._call(texts[start:start + BATCH])
        vecs = np.asarray(out, dtype=np.float32).reshape(len(texts), -1)
        if vecs.shape[1] != self._dimension:
            raise self._fail(EmbeddingUnavailable(
                f"Ollama's '{self.name}' now gives {vecs.shape[1]} dimensions, not {self._dimension}: choose the "
                "model again in settings to re-embed."))
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        return np.ascontiguousarray(vecs / np.where(norms > 0, norms, 1.0), dtype=np.float32)

    def window_spans(self, text: str) -> list[tuple[int, int]]:
        return []  # Ollama reads the model's whole context (and cuts beyond it)
