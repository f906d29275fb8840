"""A numpy forward pass of the packaged all-MiniLM-L6-v2 (BERT, 6 layers, mean pooling, unit length).

It reads the same safetensors weights and tokenizer as sentence-transformers and gives the same vectors
(cosine > 0.99999; a test compares them with sentence-transformers run in the test). It needs only numpy,
`tokenizers` and `safetensors` — no torch — so it loads in a fraction of a second and takes ~90 MB
instead of ~600. The default model runs on ONNX Runtime (engine/onnx_minilm.py, the same graph); this
runtime is what that graph is checked against when it is built, and what runs when it cannot be used:
queries and captures on one BLAS thread, ingest batches (texts sorted by token count and cut into batches
of similar length, so little work goes to padding, `plan_batches`) on a bounded number of BLAS threads.
See docs/performance.md, "The embedding runtime".
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
import threading
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from . import heap, native

# A batch is at most this many texts and this many tokens (padded rows x columns): beyond that the
# activations stop fitting in the CPU's cache and a larger batch is no faster.
BATCH_TEXTS = 64
BATCH_TOKENS = 4096

_controller_lock = threading.Lock()
_controller: Any = None
_one_thread = False  # numpy's BLAS is known to run on one thread


def blas() -> None:
    """numpy's BLAS on one thread, from the first call on. Called when any embedding model loads
    (engine/embeddings.py): besides this runtime's products, the vector mirror's exact rescoring and its
    near-duplicate keys are numpy's too, whatever runtime embeds."""
    global _one_thread
    if _one_thread:
        return
    with _controller_lock:
        if _one_thread:
            return
        # A query or a capture is a few small matrix products: a BLAS thread per core gains nothing there and,
        # on a busy machine, the threads fight whatever else runs (one sentence took up to 1.4 s under load,
        # against ~20 ms on one thread). Set in code, not through environment variables, so every entry point
        # gets it; where numpy's bundled OpenBLAS already runs one thread (the CLI starts it so), nothing is
        # set: threadpoolctl finds BLAS by looking at every library the process has loaded (~20 ms).
        if _bundled_openblas_threads() != 1:
            _blas_controller().limit(limits=1, user_api="blas")
        _one_thread = True


def _blas_controller() -> Any:
    """The process's threadpoolctl controller, made on first use (called with _controller_lock held, or after
    blas())."""
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
    return _controller


