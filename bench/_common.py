"""Shared pieces of the retrieval benchmarks: a throwaway (or cached) profile, the two baselines, metrics.

The baselines are computed in the same run, on the same texts and the same vectors the engine stores:
- BM25: SQLite FTS5 alone (same tokenizer as the engine, question stopwords dropped by the engine's own
  query-term extraction), in a plain in-memory database.
- dense: all-MiniLM-L6-v2 cosine alone, brute force in numpy over the vectors read back from the store.
"""

from __future__ import annotations

import math
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def add_eval_args(ap) -> None:
    """The options every evaluation harness takes."""
    ap.add_argument("--out", help="write the per-question results and the summary as JSON here")
    ap.add_argument("--cache-dir", help="keep the embedded store here and reuse it in later runs (tuning)")


def prepare_home(cache_dir: str | None, key: str) -> tuple[Path, bool, str | None]:
    """(profile dir, whether it already holds the data, temp dir to delete afterwards).

    With a cache dir the profile lives at CACHE_DIR/KEY and is reused by later runs; otherwise a temp dir.
    The keychain is a plaintext file inside the profile's folder: these are throwaway benchmark stores.
    """
    if cache_dir:
        base = Path(cache_dir).expanduser().resolve() / key
        ready = (base / "READY").exists()
        if not ready and base.exists():
            shutil.rmtree(base)
        tmp = None
    else:
        tmp = tempfile.mkdtemp(prefix="pllm-bench-")
        base = Path(tmp)
        ready = False
    base.mkdir(parents=True, exist_ok=True)
    os.environ["PERSONAL_LLM_HOME"] = str(base / "profile")
    os.environ["PYTHON_KEYRING_BACKEND"] = "keyrings.alt.file.PlaintextKeyring"
    os.environ["XDG_DATA_HOME"] = str(base / "xdg-data")
    os.environ.pop("PERSONAL_LLM_PASSPHRASE", None)
    return base / "profile", ready, tmp


def mark_ready(home: Path) -> None:
    (home.parent / "READY").write_text(time.strftime("%Y-%m-%d %H:%M:%S"))


def cleanup(tmp: str | None) -> None:
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


