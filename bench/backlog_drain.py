"""How fast a real `personal-llm serve` embeds long texts stored through its HTTP API, against the model's own
batched rate measured in the same run, and what a recall costs meanwhile.

    python bench/backlog_drain.py DIR [--n 500] [--backend sqlite|postgres|both] [--pg-data DIR]

DIR is a BEIR data set (SciFact: corpus.jsonl, queries.jsonl). The first N documents (title + abstract)
longer than AUTO_EMBED_CHARS are what is stored: each is left to the server's background embedder, which
gives it a vector and its window vectors. Per backend (SQLite: `serve` over a fresh profile; PostgreSQL:
`serve --database` over a PostgreSQL it starts, bench/_served.py):

1. the N texts are stored (POST /memory/remember {text, project}, as bench/eval_beir.py --http does);
2. then, while GET /stats says `pending_embeddings` > 0, a recall (GET /memory/recall, the data set's
   queries in turn) is asked every half second: the backlog's drain rate, from the end of storing to the
   last vector, and the recall latency during it;
3. the same recalls once nothing waits: the latency without the drain.

The raw rate is the bundled model in this process (`Embedder.encode` and `encode_windows` of the same texts,
batches of 64, the work the background embedder does, on one thread as the server's): measured over the same
time as the server's, from the first text stored to the last vector (the same share of a busy machine:
"embedded/raw"), and on the first 64 texts before and after the server runs ("raw alone"). The load average
is printed beside every timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

PROJECT = "drain"


def load() -> str:
    a, b, c = os.getloadavg()
    return f"load {a:.1f}/{b:.1f}/{c:.1f}"


def texts_of(root: Path, n: int) -> tuple[list[str], list[str]]:
    from engine.memory_rules import AUTO_EMBED_CHARS

    texts, queries = [], []
    with open(root / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            text = (doc.get("title", "").strip() + "\n" + doc.get("text", "").strip()).strip()
            if len(text) > AUTO_EMBED_CHARS:
                texts.append(text)
                if len(texts) == n:
                    break
    with open(root / "queries.jsonl", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for line in f if line.strip()][:200]
    return texts, queries


def raw_rate(embedder, texts: list[str]) -> float:
    """Texts a second the model embeds (whole and windows, batches of 64) in this process."""
    t0 = time.perf_counter()
    embedder.encode(texts, batch_size=64)
    embedder.encode_windows(texts, batch_size=64)
    return len(texts) / (time.perf_counter() - t0)


def median_ms(xs: list[float]) -> str:
    if not xs:
        return "-"
    q = sorted(xs)
    return f"{statistics.median(q) * 1000:.0f} ms (p90 {q[int(0.9 * (len(q) - 1))] * 1000:.0f}, n={len(q)})"


class RawBeside:
    """The model in this process, encoding the texts over and over while the server drains: texts a second."""

    def __init__(self, embedder, texts: list[str]) -> None:
        self.embedder, self.texts = embedder, texts
        self.done = 0
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.perf_counter()
        i = 0
        while not self._stop.is_set():
            part = [self.texts[(i + j) % len(self.texts)] for j in range(16)]
            self.embedder.encode(part, batch_size=64)
            self.embedder.encode_windows(part, batch_size=64)
            i += 16
            self.done += len(part)
            self.seconds = time.perf_counter() - t0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.done / self.seconds if self.seconds else 0.0


def drain(api: C.HttpClient, texts: list[str], queries: list[str], embedder) -> dict:
    """Store the texts, time the drain with recalls beside it (and the model in this process), then the same
    recalls without it."""
    pending = lambda: api.client.get("/stats").json().get("pending_embeddings", 0)  # noqa: E731
    raw = RawBeside(embedder, texts)
    raw.start()
    t0 = time.perf_counter()
    for text in texts:
        api.remember(text, project=PROJECT)
    stored = time.perf_counter() - t0
    left = pending()
    print(f"  stored {len(texts)} in {stored:.1f}s ({len(texts) / stored:.1f}/s), {left} waiting; {load()}",
          flush=True)
    t1 = time.perf_counter()
    during: list[float] = []
    done = threading.Event()

    def probe() -> None:
        i = 0
        while not done.is_set():
            s = time.perf_counter()
            api.recall(queries[i % len(queries)], k=10, project=PROJECT)
            if not done.is_set():
                during.append(time.perf_counter() - s)
            i += 1
            done.wait(0.5)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    shown = t1
    while (now := pending()) > 0:
        if time.perf_counter() - shown > 30:
            shown = time.perf_counter()
            print(f"  {now} waiting after {shown - t1:.0f}s ({(left - now) / (shown - t1):.2f}/s); {load()}",
                  flush=True)
        time.sleep(0.25)
    drained = time.perf_counter() - t1
    beside = raw.stop()
    done.set()
    prober.join()
    print(f"  drained {left} in {drained:.1f}s, {len(texts)} in {stored + drained:.1f}s from the first stored "
          f"({len(texts) / (stored + drained):.2f}/s), the model beside it {beside:.2f}/s; {load()}", flush=True)
    quiet: list[float] = []
    for q in queries[: max(len(during), 10)]:
        s = time.perf_counter()
        api.recall(q, k=10, project=PROJECT)
        quiet.append(time.perf_counter() - s)
    return {"stored_s": stored, "left": left, "drain_s": drained, "drain_rate": left / drained if drained else 0.0,
            "beside": beside,
            "overall_rate": len(texts) / (stored + drained), "during": during, "quiet": quiet}


def served(backend: str, pg_data: str | None):
    """A context giving an HttpClient of a fresh `serve` (SQLite) or `serve --database` (PostgreSQL)."""
    from contextlib import contextmanager

    @contextmanager
    def sqlite():
        _home, _ready, tmp = C.prepare_home(None, "drain")
        try:
            with C.HttpClient() as api:
                yield api
        finally:
            C.cleanup(tmp)

    @contextmanager
    def postgres():
        from _served import PostgresData, ServedDatabase

        with PostgresData(pg_data) as pg:
            url = pg.fresh_database("pllm_drain")
            token = pg.add_user(url, "bench")
            with ServedDatabase(url) as base, C.HttpClient(url=base, token=token) as api:
                api.client.get("/memory/recall", params={"q": "model", "k": 1}).raise_for_status()
                deadline = time.monotonic() + 600
                while not api.client.get("/stats").json().get("embedding_ready", True) and time.monotonic() < deadline:
                    time.sleep(1)
                yield api

    return sqlite() if backend == "sqlite" else postgres()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="a BEIR data set folder (corpus.jsonl, queries.jsonl)")
    ap.add_argument("--n", type=int, default=500, help="long texts to store (default 500)")
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--pg-data", metavar="DIR", help="the PostgreSQL cluster's folder (default: a temporary one)")
    args = ap.parse_args(argv)
    try:
        texts, queries = texts_of(Path(args.dir), args.n)
    except (OSError, ValueError, KeyError) as e:
        ap.error(f"{args.dir} is not a readable BEIR data set ({type(e).__name__}: {e})")
    if not texts or not queries:
        ap.error(f"{args.dir}: no long documents or no queries")
    from engine.embeddings import Embedder

    embedder = Embedder()
    embedder.load()
    embedder.encode(texts[:8])
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    rows = []
    for backend in backends:
        before = raw_rate(embedder, texts[:64])
        print(f"{backend}: raw model {before:.2f} texts/s; {load()}", flush=True)
        with served(backend, args.pg_data) as api:
            r = drain(api, texts, queries, embedder)
        after = raw_rate(embedder, texts[:64])
        print(f"{backend}: raw model {after:.2f} texts/s after; {load()}", flush=True)
        beside = r["beside"] or 1e-9
        rows.append([backend, len(texts), f"{(before + after) / 2:.2f}", f"{r['beside']:.2f}",
                     f"{r['overall_rate']:.2f}", f"{r['overall_rate'] / beside:.2f}", f"{r['drain_rate']:.2f}",
                     median_ms(r["during"]), median_ms(r["quiet"])])
    print()
    print("embedded/s: the N texts over the time from the first stored to the last vector; raw beside/s: the model in")
    print("this process over the same time; after storing/s: the backlog left when the last was stored, over the rest")
    print(C.fmt_table(["backend", "texts", "raw alone/s", "raw beside/s", "embedded/s", "embedded/raw",
                       "after storing/s", "recall during drain", "recall after"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
