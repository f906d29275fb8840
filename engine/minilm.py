"""A numpy forward pass of the packaged all-MiniLM-L6-v2 (BERT, 6 layers, mean pooling, unit length).

It reads the same safetensors weights and tokenizer as sentence-transformers and gives the same vectors
(within 2e-7; a test compares them). It loads in a fraction of a second without importing torch, takes
~90 MB instead of ~600, and answers a single query about twice as fast — so recall, quick capture and
the CLI never wait for torch. Large batches (ingest) still go to sentence-transformers, which is faster
there.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

_BLAS_LIMITED = False


def _one_blas_thread() -> None:
    """Run numpy's BLAS on one thread in this process. A query or a capture is a few small matrix products:
    a BLAS thread per core gains nothing there and, on a busy machine, the threads fight whatever else
    runs (one sentence took up to 1.4 s under load, against ~20 ms on one thread). Set in code, not
    through environment variables, so every entry point gets it; torch keeps its own threads for batches."""
    global _BLAS_LIMITED
    if not _BLAS_LIMITED:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
        _BLAS_LIMITED = True


class MiniLM:
    """BertModel + mean pooling + L2 normalisation, as sentence-transformers runs all-MiniLM-L6-v2."""

    def __init__(self, model_dir: Path):
        _one_blas_thread()
        from safetensors.numpy import load_file
        from scipy.special import erf
        from tokenizers import Tokenizer

        self._erf = erf
        cfg = json.loads((model_dir / "config.json").read_text())
        st_cfg = json.loads((model_dir / "sentence_bert_config.json").read_text())
        self.heads = int(cfg["num_attention_heads"])
        self.eps = float(cfg["layer_norm_eps"])
        self.max_len = int(st_cfg.get("max_seq_length", 256))
        w = load_file(str(model_dir / "model.safetensors"))
        self.word = w["embeddings.word_embeddings.weight"]
        self.pos = w["embeddings.position_embeddings.weight"]
        self.type0 = w["embeddings.token_type_embeddings.weight"][0]
        self.emb_ln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers: list[dict[str, Any]] = []
        for i in range(int(cfg["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            self.layers.append({
                "qkv_w": np.ascontiguousarray(np.concatenate(
                    [w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")]).T),
                "qkv_b": np.concatenate([w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")]),
                "o_w": np.ascontiguousarray(w[p + "attention.output.dense.weight"].T),
                "o_b": w[p + "attention.output.dense.bias"],
                "ln1": (w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"]),
                "i_w": np.ascontiguousarray(w[p + "intermediate.dense.weight"].T),
                "i_b": w[p + "intermediate.dense.bias"],
                "f_w": np.ascontiguousarray(w[p + "output.dense.weight"].T),
                "f_b": w[p + "output.dense.bias"],
                "ln2": (w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]),
            })
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_len)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self.dimension = int(cfg["hidden_size"])

    def _ln(self, x: np.ndarray, gb: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + self.eps) * gb[0] + gb[1]

    def _forward(self, texts: list[str]) -> np.ndarray:
        enc = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
        b, n = ids.shape
        h, dh = self.heads, self.word.shape[1] // self.heads
        x = self._ln(self.word[ids] + self.pos[:n][None] + self.type0, self.emb_ln)
        bias = ((1.0 - mask) * -1e9)[:, None, None, :]
        for lw in self.layers:
            q, k, v = np.split(x @ lw["qkv_w"] + lw["qkv_b"], 3, axis=-1)
            q = q.reshape(b, n, h, dh).transpose(0, 2, 1, 3)
            k = k.reshape(b, n, h, dh).transpose(0, 2, 3, 1)
            v = v.reshape(b, n, h, dh).transpose(0, 2, 1, 3)
            s = (q @ k) / math.sqrt(dh) + bias
            s -= s.max(-1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(-1, keepdims=True)
            a = (s @ v).transpose(0, 2, 1, 3).reshape(b, n, h * dh)
            x = self._ln(a @ lw["o_w"] + lw["o_b"] + x, lw["ln1"])
            f = x @ lw["i_w"] + lw["i_b"]
            f = 0.5 * f * (1.0 + self._erf(f / math.sqrt(2.0)))  # exact GELU, as BERT
            x = self._ln(f @ lw["f_w"] + lw["f_b"] + x, lw["ln2"])
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def encode(self, texts: list[str], batch_size: int = 16) -> np.ndarray:
        """Unit vectors, one row per text; texts of similar length are batched together to limit padding."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            out[idx] = self._forward([texts[i] for i in idx])
        return out