def stored_vectors(eng, project: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(memory row ids, unit vectors) as stored by the engine, for the dense baseline."""
    sql = "SELECT m.id, v.embedding FROM vec_memories v JOIN memories m ON m.id = v.rowid"
    args: list = []
    if project is not None:
        sql += " WHERE m.project = ?"
        args.append(project)
    rows = eng.con.execute(sql + " ORDER BY m.id", args).fetchall()
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    mat = np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows]) if rows else np.zeros((0, 384), np.float32)
    return ids, mat


class BM25Baseline:
    """FTS5 BM25 alone over (key, text) pairs, grouped by project, with the engine's tokenizer."""

    def __init__(self, docs: Iterable[tuple[str, object, str]]):
        self.db = sqlite3.connect(":memory:")
        self.db.execute(
            "CREATE VIRTUAL TABLE d USING fts5(text, project UNINDEXED, key UNINDEXED, "
            "tokenize='porter unicode61 remove_diacritics 2')"
        )
        self.db.executemany("INSERT INTO d(project, key, text) VALUES (?,?,?)",
                            [(p, str(k), t) for p, k, t in docs])

    def search(self, query: str, k: int, project: str | None = None) -> list[str]:
        from engine.store.sqlite.retrieval import match_expression

        expr = match_expression(query)
        if expr is None:
            return []
        sql = "SELECT key FROM d WHERE d MATCH ?"
        args: list = [expr]
        if project is not None:
            sql += " AND project = ?"
            args.append(project)
        return [r[0] for r in self.db.execute(sql + " ORDER BY bm25(d) LIMIT ?", [*args, k]).fetchall()]


def dense_search(qvecs: np.ndarray, mat: np.ndarray, ids: np.ndarray, k: int) -> list[list[int]]:
    out = []
    if mat.shape[0] == 0:
        return [[] for _ in range(len(qvecs))]
    scores = qvecs @ mat.T
    for row in scores:
        kk = min(k, row.size)
        top = np.argpartition(-row, kk - 1)[:kk]
        top = top[np.argsort(-row[top], kind="stable")]
        out.append([int(ids[i]) for i in top])
    return out


def ndcg_at_k(ranked: Sequence[str], rels: dict[str, int], k: int = 10) -> float:
    """BEIR's nDCG@k (graded gains, log2 discounts)."""
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(rels.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def best_threshold(pos: Sequence[float], neg: Sequence[float]) -> tuple[float, float, float]:
    """The cut on a score that best separates `neg` (should fall below) from `pos` (should stay above):
    maximises balanced accuracy. Returns (threshold, fraction of neg refused, fraction of pos refused)."""
    cands = sorted(set(pos) | set(neg))
    best = (0.0, 0.0, 0.0, -1.0)
    for i, c in enumerate(cands):
        t = c if i == 0 else (c + cands[i - 1]) / 2
        neg_ok = sum(1 for x in neg if x < t) / max(1, len(neg))
        pos_bad = sum(1 for x in pos if x < t) / max(1, len(pos))
        bal = (neg_ok + (1 - pos_bad)) / 2
        if bal > best[3] + 1e-12:
            best = (t, neg_ok, pos_bad, bal)
    return best[0], best[1], best[2]


def latency_line(label: str, seconds: Sequence[float]) -> str:
    """'LABEL: median … ms, p95 … ms' for a list of timings in seconds."""
    ms = sorted(x * 1000 for x in seconds)
    return f"{label}: median {ms[len(ms) // 2]:.1f} ms, p95 {ms[int(len(ms) * 0.95)]:.1f} ms"


def fmt_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in header]] + [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths, strict=True)))
    out = [line(cells[0]) + " |", "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) + " |" for r in cells[1:]]
    return "\n".join(out)


def add_http_args(ap) -> None:
    ap.add_argument("--http", action="store_true",
                    help="store and ask through the HTTP API (`personal-llm serve`, default options) as a client "
                         "would, asking every question twice; prints both passes")
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite",
                    help="with --http: the store behind the API: a profile's encrypted SQLite file (default), or "
                         "PostgreSQL + pgvector (`personal-llm serve --database`), started from --pg-data")
    ap.add_argument("--pg-data", metavar="DIR",
                    help="--backend postgres: the PostgreSQL cluster's folder (made the first time, kept and "
                         "reused with --cache-dir; default: a temporary one)")
    ap.add_argument("--server", metavar="URL",
                    help="a running `personal-llm serve` (for example over PostgreSQL) to store into and ask, "
                         "with --token; implies --http. The user's store should not already hold the data")
    ap.add_argument("--token", help="the API token of the --server's user (`personal-llm server add-user`)")
    ap.add_argument("--fill-from", metavar="CACHE_DIR",
                    help="--backend postgres: fill the user's account with `personal-llm push` of the SQLite store "
                         "an earlier `--http --cache-dir CACHE_DIR` run of the same data kept (its texts, times and "
                         "vectors travel as they are, nothing is embedded again), then ask through the API as usual")


def check_http_args(ap, args) -> None:
    if args.server:
        if not args.token:
            ap.error("--server needs --token")
        args.http = True
    elif args.token:
        ap.error("--token is for --server")
    if args.backend == "postgres":
        args.http = True
    if args.pg_data and args.backend != "postgres":
        ap.error("--pg-data is for --backend postgres")
    if args.fill_from and args.backend != "postgres":
        ap.error("--fill-from is for --backend postgres")


def target_name(args) -> str:
    return (f"server {args.server}" if args.server else "PostgreSQL + pgvector" if args.backend == "postgres"
            else "SQLite")


def cli() -> list[str]:
    """How to run `personal-llm` with this interpreter."""
    script = Path(sys.executable).with_name("personal-llm")
    return [str(script)] if script.exists() else [sys.executable, "-c", "from engine.cli import main; main()"]


