"""The HTTP API under load: remember and recall through `personal-llm serve`, idle and with the CPUs kept busy;
or, with --server, through `personal-llm serve --database` for many users of a PostgreSQL database.

    python bench/api_load.py [--items 20000] [--seconds 30] [--threads 8] [--turns 20] [--conversations 15]
    python bench/api_load.py --server [--users 8] [--clients 4] [--items 5000] [--seconds 60] [--import-batch 200]

A throwaway profile is filled with ITEMS synthetic memories and chunks (random unit vectors, through the
storage layer, as in bench/scale.py), then `personal-llm serve` runs in a subprocess (bench/_common.py
HttpClient) and, for each condition (idle, then with two CPU-bound loop processes running):

- load: THREADS client threads, each choosing remember (POST /memory/remember) or recall
  (GET /memory/recall) at random for SECONDS, while a CLI writer runs `personal-llm remember` in a loop
  (another process writing to the same store); p50 and p99 of each, requests per second, errors;
- a conversation: CONVERSATIONS requests of TURNS episodic turns each through POST /memory/batch (one
  transaction, one batch embed), and the same turns one by one through POST /memory/remember: turns
  stored per second both ways; every turn is then counted in the store (stored once each).

--facts: facts from conversations on, as with a language model configured: the server's language model is the
test Ollama server (tests/ollama_server.py, in this process), answering every extraction request at once with one
fact per turn, so the cost measured is the extraction's own (its thread, its writes, the facts' embeddings)
beside the store of the turns, not a model's. The fill's episodic memories (a third) are read first, before
anything is timed: the runs measure storing with extraction on, not a first catch-up. The number of facts
written is printed.

--server: a PostgreSQL 18 + pgvector server (tests/pg_server.py, durable commits) and a database set up by
`personal-llm server init` with USERS users, each filled with ITEMS synthetic memories and chunks (random
unit vectors, text-like by default: bench/_vectors.py; through COPY: bench/_pg.py); then `personal-llm serve
--database` in a process of its own, and for SECONDS: CLIENTS client threads per user, each choosing remember
or recall at random, and beside them one importer, a user of its own storing memories IMPORT_BATCH at a time
through POST /memory/batch (one transaction and one batch embedding each); then, as the same run's baseline,
one client alone for SECONDS. Printed: p50 and p99 of each operation, errors, the importer's memories per
second, the server process's CPU (cores) and the machine's load average at each phase's start and end; then
every user's count of memories (GET /stats) against the fill plus what the server acknowledged, and every
acknowledged id looked up in the database: nothing acknowledged may be missing or counted twice.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import HttpClient, cleanup, fmt_table, prepare_home  # noqa: E402
from bench._vectors import add_data_argument  # noqa: E402
from bench.recall_latency import percentile, sentence  # noqa: E402

OPEN_LOOP_THREADS = 128  # --rate: requests in flight at most (more would wait in the client, not the server)


def fill(home: Path, items: int) -> None:
    from bench.scale import Fill
    from engine import Engine

    with Engine.open(home, actor="sdk") as eng:
        eng.embedder.load()
        eng.space.ensure()
        took = Fill(eng).grow(items)
    print(f"filled {items:,} items in {took:.0f}s", flush=True)


def cli() -> list[str]:
    script = Path(sys.executable).with_name("personal-llm")
    return [str(script)] if script.exists() else [sys.executable, "-c", "from engine.cli import main; main()"]


def load(client: HttpClient, threads: int, seconds: float) -> dict:
    """THREADS clients mixing remember and recall, plus a CLI writer, for SECONDS."""
    lat: dict[str, list[float]] = {"remember": [], "recall": []}
    errors: list[str] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    cli_runs = {"ok": 0, "failed": 0, "seconds": []}

    def worker(n: int) -> None:
        rng = random.Random(n)
        while time.monotonic() < stop:
            op = rng.choice(("remember", "recall"))
            t0 = time.perf_counter()
            try:
                if op == "remember":
                    r = client.client.post("/memory/remember", json={"text": f"{sentence(rng)} ({rng.random():.6f})"})
                else:
                    r = client.client.get("/memory/recall", params={"q": sentence(rng).replace(".", "?"), "k": 10})
                ok = r.status_code == 200
            except Exception as e:  # a transport error is an error of the run, counted
                ok, r = False, None
                with lock:
                    errors.append(type(e).__name__)
            dt = time.perf_counter() - t0
            with lock:
                if ok:
                    lat[op].append(dt)
                elif r is not None:
                    errors.append(str(r.status_code))

    def writer() -> None:
        rng = random.Random(99)
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            p = subprocess.run([*cli(), "remember", f"CLI note {sentence(rng)} ({rng.random():.6f})"],
                               capture_output=True, text=True, env=dict(os.environ), timeout=300)
            cli_runs["seconds"].append(time.perf_counter() - t0)
            cli_runs["ok" if p.returncode == 0 else "failed"] += 1

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(threads)] + [threading.Thread(target=writer)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    return {"lat": lat, "errors": errors, "wall": wall, "cli": cli_runs}


def conversation(client: HttpClient, turns: int, conversations: int, tag: str) -> dict:
    """Turns stored per second through POST /memory/batch and one by one through POST /memory/remember."""
    rng = random.Random(tag)
    stored: list[str] = []
    t0 = time.perf_counter()
    for c in range(conversations):
        items = [{"text": f"[{tag} {c}.{t}] {sentence(rng)}", "kind": "episodic", "project": f"talk-{tag}"}
                 for t in range(turns)]
        r = client.client.post("/memory/batch", json={"items": items})
        r.raise_for_status()
        stored += [x["id"] for x in r.json()]
    batch_rate = len(stored) / (time.perf_counter() - t0)
    n_single = max(turns, (turns * conversations) // 3)
    t0 = time.perf_counter()
    for t in range(n_single):
        client.remember(f"[{tag} single {t}] {sentence(rng)}", kind="episodic", project=f"single-{tag}")
    single_rate = n_single / (time.perf_counter() - t0)
    return {"batch": batch_rate, "single": single_rate, "stored": len(stored), "unique": len(set(stored)),
            "sent": turns * conversations}


def burners(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU time so far of a process and its living children (a database server and its backends: the pool's
    connections live as long as the run)."""
    total = cpu_seconds(pid)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def server_load(a) -> int:
    """--server (see the module doc)."""
    import httpx
    import psycopg

    from bench._pg import HNSW, PgFill, admin, make_database, start_server
    from bench._vectors import generator
    from engine import users
    from engine.store.postgres.database import Database
    from tests.postgres.crash import start_server as serve

    vectors = generator(a.vectors, a.data)
    pg = start_server()
    home = Path(tempfile.mkdtemp(prefix="pllm-api-load-"))
    proc = None
    try:
        url = make_database(pg)
        names = [f"user{i}" for i in range(a.users)]
        tokens = {n: users.add(url, n) for n in [*names, "importer"]}
        with Database(url) as db:
            ids = {u.name: u for u in db.users()}
        t0 = time.perf_counter()
        with admin(url) as con:  # the HNSW indexes are built once, after every user's rows
            for index in HNSW.values():
                con.execute(f"DROP INDEX {index}")
            con.commit()
            for n, name in enumerate(names):
                PgFill(url, ids[name].id, index="during", seed=n, vectors=vectors).grow(a.items, progress=False)
            PgFill.build_indexes(con)
        print(f"filled {a.users} users x {a.items:,} items in {time.perf_counter() - t0:.0f}s", flush=True)
        proc, address = serve(url, home)
        clients = {n: httpx.Client(base_url=address, headers={"Authorization": f"Bearer {t}"}, timeout=120,
                                   limits=httpx.Limits(max_connections=a.clients + 1))
                   for n, t in tokens.items()}
        for c in clients.values():  # each user's engine made, the model warm
            c.get("/memory/recall", params={"q": "warm up", "k": 10}).raise_for_status()
        acked: dict[str, set[str]] = {n: set() for n in tokens}
        lock = threading.Lock()

        def answered(op: str, send: Callable[[], httpx.Response], errors: list[str]) -> httpx.Response | None:
            """SEND's answer when it is a 200; else None, with the error counted (a transport error too: an
            error of the run)."""
            try:
                r = send()
            except Exception as e:
                with lock:
                    errors.append(f"{op}: {type(e).__name__}")
                return None
            if r.status_code != 200:
                with lock:
                    errors.append(f"{op}: {r.status_code}")
                return None
            return r

        def request(name: str, op: str, rng: random.Random, lat: dict, errors: list[str], t0: float,
                    via: dict[str, httpx.Client]) -> None:
            """One remember or recall of user NAME; its latency from T0 (when it was sent, or due)."""
            if op == "remember":
                text = f"{sentence(rng)} ({name} {rng.random():.9f})"
                r = answered(op, lambda: via[name].post("/memory/remember", json={"text": text}), errors)
            else:
                q = sentence(rng).replace(".", "?")
                r = answered(op, lambda: via[name].get("/memory/recall", params={"q": q, "k": 10}), errors)
            if r is None:
                return
            dt = time.monotonic() - t0
            with lock:
                lat[op].append(dt)
                if op == "remember":
                    acked[name].add(r.json()["id"])

        def importer(stop: float, lat: dict, errors: list[str]) -> None:
            rng = random.Random(99 + len(acked["importer"]))
            while time.monotonic() < stop:
                items = [{"text": f"Imported {sentence(rng)} ({rng.random():.9f})", "kind": "episodic",
                          "project": "import"} for _ in range(a.import_batch)]
                t0 = time.monotonic()
                r = answered("import", partial(clients["importer"].post, "/memory/batch", json={"items": items}), errors)
                if r is None:
                    continue
                dt = time.monotonic() - t0
                with lock:
                    lat["import (batch)"].append(dt)
                    acked["importer"].update(x["id"] for x in r.json())

        def lock_waits(stop: float, seen: dict) -> None:
            """Every 0.25 s: how many of the database's backends wait for a lock (a heavyweight one: a row, a
            transaction, a table), as pg_stat_activity shows them."""
            with psycopg.connect(url, autocommit=True) as con:
                while time.monotonic() < stop:
                    events = [r[0] for r in con.execute(
                        "SELECT wait_event FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database()")]
                    seen["samples"] += 1
                    seen["waiting"] += bool(events)
                    seen["most"] = max(seen["most"], len(events))
                    seen["on"].update(events)
                    time.sleep(0.25)

        def run(threads: list[threading.Thread], lat: dict, errors: list[str], stop: float) -> dict:
            seen = {"samples": 0, "waiting": 0, "most": 0, "on": set()}
            threads = [*threads, threading.Thread(target=lock_waits, args=(stop, seen))]
            cpu0, db0, load0 = cpu_seconds(proc.pid), tree_cpu_seconds(pg.process.pid), os.getloadavg()
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return {"lat": lat, "errors": errors, "wall": time.perf_counter() - t0, "load": (load0, os.getloadavg()),
                    "server cpu": cpu_seconds(proc.pid) - cpu0, "db cpu": tree_cpu_seconds(pg.process.pid) - db0,
                    "lock waits": seen}

        def phase(who: list[str], clients_each: int, importer_on: bool) -> dict:
            """CLIENTS_EACH client threads for each user of WHO, each sending its next request when the last one
            is answered, and the importer if IMPORTER_ON, for SECONDS."""
            lat: dict[str, list[float]] = {"remember": [], "recall": [], "import (batch)": []}
            errors: list[str] = []
            stop = time.monotonic() + a.seconds

            def client(name: str, seed: int) -> None:
                rng = random.Random(seed)
                while time.monotonic() < stop:
                    request(name, rng.choice(("remember", "recall")), rng, lat, errors, time.monotonic(), clients)

            threads = [threading.Thread(target=client, args=(n, i * 100 + j + 7 * len(who)))
                       for i, n in enumerate(who) for j in range(clients_each)]
            if importer_on:
                threads.append(threading.Thread(target=importer, args=(stop, lat, errors)))
            return run(threads, lat, errors, stop)

        def open_phase(rate: float) -> dict:
            """RATE requests a second over all users (a user and remember or recall at random, at random times:
            Poisson arrivals), each sent when due whatever the others' answers (an open loop), and the importer
            beside them, for SECONDS. A latency counts from when its request was due: a server that falls behind
            shows it."""
            lat: dict[str, list[float]] = {"remember": [], "recall": [], "import (batch)": []}
            errors: list[str] = []
            stop = time.monotonic() + a.seconds
            pool = ThreadPoolExecutor(OPEN_LOOP_THREADS)

            def arrivals() -> None:
                rng = random.Random(int(rate * 1000))
                due = time.monotonic()
                while (due := due + rng.expovariate(rate)) < stop:
                    time.sleep(max(0.0, due - time.monotonic()))
                    pool.submit(request, rng.choice(names), rng.choice(("remember", "recall")),
                                random.Random(rng.random()), lat, errors, due, open_clients)
                pool.shutdown(wait=True)

            return run([threading.Thread(target=arrivals), threading.Thread(target=importer, args=(stop, lat, errors))],
                       lat, errors, stop)

        phases = {f"{a.users} users x {a.clients} clients + importer": phase(names, a.clients, True)}
        if a.rate:
            open_clients = {n: httpx.Client(base_url=address, headers={"Authorization": f"Bearer {tokens[n]}"},
                                            timeout=120, limits=httpx.Limits(max_connections=OPEN_LOOP_THREADS))
                            for n in names}
            for rate in a.rate:
                phases[f"{rate:g} requests/s (open loop) + importer"] = open_phase(rate)
            for c in open_clients.values():
                c.close()
        phases["one client + importer"] = phase(names[:1], 1, True)  # what the import alone costs a user
        phases["one client alone (baseline)"] = phase(names[:1], 1, False)
        # nothing acknowledged is lost: each user's count, and every acknowledged id in the database
        counted = {n: clients[n].get("/stats").json()["memories"] for n in tokens}
        with psycopg.connect(url) as con:
            stored = {n: {r[0] for r in con.execute(
                "SELECT m.uid FROM personal_llm.memories m WHERE m.user_id = %s", (ids[n].id,))} for n in tokens}
        for c in clients.values():
            c.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
        pg.stop()
        shutil.rmtree(home, ignore_errors=True)
    rows = []
    for label, r in phases.items():
        for op, xs in r["lat"].items():
            if xs:
                rows.append([label, op, len(xs), f"{percentile(xs, 0.5) * 1000:.0f}", f"{percentile(xs, 0.99) * 1000:.0f}",
                             f"{len(xs) / r['wall']:.1f}/s"])
        done = sum(len(xs) for op, xs in r["lat"].items() if op != "import (batch)")
        (l0, _, _), (l1, _, _) = r["load"]
        imported = len(r["lat"]["import (batch)"]) * a.import_batch
        waits = r["lock waits"]
        rows.append([label, "all requests", done, f"errors {len(r['errors'])}", "",
                     f"{done / r['wall']:.1f}/s; importer {imported / r['wall']:.1f} memories/s; CPU: serve "
                     f"{r['server cpu'] / r['wall']:.2f} cores, the database {r['db cpu'] / r['wall']:.2f}; load "
                     f"average {l0:.1f} -> {l1:.1f}; a backend waiting for a lock in {waits['waiting']} of "
                     f"{waits['samples']} looks (at most {waits['most']}"
                     + (f": {', '.join(sorted(waits['on']))})" if waits["on"] else ")")])
    print()
    print(f"`serve --database`: {a.users} users x {a.clients} clients (remember or recall at random, each sending "
          f"its next request when answered) + one importer (POST /memory/batch of {a.import_batch}), {a.seconds:.0f} s"
          + (f"; then {', '.join(f'{r:g}' for r in a.rate)} requests/s over all users (open loop) + the importer, "
             f"{a.seconds:.0f} s each" if a.rate else "")
          + f"; then one client with the importer, and alone, {a.seconds:.0f} s each; each user filled with "
          f"{a.items:,} items")
    print(fmt_table(["phase", "operation", "n", "p50 ms", "p99 ms", "rate"], rows))
    if a.rate:
        under = [rate for rate in a.rate if all(percentile(xs, 0.99) < 1.0 for op, xs in
                 phases[f"{rate:g} requests/s (open loop) + importer"]["lat"].items() if xs and op != "import (batch)")]
        print("open loop: the highest rate with every operation's p99 under 1 s: "
              + (f"{max(under):g} requests/s" if under else f"none of {', '.join(f'{r:g}' for r in a.rate)}"))
    imported = sum(len(r["lat"]["import (batch)"]) for r in phases.values()) * a.import_batch
    errors = [e for r in phases.values() for e in r["errors"]]
    print(f"importer: {imported:,} memories in all; errors: {len(errors)}"
          + (f" ({', '.join(sorted(set(errors)))})" if errors else ""))
    lost = miscounted = 0
    for n in tokens:
        fill = 0 if n == "importer" else a.items // 2
        want = fill + len(acked[n])
        missing = acked[n] - stored[n]
        lost += len(missing)
        miscounted += counted[n] != len(stored[n])
        print(f"  {n}: {counted[n]:,} memories counted, {len(stored[n]):,} rows (fill {fill:,} + {len(acked[n]):,} "
              f"acknowledged = {want:,}; stored without an answer, the client gave up: {len(stored[n]) - want:,}); "
              f"acknowledged and missing: {len(missing)}")
    print("nothing acknowledged lost" if lost == 0 else f"LOST: {lost} acknowledged memories",
          "" if miscounted == 0 else f"; {miscounted} users' counts differ from their rows", flush=True)
    lost += miscounted
    return 0 if lost == 0 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, help="synthetic memories and chunks stored first (default 20,000; with "
                    "--server 5,000 for each user)")
    ap.add_argument("--seconds", type=float, default=30.0, help="length of each load run")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--turns", type=int, default=20, help="turns per conversation request")
    ap.add_argument("--conversations", type=int, default=15)
    ap.add_argument("--busy", type=int, default=2, help="CPU-bound loop processes in the busy condition")
    ap.add_argument("--facts", action="store_true", help="facts from conversations on, against the test Ollama server")
    ap.add_argument("--server", action="store_true", help="`serve --database` for many users (see above)")
    ap.add_argument("--users", type=int, default=8, help="--server: users, each with CLIENTS client threads")
    ap.add_argument("--clients", type=int, default=4, help="--server: client threads per user")
    ap.add_argument("--import-batch", type=int, default=200, help="--server: memories per POST /memory/batch")
    ap.add_argument("--rate", type=float, nargs="+", default=[], metavar="R",
                    help="--server: after the back-to-back clients, R requests a second over all users (an open loop: "
                    "each sent when due, Poisson arrivals) with the importer, SECONDS each; prints the highest R at "
                    "which every operation's p99 stays under 1 s")
    ap.add_argument("--vectors", choices=("text", "random"), default="text",
                    help="--server: the fill's vectors (bench/_vectors.py)")
    add_data_argument(ap)
    a = ap.parse_args()
    if a.server:
        a.items = 5_000 if a.items is None else a.items
        return server_load(a)
    a.items = 20_000 if a.items is None else a.items
    home, _, tmp = prepare_home(None, "api-load")
    model = None
    if a.facts:
        from tests.ollama_server import OllamaTestServer, echo_reply, turn_facts

        def reply(request: dict) -> object:
            system = request["messages"][0]["content"] if request.get("messages") else ""
            if system.startswith("You read the turns of a conversation"):
                return turn_facts(request, lambda text: f"Someone said that {text.split('] ', 1)[-1]}")
            return echo_reply(request)

        model = OllamaTestServer(models=["llama3.2"], reply_fn=reply)  # type: ignore[arg-type]
        os.environ["OLLAMA_HOST"] = model.url
    rows = []
    convo = []
    try:
        fill(home, a.items)
        with HttpClient() as client:
            client.recall("warm up the model and the mirror")
            client.client.post("/memory/batch", json={"items": [  # and the batch embedding path
                {"text": f"warm-up turn {i}", "kind": "episodic", "project": "warm-up"} for i in range(a.turns)]})
            if model is not None:  # the fill's episodic memories are a backlog: read (and embedded) first
                t0 = time.perf_counter()
                while (st := client.client.get("/stats").json())["pending_rollup"] or st["pending_embeddings"]:
                    if time.perf_counter() - t0 > 1800:
                        raise SystemExit("the backlog of turns was not read within 30 minutes")
                    time.sleep(1)
                print(f"backlog of the fill's turns read and embedded in {time.perf_counter() - t0:.0f}s", flush=True)
            for cond in ("idle", "busy"):
                procs = burners(a.busy) if cond == "busy" else []
                try:
                    time.sleep(1 if procs else 0)
                    r = load(client, a.threads, a.seconds)
                    c = conversation(client, a.turns, a.conversations, cond)
                finally:
                    for p in procs:
                        p.terminate()
                        p.wait()
                done = sum(len(v) for v in r["lat"].values())
                for op, xs in r["lat"].items():
                    rows.append([cond, op, len(xs), f"{percentile(xs, 0.5) * 1000:.0f}" if xs else "-",
                                 f"{percentile(xs, 0.99) * 1000:.0f}" if xs else "-"])
                rows.append([cond, "all (req/s)", done, f"{done / r['wall']:.1f}/s", f"errors {len(r['errors'])}"])
                cl = r["cli"]
                rows.append([cond, "CLI remember (process)", cl["ok"],
                             f"{percentile(cl['seconds'], 0.5) * 1000:.0f}" if cl["seconds"] else "-",
                             f"failed {cl['failed']}"])
                convo.append([cond, f"{c['batch']:.1f}", f"{c['single']:.1f}", f"{c['unique']}/{c['sent']}"])
                print(f"{cond}: {done} requests, {len(r['errors'])} errors; conversation {c['batch']:.1f} turns/s "
                      f"batched, {c['single']:.1f} one by one", flush=True)
            if model is not None:
                facts = client.client.get("/stats").json()["by_kind"].get("fact", 0)
                asked = sum(1 for b in model.chat_requests if b["messages"][0]["content"].startswith("You read"))
                print(f"facts from conversations: {asked} extraction requests, {facts} facts in the store", flush=True)
    finally:
        cleanup(tmp)
        if model is not None:
            model.close()
    print()
    print(f"{a.threads} client threads (remember or recall at random) + a CLI writer, {a.seconds:.0f} s each, "
          f"{a.items:,} items; busy = {a.busy} CPU-bound loop processes")
    print(fmt_table(["condition", "operation", "n", "p50 ms", "p99 ms"], rows))
    print()
    print(f"conversation: {a.conversations} requests of {a.turns} turns (POST /memory/batch) against the same "
          "turns one by one (POST /memory/remember)")
    print(fmt_table(["condition", "batched turns/s", "one by one turns/s", "stored once"], convo))
    return 0


if __name__ == "__main__":
    sys.exit(main())
