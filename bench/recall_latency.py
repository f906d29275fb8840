"""Recall latency at 10k and 100k memories, next to a numpy brute-force floor measured in the same run.

    python bench/recall_latency.py [--sizes 10000 100000] [--queries 50] [--vectors model|random] [--cache-dir DIR]

For each size it fills a fresh encrypted store (a temp profile) through the engine, then times
`Engine.recall()` end to end (query embedding, BM25, exact vector search, fusion, ranking, row fetch) and
the floor: the same query embedding plus a numpy brute-force top-k over the same vectors. It prints the
median and p95 of both and their ratio, the vector stage alone against numpy, and checks that the
engine's vector search returns exactly the floor's top k.

`--vectors model` (default) embeds every memory with the real model (100k take several minutes on two
cores); `--vectors random` stores random unit vectors instead, which is fine for timing.

    python bench/recall_latency.py --http [--sizes 10000] [--queries 50] [--turns 200] [--baseline-tree DIR]
                                   [--cache-dir DIR]

`--http`: what a client of `personal-llm serve` gets. Each tree (this checkout, and with `--baseline-tree`
another checkout of the engine, e.g. a worktree of an older commit) serves a throwaway profile of its own,
filled through POST /memory/batch with the same sentences (embedded by the model); then, interleaved
between the trees so that load on the machine falls on both alike: GET /memory/recall (p50, p95, the
client's wall time, and the server's CPU time a recall, from /proc: on a busy machine the wall time is
mostly waiting for a core, while the CPU time moves little with the load; and the p50 of each question asked
again at once, as the app's list searches again after a change or a client repeats itself) and a conversation stored turn
by turn (POST /memory/remember, episodic turns with speaker labels, default settings: facts from
conversations on, with no language model answering), turns per second. Ratios are this tree against the
baseline. With `--cache-dir`, the store is filled once (through this tree's API) and kept in DIR/http-N;
each tree then serves a throwaway copy of it, so a run takes minutes, not the fill's quarter of an hour
(delete DIR/http-N after a change of the stored data, e.g. a new schema a baseline tree cannot open).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COMMON = (
    "alice bob carol dave erin frank grace heidi ivan judy lisbon berlin paris tokyo oslo lima cairo "
    "garden kitchen office car bike train flight hotel dentist doctor meeting report budget invoice "
    "password key wallet phone laptop charger book movie song recipe pasta coffee tea wine birthday "
    "anniversary vacation hiking running swimming yoga guitar piano painting project deadline friday"
).split()
VERBS = "likes visited bought lost found booked moved called paid fixed planned cooked read watched".split()
SYLLABLES = "ka lo mi ne su ra to vi be da fe go hu ji ke la mo ni po qu re sa ti vo wu xe yo zu".split()


def vocabulary(rng: random.Random, size: int = 20_000) -> list[str]:
    """Made-up words: a personal store's long tail of names, places and topics."""
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


VOCAB = vocabulary(random.Random(7))
ZIPF = np.cumsum(1.0 / np.arange(1, len(VOCAB) + 1))
ZIPF /= ZIPF[-1]


def word(rng: random.Random) -> str:
    return VOCAB[int(np.searchsorted(ZIPF, rng.random()))]