@contextmanager
def http_target(args, key: str) -> Iterator[tuple[HttpClient, bool, Path | None]]:
    """(a client of the API the evaluation goes through, whether its store already holds the data (from an
    earlier run kept under --cache-dir), the folder where a run keeps what it learnt of the stored data (None:
    not kept)). --server: that server; --backend postgres: `serve --database` over a PostgreSQL cluster in
    --pg-data (one database per data set, made anew unless kept); else `serve` over a profile's SQLite file."""
    if args.server:
        with HttpClient(url=args.server.rstrip("/"), token=args.token) as api:
            yield api, False, None
        return
    if args.backend == "postgres":
        from _served import PostgresData, ServedDatabase

        keep = bool(args.cache_dir or args.pg_data)
        with PostgresData(args.pg_data or (str(Path(args.cache_dir) / "postgres") if args.cache_dir else None)) as pg:
            runs = pg.root / "runs" / key
            name = "pllm_" + "".join(c if c.isalnum() else "_" for c in key.lower())[:50]
            ready = keep and (runs / "READY").exists()
            if not ready:
                shutil.rmtree(runs, ignore_errors=True)
                runs.mkdir(parents=True)
                url = pg.fresh_database(name)
                (runs / "token").write_text(pg.add_user(url, "bench"))
            url = pg.url(name)
            with ServedDatabase(url) as base, HttpClient(url=base, token=(runs / "token").read_text()) as api:
                filled = not ready and bool(args.fill_from)
                if filled:
                    push_cached(Path(args.fill_from) / key, base, (runs / "token").read_text(), runs)
                yield api, ready or filled, runs if keep or filled else None
                if keep and not ready:
                    (runs / "READY").write_text(time.strftime("%Y-%m-%d %H:%M:%S"))
        return
    home, ready, tmp = prepare_home(args.cache_dir, key)
    copy_tmp = None
    try:
        if ready:
            _, copy_tmp = copy_home(home)  # served from a copy: a run cannot change the cache
        with HttpClient() as api:
            yield api, ready, home.parent if args.cache_dir else None
        if args.cache_dir and not ready:
            mark_ready(home)
    finally:
        cleanup(copy_tmp)
        cleanup(tmp)


