"""Where the CPU of a server's request goes: one user's recall and remember on PostgreSQL, one at a time, split
into the server process's CPU and the database's, with the statements that cost the database most.

    .venv/bin/python bench/pg_request_cpu.py [--users 8] [--items 5000] [--ops 40]

A PostgreSQL of its own (bench/_pg.py: durable, as a server runs) set up as `personal-llm server init` does,
USERS users each filled with ITEMS synthetic memories and chunks (text-like vectors, through COPY, the HNSW
indexes built after), as bench/api_load.py --server fills them; then one user's engine as `personal-llm serve
--database` makes it (Engine.for_user, the shared embedder) runs OPS recalls and OPS remembers of
bench/recall_latency.py's sentences, one after the other. For each: the wall time, the CPU of the calling
thread and of the whole server process (the model's thread included), the CPU of the database's backend for
each statement (its /proc schedstat, read around the statement), of all the database's processes (its
parallel workers included) and the statements run. Counted in CPU, not in
wall time, the figures hold on a busy machine, where a request's wall time is mostly waiting for a core; the
HTTP layer (a few per cent of `serve`'s CPU under bench/api_load.py --server) is not in them.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from bench._common import fmt_table  # noqa: E402
from bench._vectors import add_data_argument  # noqa: E402
from bench.api_load import cpu_seconds  # noqa: E402
from bench.recall_latency import sentence  # noqa: E402


def server_cpu(postmaster: int) -> float:
    """CPU seconds so far of a PostgreSQL server's processes: those running now (backends, parallel workers,
    autovacuum...) and those that ended (a parallel worker lives for one statement), which the postmaster
    has reaped (its children's time)."""
    fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    total = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(postmaster):
                    total += backend_cpu(int(entry.name))
            except (OSError, IndexError):  # ended meanwhile
                pass
    return total


def backend_cpu(pid: int) -> float:
    """CPU seconds of a PostgreSQL backend so far (schedstat: nanoseconds on a CPU)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


class Statements:
    """Every statement run on a psycopg cursor while `on`: its count, and its backend's CPU, by text."""

    def __init__(self) -> None:
        self.on = False
        self.seen: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        self._execute = psycopg.Cursor.execute
        stats = self

        def execute(cur, query, params=None, **kw):  # noqa: ANN001, ANN202
            if not stats.on:
                return stats._execute(cur, query, params, **kw)
            pid = cur.connection.info.backend_pid
            c0 = backend_cpu(pid)
            try:
                return stats._execute(cur, query, params, **kw)
            finally:
                text = query if isinstance(query, str) else query.as_string(cur.connection)
                s = stats.seen[" ".join(text.split())[:100]]
                s[0] += 1
                s[1] += backend_cpu(pid) - c0

        psycopg.Cursor.execute = execute  # type: ignore[method-assign]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--items", type=int, default=5000, help="memories and chunks of each user (half each)")
    ap.add_argument("--ops", type=int, default=40, help="recalls, then remembers, timed")
    ap.add_argument("--top", type=int, default=8, help="statements shown for each operation")
    add_data_argument(ap)
    a = ap.parse_args()
    if not Path("/proc/self/schedstat").exists():
        raise SystemExit("This benchmark reads /proc/PID/schedstat (Linux).")

    from bench._pg import HNSW, PgFill, admin, make_database, start_server
    from bench._vectors import generator
    from engine import Engine, users
    from engine.config import load_settings
    from engine.shared_embedder import SharedEmbedder
    from engine.store.postgres.database import Database

    stats = Statements()
    pg = start_server()
    home = Path(tempfile.mkdtemp(prefix="pllm-request-cpu-"))
    rows = []
    try:
        url = make_database(pg)
        names = [f"user{i}" for i in range(a.users)]
        for name in names:
            users.add(url, name)
        with Database(url) as db:
            ids = {u.name: u.id for u in db.users()}
        t0 = time.perf_counter()
        vectors = generator("text", a.data)
        with admin(url) as con:
            for index in HNSW.values():
                con.execute(f"DROP INDEX {index}")
            con.commit()
            for n, name in enumerate(names):
                PgFill(url, ids[name], index="during", seed=n, vectors=vectors).grow(a.items, progress=False)
            PgFill.build_indexes(con)
        with psycopg.connect(url, autocommit=True) as con:
            con.execute("VACUUM ANALYZE")
        print(f"filled {a.users} users x {a.items:,} items in {time.perf_counter() - t0:.0f}s", flush=True)
        os.environ["PERSONAL_LLM_HOME"] = str(home)
        settings = load_settings(home)
        embedder = SharedEmbedder(settings.embedding_model)
        rng = random.Random(5)
        try:
            with Database(url, max_size=8) as db:
                eng = Engine.for_user(db, ids[names[0]], "#1", home=home, settings=settings, actor="api",
                                      embedder=embedder)
                eng.start_background()
                for _ in range(5):  # the model loaded, the words' counts and statements warm
                    eng.recall(sentence(rng).replace(".", "?"), k=10)
                    eng.remember(f"{sentence(rng)} ({rng.random():.9f})")
                time.sleep(2)
                for op in ("recall", "remember"):
                    stats.seen.clear()
                    wall = thread = 0.0
                    process0, everything0 = cpu_seconds(os.getpid()), server_cpu(pg.process.pid)
                    stats.on = True
                    for _ in range(a.ops):
                        t0, c0 = time.perf_counter(), time.thread_time()
                        if op == "recall":
                            eng.recall(sentence(rng).replace(".", "?"), k=10)
                        else:
                            eng.remember(f"{sentence(rng)} ({rng.random():.9f})")
                        wall += time.perf_counter() - t0
                        thread += time.thread_time() - c0
                    stats.on = False
                    process = cpu_seconds(os.getpid()) - process0
                    everything = server_cpu(pg.process.pid) - everything0
                    database = sum(s[1] for s in stats.seen.values())
                    count = sum(s[0] for s in stats.seen.values())
                    ms = 1000 / a.ops
                    rows.append([op, f"{wall * ms:.0f}", f"{thread * ms:.1f}", f"{process * ms:.1f}",
                                 f"{database * ms:.1f}", f"{everything * ms:.1f}", f"{count / a.ops:.1f}"])
                    print(f"\n{op}: the statements that cost the database most (a {op}'s share)")
                    top = sorted(stats.seen.items(), key=lambda kv: -kv[1][1])[: a.top]
                    print(fmt_table(["statement", "runs", "database CPU ms"],
                                    [[text, f"{c / a.ops:.2f}", f"{s * ms:.2f}"] for text, (c, s) in top]))
                eng.close()
        finally:
            embedder.close()
    finally:
        pg.stop()
        shutil.rmtree(home, ignore_errors=True)
    print(f"\none user of {a.users} with {a.items:,} items each, {a.ops} of each operation, one at a time "
          f"(load average {os.getloadavg()[0]:.1f})")
    print(fmt_table(["operation", "wall ms", "its thread's CPU ms", "server process CPU ms",
                     "its backend's CPU ms", "all database processes' CPU ms", "statements"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