def sentence(rng: random.Random) -> str:
    """A note-like sentence: a few common words and a Zipf-distributed long tail."""
    filler = ("the", "with", "at", "on", "for", "to", "from", "by")
    parts = [rng.choice(COMMON).title(), rng.choice(VERBS)]
    for _ in range(rng.randint(3, 6)):
        parts += [rng.choice(filler), word(rng) if rng.random() < 0.7 else rng.choice(COMMON)]
    return " ".join(parts) + "."


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def fill(eng, n: int, mode: str, rng: random.Random) -> None:
    from engine.store.sqlite import vectors

    t0 = time.perf_counter()
    batch = 2000
    for start in range(0, n, batch):
        with eng.store.write():
            for _ in range(min(batch, n - start)):
                eng.remember(sentence(rng), kind=rng.choice(["fact", "episodic", "procedural"]),
                             embed="background", importance=rng.random())
    t_rows = time.perf_counter() - t0
    t0 = time.perf_counter()
    if mode == "model":
        eng.embed_pending(batch_size=128)
    else:
        eng.space.ensure()
        ids = [r[0] for r in eng.con.execute("SELECT id FROM memories ORDER BY id").fetchall()]
        nrng = np.random.default_rng(0)
        for s in range(0, len(ids), 5000):
            part = ids[s : s + 5000]
            v = nrng.standard_normal((len(part), 384)).astype(np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            with eng.mutation() as (con, touched):
                vectors.put(con, "memories", part, v)
                con.executemany("UPDATE memories SET embedded_hash = content_hash WHERE id = ?", [(i,) for i in part])
    print(f"  filled {n:,} rows in {t_rows:.1f}s, vectors ({mode}) in {time.perf_counter() - t0:.1f}s", flush=True)


def run_size(n: int, queries: int, mode: str, k: int, cache_dir: str | None = None) -> dict:
    from engine import Engine
    from engine.store.sqlite.vectors import Filter

    rng = random.Random(n)
    if cache_dir:
        home = Path(cache_dir).expanduser().resolve() / f"latency-{n}-{mode}"
        ready = (home / "READY").exists()
        if not ready and home.exists():
            shutil.rmtree(home)
        home.mkdir(parents=True, exist_ok=True)
    else:
        home, ready = Path(tempfile.mkdtemp(prefix=f"pllm-bench-{n}-")), False
    os.environ["PERSONAL_LLM_HOME"] = str(home)
    eng = Engine.open(home, actor="sdk")
    eng.embedder.load()
    if ready:
        print(f"  reusing the filled store at {home}", flush=True)
        for _ in range(n):  # the fill's draws, so the queries are the same as in a fresh run
            sentence(rng), rng.choice(["fact", "episodic", "procedural"]), rng.random()
    else:
        fill(eng, n, mode, rng)
        if cache_dir:
            (home / "READY").write_text(time.strftime("%Y-%m-%d %H:%M:%S"))
    con = eng.con
    rows = con.execute("SELECT rowid, embedding FROM vec_memories ORDER BY rowid").fetchall()
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    mat = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
    qs = [sentence(rng).replace(".", "?") for _ in range(queries)]

    t0 = time.perf_counter()
    eng.recall(qs[0], k=k, record_access=False)  # loads the vector mirror: reported as the cold query
    cold = time.perf_counter() - t0

    engine_t, floor_t, vec_t, np_t, exact = [], [], [], [], 0
    for q in qs:
        t0 = time.perf_counter()
        eng.recall(q, k=k, record_access=False)
        engine_t.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        qv = eng.embedder.encode_one(q)
        s = mat @ qv
        top = np.argpartition(-s, k)[:k]
        top = top[np.argsort(-s[top])]
        floor_ids = ids[top]
        floor_t.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        s = mat @ qv
        top = np.argpartition(-s, k)[:k]
        top = top[np.argsort(-s[top])]
        np_t.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        ours = eng.space.index["memories"].search(con, qv, k, Filter())
        vec_t.append(time.perf_counter() - t0)
        exact += [i for i, _ in ours] == floor_ids.tolist()
    eng.close()
    ms = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    return {
        "n": n, "cold_ms": cold * 1000,
        "recall_med": ms(engine_t), "recall_p95": percentile(engine_t, 0.95) * 1000,
        "floor_med": ms(floor_t), "floor_p95": percentile(floor_t, 0.95) * 1000,
        "vec_med": ms(vec_t), "np_med": ms(np_t), "exact": exact / len(qs),
    }


class Served:
    """`personal-llm serve` of one checkout (PYTHONPATH=tree) over a throwaway profile of its own."""

    def __init__(self, tree: Path, base: Path):
        import json
        import subprocess

        import httpx

        base.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, PYTHONPATH=str(tree), PERSONAL_LLM_HOME=str(base / "profile"),
                        PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring",
                        XDG_DATA_HOME=str(base / "xdg-data"))  # the layout of _common.copy_profile
        self.env.pop("PERSONAL_LLM_PASSPHRASE", None)
        self.env.pop("OLLAMA_HOST", None)
        cli = [sys.executable, "-c", "import sys; from engine.cli import main; sys.exit(main())"]
        # run in the tree: `python -c` puts the working directory first on sys.path, before PYTHONPATH (from the
        # checkout's root, a baseline tree's server ran this checkout's engine)
        ran = subprocess.run([sys.executable, "-c", "import engine; print(engine.__file__)"], capture_output=True,
                             text=True, env=self.env, timeout=600, check=True, cwd=tree).stdout.strip()
        if not Path(ran).resolve().is_relative_to(Path(tree).resolve()):
            raise SystemExit(f"the engine of {tree} is not the one that runs there ({ran})")
        token = subprocess.run([*cli, "token"], capture_output=True, text=True, env=self.env, timeout=600, check=True,
                               cwd=tree)
        self.proc = subprocess.Popen([*cli, "serve", "--port", "0", "--json"], env=self.env, stdin=subprocess.DEVNULL,
                                     cwd=tree,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        announced = ""
        while not announced.rstrip().endswith("}"):  # {"url": ..., "docs": ...} over a few lines
            line = self.proc.stdout.readline() if self.proc.stdout else ""
            if not line:
                raise SystemExit(f"personal-llm serve of {tree} did not start")
            announced += line
        self.client = httpx.Client(base_url=json.loads(announced)["url"], timeout=600,
                                   headers={"Authorization": f"Bearer {token.stdout.strip()}"})

    def fill(self, texts: list[tuple[str, str]]) -> float:
        t0 = time.perf_counter()
        for s in range(0, len(texts), 500):
            r = self.client.post("/memory/batch", json={"items": [{"text": t, "kind": k} for t, k in texts[s:s + 500]]})
            r.raise_for_status()
        while self.client.get("/stats").json()["pending_embeddings"]:
            time.sleep(0.5)
        return time.perf_counter() - t0

    def timed(self, method: str, path: str, **kw) -> float:
        t0 = time.perf_counter()
        r = self.client.request(method, path, **kw)
        took = time.perf_counter() - t0
        r.raise_for_status()
        return took

    def cpu(self) -> float:
        """User + system CPU seconds the server has used so far (Linux /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(60)


SPEAKERS = ("Alice", "Bob")


def cached_fill(cache: Path, tree: Path, texts: list[tuple[str, str]]) -> Path:
    """The folder of a store filled with `texts` through `tree`'s API, made once under `cache` and kept."""
    import hashlib

    key = hashlib.sha256("\n".join(f"{k} {t}" for t, k in texts).encode()).hexdigest()[:12]
    base = cache.expanduser().resolve() / f"http-{len(texts)}-{key}"
    if not (base / "READY").exists():
        shutil.rmtree(base, ignore_errors=True)
        srv = Served(tree, base)
        try:
            print(f"{len(texts):,} memories filled through the API of {tree} in {srv.fill(texts):.0f}s, kept in "
                  f"{base}", flush=True)
        finally:
            srv.close()
        (base / "READY").write_text(time.strftime("%Y-%m-%d %H:%M:%S"))
    return base


def over_http(sizes: list[int], queries: int, turns: int, baseline: Path | None, cache: Path | None = None) -> int:
    from _common import copy_profile

    trees = {"this tree": Path(__file__).resolve().parents[1]}
    if baseline is not None:
        trees["baseline"] = baseline.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="pllm-bench-http-"))
    rows = []
    try:
        for n in sizes:
            rng = random.Random(n)
            texts = [(sentence(rng), rng.choice(["fact", "episodic", "procedural"])) for _ in range(n)]
            qs = [sentence(rng).replace(".", "?") for _ in range(queries)]
            said = [f"{SPEAKERS[t % 2]}: {sentence(rng)}" for t in range(turns)]
            served = {}
            try:
                filled = cached_fill(cache, trees["this tree"], texts) if cache is not None else None
                for name, tree in trees.items():
                    home = tmp / f"{name.replace(' ', '-')}-{n}"
                    if filled is not None:
                        shutil.move(copy_profile(filled), home)
                    served[name] = srv = Served(tree, home)
                    if filled is None:
                        print(f"{name} ({tree}), {n:,} memories: filled through the API in {srv.fill(texts):.0f}s",
                              flush=True)
                    else:
                        print(f"{name} ({tree}), {n:,} memories: a copy of {filled}", flush=True)
                    srv.timed("GET", "/memory/recall", params={"q": qs[0], "k": 10})  # the model and the mirror
                recall: dict[str, list[float]] = {name: [] for name in served}
                again: dict[str, list[float]] = {name: [] for name in served}  # the same question, at once
                recall_cpu: dict[str, float] = dict.fromkeys(served, 0.0)
                stored: dict[str, list[float]] = {name: [] for name in served}
                for q in qs:
                    for name, srv in served.items():
                        before = srv.cpu()
                        recall[name].append(srv.timed("GET", "/memory/recall", params={"q": q, "k": 10}))
                        recall_cpu[name] += srv.cpu() - before
                        again[name].append(srv.timed("GET", "/memory/recall", params={"q": q, "k": 10}))
                for start in range(0, turns, 10):  # blocks of 10 turns, tree after tree
                    for name, srv in served.items():
                        for text in said[start:start + 10]:
                            stored[name].append(srv.timed("POST", "/memory/remember", json={
                                "text": text, "kind": "episodic", "project": "talk"}))
            finally:
                for srv in served.values():
                    srv.close()
            for name in served:
                rows.append((n, name, statistics.median(recall[name]) * 1000, percentile(recall[name], 0.95) * 1000,
                             recall_cpu[name] / len(qs) * 1000, statistics.median(again[name]) * 1000,
                             len(stored[name]) / sum(stored[name])))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nover HTTP, the client's wall time (load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs):")
    print(f"| {'memories':>8} | {'tree':<9} | recall p50 ms | p95 ms | server CPU ms a recall | asked again p50 ms "
          "| turns/s one by one |")
    print(f"| {'-' * 8} | {'-' * 9} | ------------- | ------ | ---------------------- | ------------------ "
          "| ------------------ |")
    for n, name, p50, p95, cpu, p50_again, rate in rows:
        print(f"| {n:>8,} | {name:<9} | {p50:13.1f} | {p95:6.1f} | {cpu:22.1f} | {p50_again:18.1f} | {rate:18.1f} |")
    if baseline is not None:
        for n in sizes:
            this, base = (next(r for r in rows if r[0] == n and r[1] == name) for name in ("this tree", "baseline"))
            print(f"{n:,} memories, this tree against the baseline: recall p50 {this[2] / base[2]:.2f}x, "
                  f"server CPU a recall {this[4] / base[4]:.2f}x, asked again {this[5] / base[5]:.2f}x, "
                  f"turns stored per second {this[6] / base[6]:.2f}x")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--vectors", choices=["model", "random"], default="model")
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--cache-dir", help="keep the filled stores here and reuse them in later runs (tuning)")
    ap.add_argument("--http", action="store_true", help="through `personal-llm serve`: recall and turns stored")
    ap.add_argument("--turns", type=int, default=200, help="--http: conversation turns stored one by one")
    ap.add_argument("--baseline-tree", type=Path, help="--http: also serve this checkout of the engine, in turn")
    a = ap.parse_args()
    if a.http:
        return over_http(a.sizes if a.sizes != [10_000, 100_000] else [10_000], a.queries, a.turns, a.baseline_tree,
                         Path(a.cache_dir) if a.cache_dir else None)
    os.environ.setdefault("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
    if a.cache_dir:
        keys = Path(a.cache_dir).expanduser().resolve() / "latency-keys"
        keys.mkdir(parents=True, exist_ok=True)
        os.environ["XDG_DATA_HOME"] = str(keys)
    os.environ.setdefault("XDG_DATA_HOME", tempfile.mkdtemp(prefix="pllm-bench-keys-"))
    results = []
    for n in a.sizes:
        print(f"size {n:,}:", flush=True)
        results.append(run_size(n, a.queries, a.vectors, a.k, a.cache_dir))
    print()
    print(f"{'memories':>9} | {'recall med':>10} {'p95':>7} | {'floor med':>9} {'p95':>7} | {'ratio':>5} | "
          f"{'vector stage':>12} {'numpy':>6} {'ratio':>5} | {'exact':>5} | {'cold':>7}")
    for r in results:
        print(f"{r['n']:>9,} | {r['recall_med']:>8.1f}ms {r['recall_p95']:>5.1f}ms | {r['floor_med']:>7.1f}ms "
              f"{r['floor_p95']:>5.1f}ms | {r['recall_med'] / r['floor_med']:>5.2f} | {r['vec_med']:>10.1f}ms "
              f"{r['np_med']:>4.1f}ms {r['vec_med'] / r['np_med']:>5.2f} | {r['exact']:>5.0%} | {r['cold_ms']:>5.0f}ms")
    print("\nrecall = Engine.recall end to end (query embedding, BM25, vector search, fusion, ranking, rows);")
    print("floor = the same query embedding + numpy brute-force top-k over the same vectors.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
