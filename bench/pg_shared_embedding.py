"""The server's one embedding model, shared by its users: batching across users, and recall during another
user's ingest.

    python bench/pg_shared_embedding.py [--users 4] [--recalls 50] [--memories 200] [--doc-kb 300]
                                        [--gather 0.003] [--bulk-nice 19] [--unshared] [--skip-concurrent]

A PostgreSQL 18 + pgvector server (tests/pg_server.py, commits durable) with a database set up as `personal-llm
server init` does and USERS users; the HTTP API of `personal-llm serve --database` (engine/server.py's Users
and engine/api.py's app, served by uvicorn on loopback in this process, so the model's counters can be read)
with the real bundled embedding model, shared (engine/shared_embedder.py) or, with --unshared, a plain one.

1. Each user stores MEMORIES memories (POST /memory/batch), embedded.
2. Every user at once: RECALLS recalls each (GET /memory/recall, one thread a user, different questions);
   printed: requests, small encodes and model calls, recall latency (p50, p95) and the throughput.
3. User 1 alone: RECALLS recalls, the latency without other work. Then user 0 uploads a generated text
   document of DOC_KB kilobytes (POST /ingest/upload: parsed, chunked and embedded in batches) while user 1
   recalls again and again until the upload is done; printed: the ingest's time and chunks, and user 1's
   recall latency during it (p50, p95, max) against alone.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bench._pg import make_database  # noqa: E402
from bench.recall_latency import percentile, sentence  # noqa: E402
from engine.shared_embedder import BULK_NICE  # noqa: E402
from tests.pg_server import LocalServer  # noqa: E402

SETTINGS = ("listen_addresses=", "fsync=on", "full_page_writes=on", "synchronous_commit=on",
            "max_connections=100", "shared_buffers=128MB")


def serve(url: str, home: Path, unshared: bool, gather: float, bulk_nice: int):
    """The API of a server for the users of `url`, on a free loopback port: (address, embedder, stop)."""
    import uvicorn

    from engine.api import UserEngine, create_app
    from engine.embeddings import Embedder
    from engine.server import Users
    from engine.shared_embedder import SharedEmbedder
    from engine.users import open_database

    db = open_database(url)
    embedder = Embedder() if unshared else SharedEmbedder(gather=gather, bulk_nice=bulk_nice)
    embedder.load()
    users = Users(db, home, embedder)
    app = create_app(UserEngine(), None, authenticate=users.engine_for)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, access_log=False, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]

    def stop() -> None:
        server.should_exit = True
        thread.join(30)
        users.close()
        if isinstance(embedder, SharedEmbedder):
            embedder.close()
        db.close()

    return f"http://127.0.0.1:{port}", embedder, stop


def counts(embedder) -> tuple[int, int]:
    return getattr(embedder, "requests", 0), getattr(embedder, "calls", 0)


def recalls(client: httpx.Client, questions: list[str], out: list[float]) -> None:
    for q in questions:
        t0 = time.perf_counter()
        r = client.get("/memory/recall", params={"q": q, "k": 10})
        out.append(time.perf_counter() - t0)
        r.raise_for_status()


def ms(xs: list[float]) -> str:
    return (f"p50 {statistics.median(xs) * 1000:.0f} ms, p95 {percentile(xs, 95) * 1000:.0f} ms, "
            f"max {max(xs) * 1000:.0f} ms (n={len(xs)})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--recalls", type=int, default=50, help="recalls per user in each phase")
    ap.add_argument("--memories", type=int, default=200, help="memories each user stores first")
    ap.add_argument("--doc-kb", type=int, default=300, help="size of the uploaded document (kilobytes of text)")
    ap.add_argument("--gather", type=float, default=0.003, help="seconds the shared queue gathers a batch")
    ap.add_argument("--bulk-nice", type=int, default=BULK_NICE,
                    help=f"Linux: the nice value of the bulk encodes' threads (default {BULK_NICE}, the lowest; 0: the "
                    "server's own)")
    ap.add_argument("--unshared", action="store_true", help="a plain embedder: every encode its own model call")
    ap.add_argument("--skip-concurrent", action="store_true", help="only phase 3 (recall during an ingest)")
    a = ap.parse_args()
    from engine import users

    rng = random.Random(11)
    pg = LocalServer(SETTINGS).start()
    home = Path(tempfile.mkdtemp(prefix="pllm-shared-emb-"))
    stop = None
    try:
        url = make_database(pg)
        tokens = [users.add(url, f"user{i}") for i in range(a.users)]
        address, embedder, stop = serve(url, home, a.unshared, a.gather, a.bulk_nice)
        clients = [httpx.Client(base_url=address, headers={"Authorization": f"Bearer {t}"}, timeout=600)
                   for t in tokens]
        print(f"{'plain' if a.unshared else 'shared'} embedder ({embedder.runtime}), {a.users} users, "
              f"gather {a.gather * 1000:g} ms, bulk encodes at nice {a.bulk_nice}", flush=True)

        t0 = time.perf_counter()
        for c in clients:
            for start in range(0, a.memories, 100):
                items = [{"text": sentence(rng)} for _ in range(min(100, a.memories - start))]
                c.post("/memory/batch", json={"items": items}).raise_for_status()
        print(f"1. stored {a.memories} memories for each of {a.users} users in {time.perf_counter() - t0:.1f} s",
              flush=True)

        if not a.skip_concurrent:
            for c in clients:  # each user's engine made, warm
                c.get("/memory/recall", params={"q": "warm up"}).raise_for_status()
            before = counts(embedder)
            latencies: list[list[float]] = [[] for _ in clients]
            threads = [threading.Thread(target=recalls, args=(c, [sentence(rng) for _ in range(a.recalls)], lat))
                       for c, lat in zip(clients, latencies, strict=True)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            after = counts(embedder)
            every = [x for lat in latencies for x in lat]
            print(f"2. {len(every)} recalls, {a.users} users at once, in {wall:.1f} s ({len(every) / wall:.1f}/s): "
                  f"{ms(every)}", flush=True)
            if not a.unshared:
                print(f"   small encodes {after[0] - before[0]}, model calls {after[1] - before[1]}", flush=True)

        alone: list[float] = []
        recalls(clients[1], [sentence(rng) for _ in range(a.recalls)], alone)
        print(f"3. user 1 alone: {ms(alone)}", flush=True)
        paragraphs, size = [], 0
        while size < a.doc_kb * 1024:
            p = " ".join(sentence(rng) for _ in range(8))
            paragraphs.append(p)
            size += len(p) + 2
        document = "\n\n".join(paragraphs).encode("utf-8")
        result: dict = {}

        def upload() -> None:
            t = time.perf_counter()
            r = clients[0].post("/ingest/upload", files={"file": ("big-notes.txt", document)})
            r.raise_for_status()
            result.update(r.json()[0], seconds=time.perf_counter() - t)

        during: list[float] = []
        ingest = threading.Thread(target=upload)
        ingest.start()
        while ingest.is_alive():
            recalls(clients[1], [sentence(rng)], during)
        ingest.join()
        print(f"   user 0 uploads {len(document) // 1024} KB of text: {result.get('chunks')} chunks "
              f"({result.get('status')}) in {result['seconds']:.1f} s", flush=True)
        print(f"   user 1 meanwhile: {ms(during)}", flush=True)
        for c in clients:
            c.close()
    finally:
        if stop is not None:
            stop()
        pg.stop()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
