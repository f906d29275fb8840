"""What a profile that lives on a server costs a person at the desktop, next to a local profile, in one run.

    python bench/device_latency.py [--memories 500] [--captures 200] [--queries 50]

A real PostgreSQL 18 + pgvector (tests/pg_server.py, durable commits), a real `personal-llm serve --database`
process on loopback, and a server profile connected to it as the app's first run does (`check_server`,
`connect_profile`; the token in a throw-away plaintext keyring of its own). Both profiles get the same memories,
embedded by the same model; then, through the very objects the desktop's bridge calls (`engine.open_profile`:
the engine of a local store, `RemoteApp` for the server profile):

- **quick capture to stored**: `remember` as the capture box sends it, until it returns; on the server profile
  that is kept in the encrypted outbox, sent, and acknowledged by the server once committed on PostgreSQL
  (p50, p99);
- **recall**: the same queries, k=10 (p50, p95);
- **capture while the server is down**: kept in the outbox (p50), and how long the next poll takes to deliver
  them all once the server is back.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def serve(pg_url: str, home: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "PERSONAL_LLM_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--database", pg_url, "--port", str(port),
                             "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    text = ""
    while line := proc.stdout.readline():
        text += line
        try:
            json.loads(text)
            return proc
        except json.JSONDecodeError:
            continue
    raise SystemExit("the server did not start")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memories", type=int, default=500, help="memories in each profile before timing")
    ap.add_argument("--captures", type=int, default=200)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--offline", type=int, default=50, help="captures made while the server is stopped")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="pllm-devices-"))
    os.environ["PYTHON_KEYRING_BACKEND"] = "keyrings.alt.file.PlaintextKeyring"  # never the user's keychain
    os.environ["XDG_DATA_HOME"] = str(tmp / "xdg")
    from bench._pg import make_database, start_server
    from bench.recall_latency import sentence
    from engine import check_server, connect_profile, open_profile, users

    rng = random.Random(44)
    texts = [sentence(rng) for _ in range(args.memories)]
    captures = [f"Captured note {i}: " + sentence(rng) for i in range(args.captures)]
    queries = [" ".join(sentence(rng).split()[:4]) for _ in range(args.queries)]
    pg = start_server()
    proc: subprocess.Popen | None = None
    try:
        pg_url = make_database(pg)
        token = users.add(pg_url, "bench")
        port = free_port()
        proc = serve(pg_url, tmp / "server-home", port)
        url = f"http://127.0.0.1:{port}"
        device = tmp / "device"
        device.mkdir()
        connect_profile(device, check_server(url, token), token)
        local = open_profile(tmp / "local", actor="desktop", interactive=False)
        local.start_background()  # the model loads, as in the app
        remote = open_profile(device, actor="desktop")
        print(f"server profile on {url} (serve --database, PostgreSQL 18 with durable commits); local profile in "
              f"{tmp / 'local'}", flush=True)

        # the same memories in both, embedded
        from engine import Remembered

        local.wait_for_embeddings()
        local.remember_many([Remembered(t) for t in texts], embed="now")
        import httpx

        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=600) as http:
            for i in range(0, len(texts), 100):
                r = http.post("/memory/batch", json={"items": [{"text": t} for t in texts[i:i + 100]]})
                r.raise_for_status()
        local.wait_for_embeddings()
        remote.recall("warm up", k=10)
        local.recall("warm up", k=10)

        def timed(fn, items) -> list[float]:
            out = []
            for item in items:
                t0 = time.perf_counter()
                fn(item)
                out.append((time.perf_counter() - t0) * 1000)
            return out

        rows = []
        for name, eng in (("local", local), ("server (loopback)", remote)):
            cap = timed(lambda t, e=eng: e.remember(t, embed="background"), captures)
            rec = timed(lambda q, e=eng: e.recall(q, k=10), queries)
            rows.append((name, statistics.median(cap), pct(cap, 99), statistics.median(rec), pct(rec, 95)))
        print(f"\n{args.memories} memories each, {args.captures} captures, {args.queries} recalls (k=10)")
        print(f"{'profile':<20}{'capture p50':>13}{'capture p99':>13}{'recall p50':>12}{'recall p95':>12}  (ms)")
        for name, c50, c99, r50, r95 in rows:
            print(f"{name:<20}{c50:>13.1f}{c99:>13.1f}{r50:>12.1f}{r95:>12.1f}")

        # offline: the server stopped, captures kept in the outbox; then back, delivered by the next poll
        token_now = remote.changes_since(None).token
        proc.terminate()
        proc.wait(30)
        offline = [f"Offline note {i}: " + sentence(rng) for i in range(args.offline)]
        kept = timed(lambda t: remote.remember(t), offline)
        waiting = remote.connection().waiting
        proc = serve(pg_url, tmp / "server-home", port)
        t0 = time.perf_counter()
        remote.changes_since(token_now)
        delivered = (time.perf_counter() - t0) * 1000
        left = remote.connection().waiting
        print(f"\nserver stopped: {args.offline} captures kept in the outbox, p50 {statistics.median(kept):.1f} ms, "
              f"p99 {pct(kept, 99):.1f} ms ({waiting} waiting)")
        print(f"server back: the next poll delivered them in {delivered:.0f} ms ({left} left waiting)")
        local.close()
        remote.close()
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
