"""all-MiniLM-L6-v2 on ONNX Runtime, from the packaged weights: the graph is written here, not downloaded.

`onnxruntime` is already installed for OCR, so this costs no install size. The graph is the same BERT as
engine/minilm.py (embeddings and layer norm, six encoder layers with the attention mask, exact GELU, mean
pooling over the mask, unit length), written as an ONNX model by a few lines of protobuf encoding below
(the `onnx` package would add 27 MB for what is a serialisation of a handful of message types). The
weights come from the same safetensors file, whose sha256 engine.embeddings checks on every load.

The weights are the safetensors file's own tensors, memory-mapped and handed to the session as they are
(the linear layers multiply by the transposed matrix), so building takes milliseconds and nothing is
cached on disk but a verdict: before the graph is used it must agree with the numpy runtime. Probe
sentences are encoded by both and any cosine below AGREEMENT refuses it (engine.embeddings then runs on
numpy). The verdict is kept in a small file in the cache folder, under a key of the weights' sha256, the
graph's version and ONNX Runtime's version, with the numpy vectors of two probes: later loads encode
those two again instead of loading the numpy runtime. See docs/performance.md, "The embedding runtime".
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import struct
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import heap, native
from .locking import private_dir
from .minilm import BATCH_TEXTS, MiniLM, load_tokenizer, map_weights, pad_batch, plan_batches

log = logging.getLogger(__name__)

# Bump when the graph changes: a verdict kept for an older graph is not trusted.
GRAPH_VERSION = 2
AGREEMENT = 0.9999  # the lowest cosine with the numpy runtime accepted on any probe
PROBES = (
    "My sister Alice lives in Lisbon.",
    "Which city is my sibling based in?",
    "Café déjà vu — naïve façade, 東京 and emoji 🙂 in one line.",
    "Note 7: the passport is in the second drawer of the desk, next to the charger and the stapler.",
    " ".join(f"Sentence {i} of a long paragraph about the harbour budget." for i in range(30)),
)

# --- a minimal protobuf writer for the ONNX messages used (field numbers from onnx/onnx.proto) -----------
_FLOAT, _INT32, _INT64 = 1, 6, 7  # TensorProto.DataType
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7  # AttributeProto.AttributeType
_DTYPES = {np.dtype(np.float32): _FLOAT, np.dtype(np.int32): _INT32, np.dtype(np.int64): _INT64}


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 fields: negatives are ten bytes of two's complement
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _int(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n)


def _len(field: int, data: bytes | str) -> bytes:
    raw = data.encode() if isinstance(data, str) else data
    return _varint(field << 3 | 2) + _varint(len(raw)) + raw


def _tensor(name: str, a: np.ndarray, external: bool) -> bytes:
    """A TensorProto: its bytes inline, or marked external (the session is handed the array itself)."""
    head = b"".join(_int(1, d) for d in a.shape) + _int(2, _DTYPES[a.dtype]) + _len(8, name)
    if not external:
        return head + _len(9, np.asarray(a, dtype=a.dtype.newbyteorder("<")).tobytes())
    entries = (("location", "model.safetensors"), ("offset", "0"), ("length", str(a.nbytes)))
    return head + b"".join(_len(13, _len(1, k) + _len(2, v)) for k, v in entries) + _int(14, 1)


def _attribute(name: str, value: float | int | list[int]) -> bytes:
    if isinstance(value, float):
        return _len(1, name) + _int(20, _ATTR_FLOAT) + _varint(2 << 3 | 5) + struct.pack("<f", value)
    if isinstance(value, int):
        return _len(1, name) + _int(20, _ATTR_INT) + _int(3, value)
    return _len(1, name) + _int(20, _ATTR_INTS) + b"".join(_int(8, v) for v in value)


def _value_info(name: str, elem_type: int, dims: list[int | str]) -> bytes:
    shape = b"".join(_len(1, _int(1, d) if isinstance(d, int) else _len(2, d)) for d in dims)
    return _len(1, name) + _len(2, _len(1, _int(1, elem_type) + _len(2, shape)))


class _Graph:
    """Nodes and initializers (outputs named n1, n2, ...), serialised as an ONNX ModelProto."""

    def __init__(self) -> None:
        self.nodes: list[bytes] = []
        self.inits: list[bytes] = []
        self.external: dict[str, np.ndarray] = {}
        self._n = 0

    def const(self, name: str, array: np.ndarray) -> str:
        """An initializer: inline when small, else handed to the session as the array (no copy)."""
        external = array.nbytes >= 1 << 16
        if external:
            self.external[name] = array
        self.inits.append(_len(5, _tensor(name, array, external)))
        return name

    def op(self, op_type: str, *inputs: str, domain: str = "", name: str = "", **attrs: Any) -> str:
        self._n += 1
        out = name or f"n{self._n}"
        node = b"".join(_len(1, i) for i in inputs) + _len(2, out) + _len(3, f"{op_type}_{self._n}")
        node += _len(4, op_type) + b"".join(_len(5, _attribute(k, v)) for k, v in attrs.items())
        if domain:
            node += _len(7, domain)
        self.nodes.append(_len(1, node))
        return out

    def model(self, inputs: list[bytes], outputs: list[bytes]) -> bytes:
        graph = b"".join(self.nodes) + _len(2, "all-MiniLM-L6-v2") + b"".join(self.inits)
        graph += b"".join(_len(11, i) for i in inputs) + b"".join(_len(12, o) for o in outputs)
        opsets = _len(8, _len(1, "") + _int(2, 17)) + _len(8, _len(1, "com.microsoft") + _int(2, 1))
        return _int(1, 8) + opsets + _len(2, "personal-llm") + _len(7, graph)


@dataclass(frozen=True)
class Model:
    graph: bytes  # the serialised ONNX model, without its large initializers
    external: dict[str, np.ndarray]  # those, by name
    mapping: mmap.mmap | None = None  # the memory map they are views of
    words: np.ndarray | None = None  # the word-embedding table [vocabulary, hidden], looked up outside the graph


def build_model(model_dir: Path) -> Model:
    """The ONNX graph of the model: inputs "words" (float32 [batch, tokens, hidden]: the rows of the
    word-embedding table for the token ids, `Model.words[ids]`) and attention_mask (float32 [batch, tokens]),
    right-padded; output "vectors", the unit-length mean-pooled vectors [batch, 384].

    The word-embedding table (47 MB, the largest tensor) stays out of the graph: ONNX Runtime copies every
    initializer into its own memory, where the table would stay resident for good, while a lookup in the
    memory-mapped file touches only the rows of the tokens used, and those pages are let go after each call.

    The large weights are the safetensors file's own tensors (memory-mapped, never copied here): the linear
    layers' [out, in] matrices are multiplied transposed (FusedMatMul transB), so nothing is rearranged.
    Attention, residual + layer norm and bias + GELU are ONNX Runtime's CPU contrib operators (com.microsoft
    MultiHeadAttention, SkipLayerNormalization, BiasGelu: what its transformer optimizer makes of an
    exported BERT; exact GELU). Only small tensors are derived (the token-type row folded into the positions,
    the concatenated q/k/v biases)."""
    cfg = json.loads((model_dir / "config.json").read_text())
    w, mapping = map_weights(model_dir / "model.safetensors")
    heads = int(cfg["num_attention_heads"])
    eps = float(cfg["layer_norm_eps"])
    hidden = int(cfg["hidden_size"])
    g = _Graph()
    words, mask = "words", "attention_mask"
    ms = "com.microsoft"

    def const(name: str) -> str:
        return g.const(name, w[name])

    def linear(x: str, name: str) -> str:  # x @ W.T (the bias is added by the operator that follows)
        return g.op("FusedMatMul", x, const(name + ".weight"), domain=ms, transB=1)

    # embeddings: words + positions + token type 0 (folded into the positions: every token is type 0)
    pos = np.asarray(w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0])
    n_tok = g.op("Slice", g.op("Shape", mask), g.const("one", np.array([1], np.int64)),
                 g.const("two", np.array([2], np.int64)))
    zero = g.const("zero", np.array([0], np.int64))
    x = g.op("Add", words, g.op("Slice", g.const("positions", pos), zero, n_tok, zero))
    x = g.op("LayerNormalization", x, const("embeddings.LayerNorm.weight"), const("embeddings.LayerNorm.bias"),
             axis=-1, epsilon=eps)
    key_mask = g.op("Cast", mask, to=_INT32)
    for i in range(int(cfg["num_hidden_layers"])):
        p = f"encoder.layer.{i}."
        a = p + "attention.self."
        qkv_b = np.concatenate([w[a + "query.bias"], w[a + "key.bias"], w[a + "value.bias"]])
        att = g.op("MultiHeadAttention", linear(x, a + "query"), linear(x, a + "key"), linear(x, a + "value"),
                   g.const(a + "qkv.bias", qkv_b), key_mask, domain=ms, num_heads=heads)
        x = g.op("SkipLayerNormalization", linear(att, p + "attention.output.dense"), x,
                 const(p + "attention.output.LayerNorm.weight"), const(p + "attention.output.LayerNorm.bias"),
                 const(p + "attention.output.dense.bias"), domain=ms, epsilon=eps)
        f = g.op("BiasGelu", linear(x, p + "intermediate.dense"), const(p + "intermediate.dense.bias"), domain=ms)
        x = g.op("SkipLayerNormalization", linear(f, p + "output.dense"), x, const(p + "output.LayerNorm.weight"),
                 const(p + "output.LayerNorm.bias"), const(p + "output.dense.bias"), domain=ms, epsilon=eps)
    # mean pooling over the mask, then unit length
    m3 = g.op("Unsqueeze", mask, g.const("axis2", np.array([2], np.int64)))
    axis1 = g.const("axis1", np.array([1], np.int64))
    total = g.op("ReduceSum", g.op("Mul", x, m3), axis1, keepdims=0)
    count = g.op("Max", g.op("ReduceSum", mask, axis1, keepdims=1), g.const("tiny", np.array(1e-9, np.float32)))
    pooled = g.op("Div", total, count)
    norm = g.op("Max", g.op("ReduceL2", pooled, axes=[-1], keepdims=1), g.const("tinier", np.array(1e-12, np.float32)))
    g.op("Div", pooled, norm, name="vectors")
    model = g.model([_value_info(words, _FLOAT, ["batch", "tokens", hidden]),
                     _value_info(mask, _FLOAT, ["batch", "tokens"])],
                    [_value_info("vectors", _FLOAT, ["batch", hidden])])
    return Model(model, g.external, mapping, w["embeddings.word_embeddings.weight"])


# --- the runtime -----------------------------------------------------------------------------------------


def _session(model: Model, n_threads: int) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    # Set in code, never through environment variables: one thread for a query or a capture (the calling
    # thread runs every operator), a bounded pool for a batch (engine.minilm.batch_threads).
    so.intra_op_num_threads = n_threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3  # ORT's own warnings go to stderr, not our log
    if n_threads > 1:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no busy-waiting on a shared machine
    values = [ort.OrtValue.ortvalue_from_numpy(a) for a in model.external.values()]
    so.add_external_initializers(list(model.external), values)  # they must outlive the session
    with native.call():
        sess = ort.InferenceSession(model.graph, so, providers=["CPUExecutionProvider"])
    # ONNX Runtime keeps its own (prepacked) copy of the weights: the pages of the file read while it made it
    # need not stay resident (read-only and file-backed, they are read again if ever touched)
    _drop_pages(model.mapping)
    return sess, values


def _drop_pages(mapping: mmap.mmap | None) -> None:
    """The pages of the memory-mapped weights leave this process's resident memory (they stay in the page
    cache: touched again, they fault back in, in microseconds)."""
    if mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)


def _shrink_arena() -> Any:
    import onnxruntime as ort

    ro = ort.RunOptions()
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return ro


class OnnxMiniLM:
    """BertModel + mean pooling + L2 normalisation on ONNX Runtime; the same interface as engine.minilm.MiniLM.

    `encode` may be called from several threads at once: ORT sessions run concurrently, and the tokenizer
    is only read. Single-item work runs on a one-thread session, batches on a session with `n_threads`
    threads, made at the first such batch (another ~90 MB while it lives; never on a 2-core machine, where
    batch_threads() is 1)."""

    def __init__(self, model_dir: Path, *, build: Callable[[Path], Model] = build_model):
        self._dir = model_dir
        self._build = build
        self.tokenizer = load_tokenizer(model_dir)
        self.dimension = int(json.loads((model_dir / "config.json").read_text())["hidden_size"])
        model = build(model_dir)
        if model.words is None:
            raise ValueError("the model has no word-embedding table")
        self._words, self._mapping = model.words, model.mapping
        self._sessions = {1: _session(model, 1)}
        self._sessions_lock = threading.Lock()

    def _session_for(self, n_threads: int) -> Any:
        sess = self._sessions.get(n_threads)
        if sess is None:
            with self._sessions_lock:
                sess = self._sessions.get(n_threads)
                if sess is None:
                    sess = self._sessions[n_threads] = _session(self._build(self._dir), n_threads)
                    heap.trim()
        return sess

    def _forward(self, ids_list: list[list[int]], n_threads: int, run_options: Any = None) -> np.ndarray:
        """Vectors of one batch of token id lists (padded here to the batch's longest)."""
        ids, mask = pad_batch(ids_list)
        words = self._words[ids]  # reads the used rows of the memory-mapped table (a copy, [batch, tokens, hidden])
        session = self._session_for(n_threads)[0]
        with native.call():
            return session.run(None, {"words": words, "attention_mask": mask}, run_options)[0]

    def encode(self, texts: list[str], batch_size: int = BATCH_TEXTS, *, n_threads: int = 1) -> np.ndarray:
        """Unit vectors, one row per text, batched as engine.minilm.MiniLM.encode does."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        with native.call():
            ids = [e.ids for e in self.tokenizer.encode_batch(texts)]
        plan = plan_batches([len(i) for i in ids], batch_size)
        for j, idx in enumerate(plan):
            # After a call's last batch, ORT's arena hands back what the batch's activations took (~100 MB
            # for 64 chunks), and glibc returns it to the OS: otherwise a process that ingested once stays
            # that much larger while idle. Between the batches of one call the arena is reused.
            last = j == len(plan) - 1 and len(texts) > 8
            out[idx] = self._forward([ids[i] for i in idx], n_threads, _shrink_arena() if last else None)
        _drop_pages(self._mapping)  # the word-table rows this call read
        if len(texts) > 8:
            heap.trim()
        return out


Runtime = OnnxMiniLM | MiniLM
Check = Callable[[OnnxMiniLM, MiniLM], float]


def agreement(onnx: OnnxMiniLM, numpy: MiniLM) -> float:
    """The lowest cosine between the numpy runtime's vectors of the probes and the ONNX runtime's, one at a
    time and (the short ones) as one padded batch; the long probe is cut at the model's 256 word-pieces."""
    probes = list(PROBES)
    ref = np.concatenate([numpy.encode([p]) for p in probes])
    singles = np.concatenate([onnx.encode([p]) for p in probes])
    batch = onnx.encode(probes[:-1], batch_size=len(probes))
    return float(min((singles * ref).sum(1).min(), (batch * ref[:-1]).sum(1).min()))


def _verdict_file(cache_dir: Path | None, key: str) -> Path | None:
    if cache_dir is None:
        return None
    import onnxruntime as ort

    return cache_dir / f"minilm-{key[:16]}-onnx-g{GRAPH_VERSION}-ort{ort.__version__}.json"


_kept: dict[str, np.ndarray] = {}  # verdicts reached or read by this process (by file name): their probe vectors
_RECHECK = 2  # probes kept with a verdict and encoded again at each load (the short ones)


def _kept_probes(verdict: Path | None) -> np.ndarray | None:
    if verdict is None:
        return None
    if verdict.name in _kept:
        return _kept[verdict.name]
    try:
        kept = np.asarray(json.loads(verdict.read_text())["probes"], dtype=np.float32)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return kept if kept.shape == (_RECHECK, 384) else None


def _keep_verdict(verdict: Path | None, numpy: MiniLM, cosine: float) -> None:
    if verdict is None:
        return
    probes = _kept[verdict.name] = np.concatenate([numpy.encode([p]) for p in PROBES[:_RECHECK]])
    try:
        private_dir(verdict.parent)
        fd, tmp = tempfile.mkstemp(dir=verdict.parent, prefix=".minilm-", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"lowest_cosine": cosine, "probes": probes.tolist()}, f)
        os.replace(tmp, verdict)
    except OSError as e:  # a read-only cache: the next process checks again, nothing else changes
        log.info("could not keep the embedding runtime's check (%s)", type(e).__name__)