def _bundled_openblas_threads() -> int | None:
    """The threads of the OpenBLAS a numpy wheel bundles (numpy.libs/, .dylibs/), asked of the library numpy
    has loaded; None where there is none (another BLAS, another build: threadpoolctl then looks)."""
    import ctypes
    import glob

    where = os.path.dirname(np.__file__)
    for path in glob.glob(f"{where}.libs/*scipy_openblas*") + glob.glob(os.path.join(where, ".dylibs", "*scipy_openblas*")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads"):
            get = getattr(lib, name, None)
            if get is not None:
                return int(get())
    return None


def batch_threads() -> int:
    """BLAS threads for a batch (ingest, a rebuild): half the cores, at most 4 — bounded, whoever else runs.
    On a busy 2-core machine two OpenBLAS threads made a batch of 64 chunks 3.4x slower than one (22.5 s
    against 6.6 s, load average ~6): the threads spin against the other processes."""
    return max(1, min(4, (os.cpu_count() or 1) // 2))


def threads(n: int) -> AbstractContextManager[Any]:
    """Run numpy's BLAS on `n` threads inside the block (one outside it)."""
    blas()
    if n <= 1:
        return nullcontext()
    with _controller_lock:
        ctl = _blas_controller()
    return ctl.limit(limits=n, user_api="blas")  # type: ignore[no-any-return]


# erf for the exact GELU without scipy: Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7, below float32's
# resolution of the activations it is applied to).
_P = np.float32(0.3275911)
_A = tuple(np.float32(a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))
_SQRT_HALF = np.float32(1.0 / math.sqrt(2.0))


def gelu(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + erf(x / sqrt 2)), in place where it can (float32)."""
    z = np.abs(x) * _SQRT_HALF
    t = 1.0 / (1.0 + _P * z)
    poly = _A[0] * t
    for a in _A[1:]:
        poly += a
        poly *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z  # 1 - erf(|x|/sqrt 2)
    np.copysign(poly, x, out=poly)  # 1 - erf(|u|) carries the sign of x: 1 + erf(u) = 2 - that for x > 0
    # for x >= 0: 1 + erf = 2 - poly; for x < 0: 1 + erf = |poly| = -poly  ->  (1 + sign) - poly
    out = np.where(x >= 0, np.float32(2.0), np.float32(0.0)).astype(np.float32)
    out -= poly
    out *= x
    out *= np.float32(0.5)
    return out


def map_weights(path: Path) -> tuple[dict[str, np.ndarray], mmap.mmap]:
    """The tensors of a safetensors file as read-only arrays over a memory map of it: nothing is read until
    used, and what is read stays in the page cache rather than in this process's heap."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    data = np.frombuffer(mapping, dtype=np.uint8)
    kinds = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = data[8 + n + a : 8 + n + b].view(kinds[t["dtype"]]).reshape(t["shape"])
    return out, mapping


def read_model(model_dir: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The model's config.json and its weights (float32 arrays by safetensors name)."""
    from safetensors.numpy import load_file

    cfg = json.loads((model_dir / "config.json").read_text())
    with native.call():
        w = {k: v.astype(np.float32, copy=False) for k, v in load_file(str(model_dir / "model.safetensors")).items()}
    return cfg, w


def load_tokenizer(model_dir: Path) -> Any:
    """The model's tokenizer, truncating at its max_seq_length, no padding. Its settings are never changed
    afterwards, so one Tokenizer serves encode calls from several threads."""
    from tokenizers import Tokenizer

    st_cfg = json.loads((model_dir / "sentence_bert_config.json").read_text())
    with native.call():
        tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.enable_truncation(int(st_cfg.get("max_seq_length", 256)))
    tok.no_padding()
    return tok


def pad_batch(ids_list: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, attention mask) of one batch, padded to its longest list."""
    b, n = len(ids_list), max(len(i) for i in ids_list)
    ids = np.zeros((b, n), dtype=np.int64)
    mask = np.zeros((b, n), dtype=np.float32)
    for r, seq in enumerate(ids_list):
        ids[r, : len(seq)] = seq
        mask[r, : len(seq)] = 1.0
    return ids, mask


def plan_batches(lengths: list[int], batch_size: int = BATCH_TEXTS) -> list[list[int]]:
    """Indices of the texts in each batch: sorted by token count (longest first) and cut into batches of at
    most `batch_size` texts and BATCH_TOKENS padded tokens, so a batch pads little."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    out = []
    s = 0
    while s < len(order):
        take = max(1, min(batch_size, BATCH_TOKENS // max(lengths[order[s]], 1)))
        out.append(order[s : s + take])
        s += take
    return out


class MiniLM:
    """BertModel + mean pooling + L2 normalisation, as sentence-transformers runs all-MiniLM-L6-v2."""

    def __init__(self, model_dir: Path, *, mapped: bool = False):
        """`mapped`: the weights are used where they lie in the memory-mapped file, as they are (nothing read
        ahead, rearranged or copied: ~20 ms from nothing to a query's vector, against ~0.15 s to import ONNX
        Runtime and make its session) — for a process that encodes a few texts and exits (the CLI). Not
        mapped, the layers' matrices are rearranged once for batches (~0.1 s)."""
        blas()
        self._mapping: mmap.mmap | None = None
        if mapped:
            cfg = json.loads((model_dir / "config.json").read_text())
            w, self._mapping = map_weights(model_dir / "model.safetensors")
        else:
            cfg, w = read_model(model_dir)
        self.heads = int(cfg["num_attention_heads"])
        self.eps = np.float32(cfg["layer_norm_eps"])
        self.word = w["embeddings.word_embeddings.weight"]
        self.pos = w["embeddings.position_embeddings.weight"]
        self.type0 = w["embeddings.token_type_embeddings.weight"][0]
        self.emb_ln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        dh = self.word.shape[1] // self.heads
        self.scale = scale = np.float32(1.0 / math.sqrt(dh))
        self.layers: list[dict[str, Any]] = []
        for i in range(int(cfg["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            common = {
                "o_b": w[p + "attention.output.dense.bias"],
                "ln1": (w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"]),
                "i_b": w[p + "intermediate.dense.bias"],
                "f_b": w[p + "output.dense.bias"],
                "ln2": (w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]),
            }
            if mapped:  # [out, in] matrices multiplied transposed (BLAS reads them as they are)
                self.layers.append({
                    **{f"{x}_w": w[p + f"attention.self.{name}.weight"].T
                       for x, name in (("q", "query"), ("k", "key"), ("v", "value"))},
                    **{f"{x}_b": w[p + f"attention.self.{name}.bias"]
                       for x, name in (("q", "query"), ("k", "key"), ("v", "value"))},
                    "o_w": w[p + "attention.output.dense.weight"].T,
                    "i_w": w[p + "intermediate.dense.weight"].T,
                    "f_w": w[p + "output.dense.weight"].T,
                    **common,
                })
                continue
            # the attention scale is folded into the query weights (one multiply fewer per score)
            qw, qb = w[p + "attention.self.query.weight"] * scale, w[p + "attention.self.query.bias"] * scale
            self.layers.append({
                "qkv_w": np.ascontiguousarray(np.concatenate(
                    [qw, w[p + "attention.self.key.weight"], w[p + "attention.self.value.weight"]]).T),
                "qkv_b": np.concatenate([qb, w[p + "attention.self.key.bias"], w[p + "attention.self.value.bias"]]),
                "o_w": np.ascontiguousarray(w[p + "attention.output.dense.weight"].T),
                "i_w": np.ascontiguousarray(w[p + "intermediate.dense.weight"].T),
                "f_w": np.ascontiguousarray(w[p + "output.dense.weight"].T),
                **common,
            })
        self.tokenizer = load_tokenizer(model_dir)
        self.dimension = int(cfg["hidden_size"])

    def _ln(self, x: np.ndarray, gb: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        x -= x.mean(-1, keepdims=True)
        v = np.einsum("...i,...i->...", x, x)[..., None] / np.float32(x.shape[-1])
        v += self.eps
        np.sqrt(v, out=v)
        x /= v
        x *= gb[0]
        x += gb[1]
        return x

    def _forward(self, ids_list: list[list[int]]) -> np.ndarray:
        """Vectors of one batch of token id lists (padded here to the batch's longest)."""
        ids, mask = pad_batch(ids_list)
        b, n = ids.shape
        padded = bool((mask == 0).any())
        h = self.heads
        dh = self.word.shape[1] // h
        x = self.word[ids] + self.pos[:n][None] + self.type0
        x = self._ln(x, self.emb_ln)
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :] if padded else None
        for lw in self.layers:
            if "qkv_w" in lw:
                qkv = x @ lw["qkv_w"]
                qkv += lw["qkv_b"]
                qkv = qkv.reshape(b, n, 3, h, dh)
                q = qkv[:, :, 0].transpose(0, 2, 1, 3)
                k = qkv[:, :, 1].transpose(0, 2, 3, 1)
                v = qkv[:, :, 2].transpose(0, 2, 1, 3)
            else:
                q = x @ lw["q_w"]
                q += lw["q_b"]
                q *= self.scale
                k = x @ lw["k_w"]
                k += lw["k_b"]
                v = x @ lw["v_w"]
                v += lw["v_b"]
                q = q.reshape(b, n, h, dh).transpose(0, 2, 1, 3)
                k = k.reshape(b, n, h, dh).transpose(0, 2, 3, 1)
                v = v.reshape(b, n, h, dh).transpose(0, 2, 1, 3)
            s = q @ k
            if bias is not None:
                s += bias
            s -= s.max(-1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(-1, keepdims=True)
            a = (s @ v).transpose(0, 2, 1, 3).reshape(b, n, h * dh)
            o = a @ lw["o_w"]
            o += lw["o_b"]
            o += x
            x = self._ln(o, lw["ln1"])
            f = x @ lw["i_w"]
            f += lw["i_b"]
            f = gelu(f)  # exact GELU, as BERT
            y = f @ lw["f_w"]
            y += lw["f_b"]
            y += x
            x = self._ln(y, lw["ln2"])
        pooled = np.einsum("bnd,bn->bd", x, mask) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def encode(self, texts: list[str], batch_size: int = BATCH_TEXTS, *, n_threads: int = 1) -> np.ndarray:
        """Unit vectors, one row per text. Texts are sorted by token count and cut into batches of at most
        `batch_size` texts and BATCH_TOKENS padded tokens, so a batch pads little; `n_threads` BLAS threads."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        with native.call():
            ids = [e.ids for e in self.tokenizer.encode_batch(texts)]
        with threads(n_threads):
            for idx in plan_batches([len(i) for i in ids], batch_size):
                with native.call():
                    out[idx] = self._forward([ids[i] for i in idx])
        if self._mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
            self._mapping.madvise(mmap.MADV_DONTNEED)  # the file's pages this call read leave the process
        if len(texts) > 8:
            heap.trim()  # a batch's activations are tens of MB: glibc would keep them
        return out
