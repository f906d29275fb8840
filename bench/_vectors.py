"""Synthetic vectors for the scale benchmarks (bench/scale.py on both backends, bench/_pg.py, bench/api_load.py).

Embedding a million texts with the bundled model would take hours here, so the fills use made-up unit vectors,
of one of two kinds:

- `random`: uniform on the sphere (normalised Gaussian noise). In 384 dimensions no point has neighbours much
  nearer than the rest: the worst case there is for a graph index such as HNSW (recall@10 0.28 at 100,000).
- `text` (the default): drawn from a Gaussian with the mean and covariance of the bundled model's embeddings of
  real sentences (TEXT_SAMPLE sentences of SciFact's abstracts), then normalised. They have the model's
  anisotropy (a few directions carry most of the variance, as text embeddings do) without its clusters.
  bench/pg_hnsw.py measures pgvector's recall@10 on them against as many real embeddings of the same model.

Both draw from a numpy Generator, so a seed gives the same vectors on every backend.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path

import numpy as np

DIM = 384
SCIFACT = Path("/work/shared/data/scifact")
TEXT_SAMPLE = 4000
KINDS = ("text", "random")


def random_unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.standard_normal((n, dim), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def sentences(data: Path, n: int) -> list[str]:
    """The first n sentences (40 characters or more) of SciFact's abstracts (BEIR's corpus.jsonl)."""
    out: list[str] = []
    with open(data / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            for s in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"]):
                if len(s) >= 40:
                    out.append(s)
                    if len(out) == n:
                        return out
    return out


class TextLike:
    """Unit vectors with the mean and covariance of real text embeddings (see the module doc). The statistics
    come from the bundled model's embeddings of `sample` sentences, computed once and kept in the temporary
    folder (a few minutes on a busy machine)."""

    def __init__(self, data: Path = SCIFACT, sample: int = TEXT_SAMPLE) -> None:
        cache = Path(tempfile.gettempdir()) / f"pllm-textlike-{sample}.npz"
        if cache.exists():
            kept = np.load(cache)
            mean, cov = kept["mean"], kept["cov"]
        else:
            from engine.embeddings import Embedder

            if not (data / "corpus.jsonl").exists():
                raise SystemExit(f"text-like vectors need SciFact's corpus.jsonl in {data} (or --vectors random)")
            t0 = time.perf_counter()
            real = Embedder().encode(sentences(data, sample)).astype(np.float64)
            mean, cov = real.mean(0), np.cov(real, rowvar=False)
            np.savez(cache, mean=mean, cov=cov)
            print(f"text-like vectors: statistics of {len(real):,} embedded sentences ({time.perf_counter() - t0:.0f}s)",
                  flush=True)
        w, u = np.linalg.eigh(cov)
        self.mean = mean.astype(np.float32)
        self.dim = len(mean)
        self.basis = (u * np.sqrt(np.clip(w, 0, None))).T.astype(np.float32)  # z @ basis ~ N(0, cov)
        self.participation = float(w.sum() ** 2 / (w ** 2).sum())  # the dimensions the variance effectively spans

    def __call__(self, rng: np.random.Generator, n: int) -> np.ndarray:
        out = np.empty((n, self.dim), dtype=np.float32)
        for start in range(0, n, 50_000):
            m = min(50_000, n - start)
            v = self.mean + rng.standard_normal((m, self.dim), dtype=np.float32) @ self.basis
            out[start:start + m] = v / np.linalg.norm(v, axis=1, keepdims=True)
        return out


def generator(kind: str):
    """A function (rng, n) -> n unit vectors of this kind."""
    if kind == "random":
        return random_unit
    if kind == "text":
        return TextLike()
    raise ValueError(kind)