def load_runtime(model_dir: Path, *, key: str, cache_dir: Path | None, check: Check = agreement,
                 build: Callable[[Path], Model] = build_model) -> Runtime:
    """The ONNX runtime when it builds and agrees with the numpy runtime (`check`: the lowest cosine over the
    probes, at least AGREEMENT), else the numpy runtime; the reason is logged, never any text.

    `key` names the weights (their sha256): a verdict is kept in `cache_dir` under it, the graph's version
    and ONNX Runtime's, with the numpy vectors of the short probes; a later load encodes those probes
    again instead of loading the numpy runtime, and checks in full if they moved. cache_dir=None: a full
    check at every load."""
    try:
        onnx = OnnxMiniLM(model_dir, build=build)
    except Exception as e:  # no onnxruntime, or it refuses the graph
        log.warning("the embedding model does not run on ONNX Runtime (%s: %s); using the numpy runtime",
                    type(e).__name__, str(e)[:300])
        return MiniLM(model_dir)
    verdict = _verdict_file(cache_dir, key)
    kept = _kept_probes(verdict)
    if kept is not None and (np.concatenate([onnx.encode([p]) for p in PROBES[:_RECHECK]]) * kept).sum(1).min() >= AGREEMENT:
        return onnx
    numpy = MiniLM(model_dir)
    try:
        cosine = float(check(onnx, numpy))
    except Exception as e:
        log.warning("the ONNX Runtime check failed (%s); using the numpy runtime", type(e).__name__)
        return numpy
    if not cosine >= AGREEMENT:
        log.warning("ONNX Runtime's vectors differ from the numpy runtime's (lowest cosine %.6f < %s); "
                    "using the numpy runtime", cosine, AGREEMENT)
        return numpy
    _keep_verdict(verdict, numpy, cosine)
    log.info("embedding model on ONNX Runtime (lowest cosine with the numpy runtime %.7f)", cosine)
    del numpy
    heap.trim()
    return onnx
