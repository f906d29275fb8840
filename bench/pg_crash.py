"""kill -9 of the server during concurrent writes: no acknowledged write lost, nothing half-written.

    python bench/pg_crash.py [--trials 20] [--users 4] [--threads 2] [--kill-within 2.0]

A PostgreSQL 18 + pgvector server (tests/pg_server.py, run durable: fsync and synchronous commits on) with a
database set up by `personal-llm server init` and USERS users; `personal-llm serve --database` in a process of
its own. Each trial (tests/postgres/crash.py): THREADS threads per user remember through the API (single
memories, and batches of five in one transaction), the server gets SIGKILL at a random moment within
KILL_WITHIN seconds after the first writes went through, with requests in flight; it is started again and
every acknowledged memory of every trial so far is checked in the database (and the latest through the API),
with batches whole and no row half-written (words, hash, vector against its mark, the kept counts). At the end
the restarted server's background embeds what was stored without a vector, if anything.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._pg import make_database, start_server  # noqa: E402
from tests.postgres import crash  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2, help="writing threads per user")
    ap.add_argument("--kill-within", type=float, default=2.0,
                    help="SIGKILL at a random moment this many seconds after the first writes went through")
    a = ap.parse_args()
    from engine import users

    server = start_server()
    home = Path(tempfile.mkdtemp(prefix="pllm-crash-"))
    proc = None
    try:
        url = make_database(server)
        tokens = {f"user{i}": users.add(url, f"user{i}") for i in range(a.users)}
        ledger = crash.Ledger()
        rng = random.Random(7)
        proc, address = crash.start_server(url, home)
        in_flight = 0
        for n in range(1, a.trials + 1):
            proc, address, t = crash.trial(url, address, proc, tokens, home, ledger, rng, threads=a.threads,
                                           kill_within=a.kill_within)
            in_flight += t.in_flight
            print(f"trial {n}: {t.acked} writes acknowledged, killed after {t.killed_after:.1f}s with {t.in_flight} "
                  f"requests in flight; restarted in {t.restart:.1f}s; all {sum(len(m) for m in ledger.acked.values())} "
                  "acknowledged memories there, nothing half-written", flush=True)
        t0 = time.monotonic()
        while (left := crash.pending(address, tokens)) and time.monotonic() - t0 < 300:
            time.sleep(1)
        print(f"\n{a.trials} trials, {a.users} users x {a.threads} threads: "
              f"{sum(len(m) for m in ledger.acked.values())} acknowledged memories, none lost; {in_flight} requests "
              f"were in flight at the kills; memories waiting for a vector at the end: {left}", flush=True)
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(30)
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
