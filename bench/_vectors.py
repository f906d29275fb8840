"""Synthetic vectors for the scale benchmarks (bench/scale.py on both backends, bench/_pg.py, bench/api_load.py).

Embedding a million texts with the bundled model would take hours here, so the fills use made-up unit vectors,
of one of three kinds:

- `random`: uniform on the sphere (normalised Gaussian noise). In 384 dimensions no point has neighbours much
  nearer than the rest: the worst case there is for a graph index such as HNSW (recall@10 0.28 at 100,000).
- `text` (the default): drawn from a Gaussian with the mean and covariance of the bundled model's embeddings of
  real sentences (TEXT_SAMPLE sentences of SciFact's abstracts), then normalised. They have the model's
  anisotropy (a few directions carry most of the variance, as text embeddings do) without its clusters.
- `mixture`: drawn from a mixture fitted to real embeddings (`Mixture`: MIXTURE_CLUSTERS k-means clusters of
  the first MIXTURE_SAMPLE texts of `real_embeddings`, each a Gaussian with its own weight, mean and
  covariance), then normalised: the clusters as well as the spread.

`real_embeddings` are the bundled model's embeddings of the evaluation data's texts (every sentence of
SciFact's abstracts, every LoCoMo and REALTALK turn: ~57,000). How HNSW's recall on each kind compares with
it (bench/pg_hnsw.py, recall@10 of 40 candidates rescored, at hnsw.ef_search 40 / 100 / 200 / 400; only
10,000 and 19,000 measured, the real texts held out of the index as questions, each stand-in asked fresh
draws of its own):

    10,000  real texts 0.987 / 0.999 / 1.000 / 1.000, real questions 0.975 / 0.995 / 0.998 / 1.000,
            mixture 0.967 / 0.994 / 0.998 / 1.000, text 0.866 / 0.964 / 0.992 / 0.999
    19,000  real texts 0.984 / 0.998 / 0.999 / 1.000, real questions 0.967 / 0.994 / 0.999 / 1.000,
            mixture 0.948 / 0.988 / 0.994 / 0.996, text 0.794 / 0.928 / 0.977 / 0.994

So `text` is much harder for HNSW than real embeddings, and `mixture` harder than them too, though far nearer;
from 10,000 to 19,000 both stand-ins lost more than the real embeddings did (at ef_search 100: text 0.964 to
0.928, mixture 0.994 to 0.988, real 0.999 to 0.998 and 0.995 to 0.994). At a million (bench/scale.py
--backend postgres --pg-sweep, 500,000 a table, the same 40 candidates, ef_search 100 / 400 / 1,000): mixture
0.827 / 0.965 / 0.985, text 0.615 / 0.810 / 0.930. No real embeddings were measured there (the mixture was
fitted to the first 11,000 texts).

All draw from a numpy Generator, so a seed gives the same vectors on every backend.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path

import numpy as np

DIM = 384
TEXT_SAMPLE = 4000
KINDS = ("text", "mixture", "random")
MIXTURE_CLUSTERS = 25
MIXTURE_SAMPLE = 11_000  # the real texts (of real_embeddings' order) the mixture is fitted to


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


def add_data_argument(ap) -> None:
    """`--data DIR`, the evaluation data the stand-ins are fitted to (argparse)."""
    ap.add_argument("--data", type=Path, metavar="DIR",
                    help="the evaluation data (scifact/, locomo-dev.json, realtalk-dev/; docs/retrieval.md says where "
                         "each comes from): text-like and mixture vectors are fitted to its texts' embeddings the "
                         "first time, then kept in the temporary folder")


def need(data: Path | None, what: str) -> Path:
    if data is None:
        raise SystemExit(f"{what} need the evaluation data the first time: --data DIR (scifact/, locomo-dev.json, "
                         "realtalk-dev/), or --vectors random")
    return data


def real_texts(data: Path) -> tuple[list[str], list[str]]:
    """(texts, questions) of the evaluation data: every sentence of SciFact's abstracts (and each title) and
    every turn of the LoCoMo and REALTALK conversations, as memories and chunks would hold them; SciFact's
    claims and the conversations' questions, as recalls would ask."""
    texts: list[str] = []
    with open(data / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            texts += [s for s in [doc["title"], *re.split(r"(?<=[.!?])\s+", doc["text"])] if s.strip()]
    with open(data / "scifact" / "queries.jsonl", encoding="utf-8") as f:
        questions = [json.loads(line)["text"] for line in f]
    chats = [c["conversation"] for c in json.loads((data / "locomo-dev.json").read_text(encoding="utf-8"))]
    chats += [json.loads(p.read_text(encoding="utf-8")) for p in sorted((data / "realtalk-dev").glob("*.json"))]
    for chat in chats:
        for key, turns in chat.items():
            if re.fullmatch(r"session_\d+", key):
                texts += [t.get("text") or t.get("clean_text") or "" for t in turns]
    texts = [t for t in texts if t.strip()]
    for sample in json.loads((data / "locomo-dev.json").read_text(encoding="utf-8")):
        questions += [q["question"] for q in sample["qa"]]
    for p in sorted((data / "realtalk-dev").glob("*.json")):
        questions += [q["question"] for q in json.loads(p.read_text(encoding="utf-8"))["qa"]]
    return texts, questions


def real_embeddings(limit: int | None = None, data: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(texts, questions) of `real_texts` embedded by the bundled model: the texts in a fixed shuffled order (so
    that the first `limit` are a sample of all of them), kept in the temporary folder (all ~57,000 take 10-20
    minutes on a quiet core, hours on a busy one)."""
    texts, questions = real_texts(need(data, "real embeddings"))
    texts = [texts[i] for i in np.random.default_rng(0).permutation(len(texts))[:limit]]
    cache = Path(tempfile.gettempdir()) / f"pllm-real-{len(texts)}-{len(questions)}.npz"
    if cache.exists():
        kept = np.load(cache)
        return kept["texts"], kept["questions"]
    from engine.embeddings import Embedder

    emb = Embedder()
    t0 = time.perf_counter()
    vecs = np.concatenate([emb.encode(texts[i:i + 2000]) for i in range(0, len(texts), 2000)]).astype(np.float32)
    asked = emb.encode(questions).astype(np.float32)
    np.savez(cache, texts=vecs, questions=asked)
    print(f"embedded {len(texts):,} texts and {len(questions):,} questions ({time.perf_counter() - t0:.0f}s)", flush=True)
    return vecs, asked


class TextLike:
    """Unit vectors with the mean and covariance of real text embeddings (see the module doc). The statistics
    come from the bundled model's embeddings of `sample` sentences, computed once and kept in the temporary
    folder (a few minutes on a busy machine)."""

    def __init__(self, data: Path | None = None, sample: int = TEXT_SAMPLE) -> None:
        cache = Path(tempfile.gettempdir()) / f"pllm-textlike-{sample}.npz"
        if cache.exists():
            kept = np.load(cache)
            mean, cov = kept["mean"], kept["cov"]
        else:
            from engine.embeddings import Embedder

            scifact = need(data, "text-like vectors") / "scifact"
            if not (scifact / "corpus.jsonl").exists():
                raise SystemExit(f"text-like vectors need SciFact's corpus.jsonl in {scifact} (or --vectors random)")
            t0 = time.perf_counter()
            real = Embedder().encode(sentences(scifact, sample)).astype(np.float64)
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


class Mixture:
    """Unit vectors drawn from a mixture fitted to real text embeddings (`real_embeddings`): k-means clusters,
    each a Gaussian with its cluster's weight, mean and own covariance (Ledoit-Wolf shrunk: a few hundred
    points a cluster in 384 dimensions), then normalised (see the module doc). Fitted once and kept in the
    temporary folder."""

    def __init__(self, clusters: int = MIXTURE_CLUSTERS, sample: int = MIXTURE_SAMPLE, data: Path | None = None) -> None:
        cache = Path(tempfile.gettempdir()) / f"pllm-mixture-{clusters}-{sample}.npz"
        if cache.exists():
            kept = np.load(cache)
            weights, means, bases = kept["weights"], kept["means"], kept["bases"]
        else:
            from sklearn.cluster import KMeans
            from sklearn.covariance import LedoitWolf

            real = real_embeddings(sample, need(data, "mixture vectors"))[0].astype(np.float64)
            labels = KMeans(clusters, n_init=1, random_state=0).fit_predict(real)
            weights = np.bincount(labels, minlength=clusters) / len(real)
            means = np.stack([real[labels == c].mean(0) for c in range(clusters)])
            bases = []
            for c in range(clusters):
                w, u = np.linalg.eigh(LedoitWolf().fit(real[labels == c]).covariance_)
                bases.append((u * np.sqrt(np.clip(w, 0, None))).T)
            bases = np.stack(bases)
            np.savez(cache, weights=weights, means=means, bases=bases)
        self.weights = weights / weights.sum()
        self.means = means.astype(np.float32)
        self.bases = bases.astype(np.float32)  # z @ bases[c] ~ N(0, cluster c's covariance)
        self.dim = self.means.shape[1]

    def __call__(self, rng: np.random.Generator, n: int) -> np.ndarray:
        which = rng.choice(len(self.weights), size=n, p=self.weights)
        out = np.empty((n, self.dim), dtype=np.float32)
        for c in np.unique(which):
            at = np.flatnonzero(which == c)
            out[at] = self.means[c] + rng.standard_normal((len(at), self.dim), dtype=np.float32) @ self.bases[c]
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


def generator(kind: str, data: Path | None = None):
    """A function (rng, n) -> n unit vectors of this kind (fitted to the evaluation data in `data` the first time)."""
    if kind == "random":
        return random_unit
    if kind == "text":
        return TextLike(data)
    if kind == "mixture":
        return Mixture(data=data)
    raise ValueError(kind)