class HttpClient:
    """A client of the HTTP API with a user's token: of the server at `url`, or of `personal-llm serve` started
    in a subprocess on a free loopback port over the profile in the environment (see prepare_home) — what
    another program on the machine gets."""

    def __init__(self, timeout: float = 900.0, *, url: str | None = None, token: str | None = None):
        import socket
        import subprocess

        import httpx

        self.proc: subprocess.Popen | None = None
        if url is not None:
            self.client = httpx.Client(base_url=url, timeout=timeout, headers={"Authorization": f"Bearer {token}"})
            if self.client.get("/stats").status_code != 200:
                raise SystemExit(f"{url}/stats did not answer 200 with that token")
            return
        env = dict(os.environ)
        token = subprocess.run([*cli(), "token"], capture_output=True, text=True, env=env, timeout=300)
        if token.returncode != 0:
            raise SystemExit(f"personal-llm token failed: {token.stderr.strip()}")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.proc = subprocess.Popen([*cli(), "serve", "--port", str(port)], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=timeout,
                                   headers={"Authorization": f"Bearer {token.stdout.strip()}"})
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"personal-llm serve exited: {self.proc.stderr.read() if self.proc.stderr else ''}")
            try:
                if self.client.get("/stats").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise SystemExit("personal-llm serve did not answer within 120 s")
            time.sleep(0.2)
        # the model loads on the first recall: until it is loaded, what is stored waits for its vector
        self.client.get("/memory/recall", params={"q": "model", "k": 1}).raise_for_status()
        deadline = time.monotonic() + 600
        while not self.client.get("/stats").json().get("embedding_ready", True) and time.monotonic() < deadline:
            time.sleep(1)

    def remember(self, text: str, **fields) -> dict:
        r = self.client.post("/memory/remember", json={"text": text, **{k: v for k, v in fields.items() if v is not None}})
        r.raise_for_status()
        return r.json()

    def recall(self, q: str, k: int = 10, project: str | None = None) -> list[dict]:
        params: dict[str, object] = {"q": q, "k": k}
        if project is not None:
            params["project"] = project
        r = self.client.get("/memory/recall", params=params)
        r.raise_for_status()
        return r.json()

    def settle(self, stall: float = 900.0, every: float = 5.0) -> None:
        """Wait until every stored memory has its vector: what was stored before the server's model was loaded
        and long texts wait for the server's background embedder (a recall embeds a backlog of at most 64 itself
        first, and leaves a longer one to it). Asks /stats every `every` seconds; a backlog that did not shrink
        for `stall` seconds ends the run (a question asked before would find part of the data by words only)."""
        t0 = last_move = time.monotonic()
        first = shown = before = None
        while pending := self.client.get("/stats").json().get("pending_embeddings", 0):
            now = time.monotonic()
            waited = now - t0
            if first is None:
                first = pending
            if pending != before:
                before, last_move = pending, now
            if shown is None or waited - shown >= 60:
                rate = f", {(first - pending) / waited:.1f}/s" if waited else ""
                print(f"  {pending} memories waiting for their vectors ({waited:.0f}s{rate}; load average "
                      f"{os.getloadavg()[0]:.1f})", flush=True)
                shown = waited
            if now - last_move > stall:
                raise SystemExit(f"{pending} memories still wait for their vectors: none embedded in {stall:.0f} s")
            time.sleep(every)
        took = time.monotonic() - t0
        rate = f", {first / took:.2f}/s" if first and took else ""
        print(f"every memory has its vector ({first or 0} waited for it after the last was stored, "
              f"{took:.1f}s{rate}; load average {os.getloadavg()[0]:.1f})", flush=True)

    def close(self) -> None:
        self.client.close()
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def push_cached(cached: Path, url: str, token: str, runs: Path) -> None:
    """`personal-llm push URL` of the SQLite profile an earlier `--http --cache-dir` run kept in `cached` (from a
    throwaway copy), and what that run learnt of its data (the *.json files) copied into `runs`."""
    import subprocess

    if not (cached / "READY").exists():
        raise SystemExit(f"--fill-from: {cached} holds no finished run of this data (run it with --http "
                         f"--cache-dir {cached.parent} first)")
    tmp = copy_profile(cached)
    try:
        env = {**os.environ, "PERSONAL_LLM_HOME": str(Path(tmp) / "profile"),
               "XDG_DATA_HOME": str(Path(tmp) / "xdg-data"),
               "PYTHON_KEYRING_BACKEND": "keyrings.alt.file.PlaintextKeyring"}
        t0 = time.perf_counter()
        done = subprocess.run([*cli(), "push", url, "--token", token], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"personal-llm push failed: {done.stderr.strip()[-2000:]}")
        print(f"pushed the SQLite store of {cached} in {time.perf_counter() - t0:.1f}s", flush=True)
    finally:
        cleanup(tmp)
    for kept in cached.glob("*.json"):
        shutil.copy(kept, runs / kept.name)


def copy_profile(base: Path) -> str:
    """A throwaway copy of the cached benchmark profile in `base` (its store and keychain file): the temp dir."""
    tmp = tempfile.mkdtemp(prefix="pllm-bench-")
    for name in ("profile", "xdg-data"):
        if (base / name).exists():
            shutil.copytree(base / name, Path(tmp) / name)
    return tmp


def copy_home(home: Path) -> tuple[Path, str]:
    """A throwaway copy of a cached benchmark profile (store and keychain file), made the current one, so a
    run through the API cannot change the cache. Returns (profile dir, temp dir to delete)."""
    tmp = copy_profile(home.parent)
    os.environ["PERSONAL_LLM_HOME"] = str(Path(tmp) / "profile")
    os.environ["XDG_DATA_HOME"] = str(Path(tmp) / "xdg-data")
    return Path(tmp) / "profile", tmp
