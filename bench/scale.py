"""Costs as the store grows: each operation's median and p95 at 1k, 10k, 100k and 1M items, next to the same
on a store of the first size timed in turn with it (ratios), and recall next to a numpy floor measured in the
same run.

    python bench/scale.py [--sizes 1000 10000 100000 1000000] [--ops 60] [--queries 30] [--dir DIR [--keep]]
                          [--reopens 3] [--fill-only] [--backend sqlite postgres] [--pg-index after|during]
                          [--vectors text|mixture|random] [--pg-sweep]

With --keep, a profile already in DIR (from an earlier run with --dir DIR --keep) is grown from where it
is instead of being made again, and kept afterwards: filling a million items takes a long while.

One encrypted store (a throwaway profile, or DIR) grows from size to size. The fill is synthetic so that a
million items are feasible: half memories (note-like sentences from a made-up Zipf vocabulary) and half
document chunks (100 per document), each with a **made-up unit vector** (bench/_vectors.py: `--vectors text`,
the default, draws them with the mean and covariance of the bundled model's embeddings of real sentences;
`--vectors mixture`, from a mixture of 25 Gaussians fitted to real embeddings, their clusters as well as their
spread: nearer real text for an HNSW index, though still harder; `--vectors random`, uniformly on the sphere,
the worst case for a graph index), inserted directly through the storage layer (`engine/storage`,
`engine/vectors.put`) in transactions of 20,000 rows — not through
`remember`, whose embedding alone would take hours at this size. Recall therefore ranks made-up vectors:
fine for timing and for comparing the vector search with exact search, not for relevance (retrieval.md).

At each size, through the engine facade with the real embedding model:
- flat operations: remember (words only, and with its vector and near-duplicate check), get, update (a
  field), forget (a memory just made, and one of the fill's: cold pages, a stored mirror block to rewrite),
  a page of the list, stats, a page of the audit log, the change feed an open app polls (nothing new, and
  right after another program's write), once the engine's background work after the open (the
  near-duplicate buckets, a save of the mirror, a merge of the full-text indexes) is done (its duration is
  printed). Each is timed **in turn with the same operation on a baseline**: a store of the first size
  (topped up to it before each round) open in this process beside the measured one, operation by
  operation, so that what the machine does meanwhile weighs on both alike; the ratio is to the baseline's
  median of the same round (at the first size it shows the method's own noise: ~1.0);
- recall end to end against the floor: the same query embedding plus a numpy brute-force float32 top-10
  over the same vectors (held by this script), on one BLAS thread as the engine runs a query;
- recall@10 of the engine's vector search against exact numpy top-10 (queries: random unit vectors and
  stored vectors with noise), the vector mirror's resident bytes against float32, and the first recall
  after reopening the store: once with the mirror loaded from every row (nothing stored), then --reopens
  times (a different question each) from the blocks it keeps in the store (written, and timed, in
  between), with the model already loaded: the first recall reads the blocks as it goes, the second
  loads the mirrors (both timed; the first's CPU too, of every thread of the process: on a busy machine the
  wall time is mostly waiting for a core, the CPU is the work);
- whole CLI processes on the store: `personal-llm recall` (start, open, model, first recall, exit) next to
  `personal-llm stats` (start and open only), wall time and peak resident size.

--backend postgres (alone, or beside sqlite in one run, `--backend sqlite postgres`): the same synthetic fill
for one user of a PostgreSQL 18 + pgvector database (a real server from tests/pg_server.py, run durable:
fsync and synchronous commits on), loaded through COPY in transactions of 100,000 rows with the HNSW
indexes (the product's, on halfvec) built after the fill, in a session with room for the graph and one
parallel worker (bench/_pg.py; `--pg-index during`: kept and filled row by row, to compare); at each size,
through that user's engine (Engine.for_user, the server's): recall end to end, the vector search and its
recall@10 against exact numpy top-10 (with the hnsw.ef_search the engine chose, or "exact" for a user with few
vectors: engine/store/postgres/vectors.py), remember (with its vector), get, forget (a memory just made, and
one of the fill's), and the sizes of the HNSW indexes; `--pg-sweep` measures the vector search again with
other fixed candidates and ef_search (SWEEP), and exactly (every distance; up to 200,000 items). With both
backends a table puts them side by side.

On a virtual machine the first use of memory the machine has not touched since it booted (or has handed
back to its host) can cost far more than later uses (~2 ms per MB on the 2-core VM of docs/performance.md):
the mirror is hundreds of MB of fresh memory, so its first loads there are slower than on a machine in use.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import fmt_table  # noqa: E402
from bench._vectors import KINDS, add_data_argument, generator  # noqa: E402
from bench.recall_latency import percentile, sentence  # noqa: E402

DIM = 384
TX_ROWS = 20_000
CHUNKS_PER_DOC = 100


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


class Fill:
    """Grows the store with synthetic memories and chunks; keeps every stored vector for the floor."""

    def __init__(self, eng, vectors=unit_vectors):
        self.eng = eng
        self.vectors = vectors  # (numpy Generator, n) -> n unit vectors (bench/_vectors.py)
        self.rng = random.Random(1)
        self.nrng = np.random.default_rng(1)
        self.ids: dict[str, list[np.ndarray]] = {"memories": [], "chunks": []}
        self.vecs: dict[str, list[np.ndarray]] = {"memories": [], "chunks": []}
        self.count = 0

    def resume(self) -> None:
        """Take over what a kept profile already holds (its vectors, for the floor)."""
        con = self.eng.store.con
        for table in ("memories", "chunks"):
            ids, vecs = [], []
            for rid, blob in con.execute(f"SELECT id, embedding FROM vec_{table}_f32 ORDER BY id"):
                ids.append(rid)
                vecs.append(np.frombuffer(blob, dtype=np.float32))
            if ids:
                self.ids[table].append(np.array(ids, dtype=np.int64))
                self.vecs[table].append(np.stack(vecs))
        self.count = sum(len(x) for v in self.ids.values() for x in v)
        # what grows from here is drawn afresh: seeded as before, the new rows repeated the first rows' vectors
        # and sentences, whose ties put recall@10 against exact below 1 (the top 10 of equal scores is any)
        self.rng = random.Random(1 + self.count)
        self.nrng = np.random.default_rng([1, self.count])

    def grow(self, target: int) -> float:
        from engine.memory_rules import content_hash, new_uid
        from engine.store.sqlite import documents as doc_rows
        from engine.store.sqlite import memories as memory_rows
        from engine.store.sqlite import vectors

        t0 = time.perf_counter()
        while self.count < target:
            n = min(TX_ROWS, target - self.count)
            n_mem = n // 2
            n_chunk = n - n_mem
            now = time.time()
            with self.eng.store.write() as con:
                ids = []
                for _ in range(n_mem):
                    text = sentence(self.rng)
                    ids.append(memory_rows.insert(
                        con, uid=new_uid("mem"), kind=self.rng.choice(("fact", "episodic", "procedural")), text=text,
                        chash=content_hash(text), importance=self.rng.random(), now=now - self.rng.random() * 3e7,
                        event_at=None, project=self.rng.choice((None, "work", "home")), source="user", meta=None,
                        conversation_id=None, document_id=None, done=True, dedup_pending=False))
                v = self.vectors(self.nrng, len(ids))
                vectors.put(con, "memories", ids, v)
                memory_rows.mark_embedded(con, "memories", ids)
                self.ids["memories"].append(np.array(ids, dtype=np.int64))
                self.vecs["memories"].append(v)
                cids: list[int] = []
                for start in range(0, n_chunk, CHUNKS_PER_DOC):
                    m = min(CHUNKS_PER_DOC, n_chunk - start)
                    doc = doc_rows.insert(con, uid=new_uid("doc"), path=None, title=f"Synthetic {self.count + start}",
                                          mime="text/plain", chash=new_uid("h"), size=0, mtime=None,
                                          project=self.rng.choice((None, "work")), status="ready", chunks=m,
                                          now=now, meta="{}")
                    rows = []
                    for pos in range(m):
                        text = " ".join(sentence(self.rng) for _ in range(3))
                        rows.append((new_uid("chk"), doc, pos, text, content_hash(text), f"p{pos}", None, None, 60))
                    cids += doc_rows.insert_chunks(con, doc, rows)
                con.executemany("UPDATE chunks SET extracted = 1 WHERE id = ?", [(i,) for i in cids])
                v = self.vectors(self.nrng, len(cids))
                vectors.put(con, "chunks", cids, v)
                memory_rows.mark_embedded(con, "chunks", cids)
                self.ids["chunks"].append(np.array(cids, dtype=np.int64))
                self.vecs["chunks"].append(v)
                vectors.bump_epoch(con)  # another writer, as far as any mirror is concerned
            self.count += n
            if self.count % 100_000 == 0:
                print(f"    {self.count:,} items ({time.perf_counter() - t0:.0f}s)", flush=True)
        return time.perf_counter() - t0

    def drop(self, table: str, gone: set[int]) -> None:
        """Forget these rows of the bookkeeping too (they were forgotten in the store)."""
        keep = [~np.isin(ids, list(gone)) for ids in self.ids[table]]
        self.ids[table] = [ids[k] for ids, k in zip(self.ids[table], keep, strict=True)]
        self.vecs[table] = [v[k] for v, k in zip(self.vecs[table], keep, strict=True)]
        self.count = sum(len(x) for v in self.ids.values() for x in v)

    def matrix(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids, table code 0 = memory / 1 = chunk, vectors) of everything stored, for the floor."""
        ids = np.concatenate([*self.ids["memories"], *self.ids["chunks"]])
        code = np.concatenate([np.zeros(sum(len(x) for x in self.ids["memories"]), np.int8),
                               np.ones(sum(len(x) for x in self.ids["chunks"]), np.int8)])
        mat = np.concatenate([*self.vecs["memories"], *self.vecs["chunks"]])
        return ids, code, mat


def make_probes(fill, mat: np.ndarray, queries: int) -> list[np.ndarray]:
    """The vector search's questions: half new vectors of the fill's kind, half stored vectors with noise
    (a question near something stored)."""
    nrng = np.random.default_rng(7)
    probes = list(fill.vectors(nrng, queries // 2))
    for p in nrng.integers(0, len(mat), queries - queries // 2):
        v = mat[p] + 0.5 * unit_vectors(nrng, 1)[0] / np.sqrt(2)
        probes.append(v / np.linalg.norm(v))
    return probes


def load_average() -> str:
    """The machine's load average (1, 5, 15 minutes), printed beside the figures: on a shared machine a time
    means little without it."""
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def one_blas_thread():
    """The floor runs on one BLAS thread, as the engine runs a query (docs/performance.md, "Threads"): left
    to itself OpenBLAS spreads the float32 product over every core (twice as fast on 2 cores), and whether it
    does in a run would otherwise depend on what else the process loaded."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1, user_api="blas")


def settle(eng, made: list[str], rng: random.Random) -> float:
    """Seconds until what the engine does in the background after opening is done: the first remember
    with a vector starts the near-duplicate buckets (seconds at 1M rows, sharing the CPU with whatever runs),
    a save of the stored mirror may be running, and so may a merge of the full-text indexes. The flat
    operations are then timed in steady state."""
    t0 = time.perf_counter()
    made.append(eng.remember(f"{sentence(rng)} ({rng.random()})", embed="sync").id)
    memories = eng.space.index["memories"]
    while not memories.near_complete() and time.perf_counter() - t0 < 300:
        time.sleep(0.05)
    for ix in eng.space.index.values():
        ix.wait_saved(300)
    eng.fts.wait(300)  # a merge of the full-text indexes the fill started (engine/fts_merge.py)
    return time.perf_counter() - t0


_WRITER = """
import sys
from engine import Engine
from engine.embeddings import NoEmbedder
with Engine.open(sys.argv[1], actor="cli", embedder=NoEmbedder(), interactive=False) as eng:
    print("ready", flush=True)
    for line in sys.stdin:
        what, _, arg = line.strip().partition(" ")
        if what == "remember":
            print(eng.remember(arg, embed="none").id, flush=True)
        elif what == "forget":
            eng.forget(arg)
            print("done", flush=True)
"""


def feed_times(sides: list[Side], ops: int) -> None:
    """The change feed as an open app polls it: with nothing new (the common poll), and right after another
    program's write (another process on the same file, as the CLI or the API is; its write is not timed),
    the sides taking turns."""
    import subprocess

    for side in sides:
        side.token = side.eng.changes_since(None).token
    interleaved(sides, "change feed (nothing new)", lambda s, i: s.eng.changes_since(s.token), ops)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(s.home)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=env) for s in sides]
    try:
        for w in writers:
            assert w.stdout is not None and w.stdout.readline().strip() == "ready"

        def ask(w, line: str) -> str:
            w.stdin.write(line + "\n")
            w.stdin.flush()
            return w.stdout.readline().strip()

        for side in sides:
            side.times["change feed (after another's write)"] = []
        for _ in range(ops):
            for side, w in zip(sides, writers, strict=True):
                made = ask(w, f"remember {sentence(side.rng)} ({side.rng.random()})")
                t0 = time.perf_counter()
                seen = side.eng.changes_since(side.token)
                side.times["change feed (after another's write)"].append(time.perf_counter() - t0)
                assert seen.token > side.token and any(made in c.memories for c in seen.changes), "the feed missed a write"
                ask(w, f"forget {made}")
                side.token = side.eng.changes_since(seen.token).token
    finally:
        for w in writers:
            if w.stdin:
                w.stdin.close()
            w.wait(60)


class Side:
    """A store the flat operations run on: the one grown to each size, or the baseline of the first size kept
    open beside it (both in this process)."""

    def __init__(self, eng, fill: Fill, home: Path, rng: random.Random):
        self.eng, self.fill, self.home, self.rng = eng, fill, home, rng
        self.made: list[str] = []
        self.times: dict[str, list[float]] = {}
        self.token = 0
        self.settled = 0.0


def interleaved(sides: list[Side], name: str, fn, reps: int) -> None:
    """Time fn(side, i) for i in range(reps), the sides taking turns operation by operation, so that whatever
    the machine does meanwhile (another process, a slower minute of a shared VM) weighs on each alike: a
    baseline measured minutes apart moved a 0.15 ms operation by 2x between runs."""
    for side in sides:
        side.times[name] = []
    for i in range(reps):
        for side in sides:
            t0 = time.perf_counter()
            fn(side, i)
            side.times[name].append(time.perf_counter() - t0)


def flat_operations(sides: list[Side], ops: int) -> None:
    """The operations that should cost the same at any size, on every side in turn (Side.times)."""
    for side in sides:
        side.made = []
        side.settled = settle(side.eng, side.made, side.rng)

    def remember(embed: str):
        return lambda s, i: s.made.append(s.eng.remember(f"{sentence(s.rng)} ({s.rng.random()})", embed=embed).id)

    interleaved(sides, "remember (words)", remember("background"), ops)
    interleaved(sides, "remember (vector)", remember("sync"), ops)
    for side in sides:
        side.some = [side.made[side.rng.randrange(len(side.made))] for _ in range(ops)]
    interleaved(sides, "get", lambda s, i: s.eng.get(s.some[i]), ops)
    interleaved(sides, "update (a field)", lambda s, i: s.eng.update(s.some[i], importance=s.rng.random()), ops)
    interleaved(sides, "list a page", lambda s, i: s.eng.list_memories(limit=50, offset=(i % 3) * 50), ops)
    interleaved(sides, "stats", lambda s, i: s.eng.stats(), ops)
    interleaved(sides, "audit log page", lambda s, i: s.eng.audit_log(limit=50), ops)
    feed_times(sides, ops)
    for side in sides:  # all of them: the next size compares against the fill alone
        side.doomed = list(dict.fromkeys(side.made))
    both = min(len(s.doomed) for s in sides)
    interleaved(sides, "forget", lambda s, i: s.eng.forget(s.doomed[i]), both)
    for side in sides:
        for uid in side.doomed[both:]:
            side.eng.forget(uid)
    # and memories of the fill, anywhere in it: their pages are mostly not in the cache, and their stored
    # mirror block is rewritten (the just-made ones above have none yet)
    for side in sides:
        mem = np.concatenate(side.fill.ids["memories"])
        side.old = [int(x) for x in mem[np.random.default_rng(len(mem)).choice(len(mem), min(ops, len(mem)), replace=False)]]
        side.uids = dict(side.eng.con.execute(
            f"SELECT id, uid FROM memories WHERE id IN ({','.join('?' * len(side.old))})", side.old).fetchall())
    interleaved(sides, "forget (an old memory)", lambda s, i: s.eng.forget(s.uids[s.old[i]]),
                min(len(s.old) for s in sides))
    for side in sides:
        side.fill.drop("memories", set(side.old))


def measure(eng, fill: Fill, home: Path, ops: int, queries: int, rng: random.Random,
            baseline: Side) -> dict:
    from engine.store.sqlite.vectors import Filter

    res: dict = {}
    ids, code, mat = fill.matrix()
    probes = make_probes(fill, mat, queries)
    found = total = 0
    vec_t, np_t = [], []
    for q in probes:
        q = q.astype(np.float32)
        with one_blas_thread():
            t0 = time.perf_counter()
            s = mat @ q
            top = np.argpartition(-s, 10)[:10]
            np_t.append(time.perf_counter() - t0)
        exact = {(int(code[i]), int(ids[i])) for i in top}
        t0 = time.perf_counter()
        hm = eng.space.index["memories"].search(eng.con, q, 10, Filter(activity=True))
        hc = eng.space.index["chunks"].search(eng.con, q, 10, Filter(activity=True))
        vec_t.append(time.perf_counter() - t0)
        ours = sorted([(s_, 0, i) for i, s_ in hm] + [(s_, 1, i) for i, s_ in hc], reverse=True)[:10]
        found += len(exact & {(c, i) for _, c, i in ours})
        total += 10
    res["vector search"], res["numpy top-10"] = vec_t, np_t
    big = Side(eng, fill, home, rng)
    flat_operations([big, baseline], ops)
    res.update(big.times)
    res["settling after the open, s"] = big.settled
    res["baseline"] = dict(baseline.times)

    qs = [sentence(rng).replace(".", "?") for _ in range(queries)]
    eng.recall(qs[0])  # warm
    rec, floor = [], []
    for q in qs:
        t0 = time.perf_counter()
        eng.recall(q)
        rec.append(time.perf_counter() - t0)
        with one_blas_thread():
            t0 = time.perf_counter()
            qv = eng.embedder.encode_one(q)
            s = mat @ qv
            top = np.argpartition(-s, 10)[:10]
            top[np.argsort(-s[top])]
            floor.append(time.perf_counter() - t0)
    res["recall"], res["floor"] = rec, floor

    res["recall@10"] = found / total
    res["mirror bytes"] = float(sum(ix.resident_bytes(vectors_only=True) for ix in eng.space.index.values()))
    res["mirror bytes (all)"] = float(sum(ix.resident_bytes() for ix in eng.space.index.values()))
    res["float32 bytes"] = float(mat.nbytes)
    return res


FIRST_QUESTIONS = ("what did I plan for the garden?", "where is the spare key?", "when is the harbour meeting?",
                   "which book did I lend to Sam?", "how do I reset the router?")


def reopen(eng, home: Path, question: str = FIRST_QUESTIONS[0]):
    """Close, open again, and time the open, the first recall (with stored blocks, it reads them as it goes:
    no mirror is loaded) and a second one (which loads the mirrors); with no background saving, so that
    what the next open finds is what the benchmark stored. Returns (eng, open s, first s, second s, how,
    first's CPU s): the CPU of every thread of this process during the first recall (reading the blocks is
    decryption on two threads), which a busy machine does not stretch as it stretches the wall time."""
    from engine import Engine
    from engine.store.sqlite import vectors

    eng.close()
    gc.collect()
    vectors.STORED_MIN_ROWS = 1 << 62  # saving is done (and timed) by the benchmark itself
    t0 = time.perf_counter()
    eng = Engine.open(home, actor="sdk")
    opened = time.perf_counter() - t0
    eng.memories.keep_index_cached()  # as Engine.start_background does in the app and the server (the rest of
    # it, the mirrors loading, would change what the first recall below measures)
    eng.embedder.load()
    c0, t0 = time.process_time(), time.perf_counter()
    eng.recall(question)
    first, cpu = time.perf_counter() - t0, time.process_time() - c0
    how = "/".join(f"{t}: {'read as it went' if ix._mirror is None else ix.loaded_from}"
                   for t, ix in eng.space.index.items())
    t0 = time.perf_counter()
    eng.recall(question + " and after that?")
    second = time.perf_counter() - t0
    return eng, opened, first, second, how, cpu


def cli_times(home: Path, runs: int) -> dict[str, float]:
    """Median wall time of a whole `personal-llm recall` process on the store (start, open, model, first
    recall, exit) and of a `personal-llm stats` one (start, open, exit), the second being what every
    command costs before its own work."""
    import subprocess

    env = dict(os.environ, PERSONAL_LLM_HOME=str(home))
    script = Path(sys.executable).with_name("personal-llm")
    cli = [str(script)] if script.exists() else [sys.executable, "-c", "import sys; from engine.cli import main; sys.exit(main())"]
    out = {}
    for what, args in (("recall", ["recall", "what is on the shopping list?"]), ("stats", ["stats"])):
        times, peaks = [], []
        for _ in range(runs):
            # through a small launcher: a child forked from this big process would count its pages in its
            # peak resident size (Linux keeps the high-water mark across fork and exec)
            done = subprocess.run([sys.executable, "-c", _LAUNCHER, *cli, *args], env=env, check=False,
                                  capture_output=True, text=True, cwd=str(Path(__file__).resolve().parents[1]))
            if done.returncode != 0:
                raise SystemExit(f"`personal-llm {' '.join(args)}` failed ({done.returncode}):\n{done.stderr}")
            seconds, peak = done.stdout.split()[-2:]
            times.append(float(seconds))
            peaks.append(int(peak) * 1024)  # KiB on Linux
        out[what] = percentile(times, 0.5)
        out[f"{what} rss"] = percentile(peaks, 0.5)
    return out


_LAUNCHER = """
import resource, subprocess, sys, time
t0 = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    ap.add_argument("--ops", type=int, default=60, help="repetitions of each flat operation per size")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--dir", help="put the profile here (default: a temp dir, deleted afterwards)")
    ap.add_argument("--keep", action="store_true", help="grow the profile already in --dir, and keep it")
    ap.add_argument("--reopens", type=int, default=3, choices=range(1, len(FIRST_QUESTIONS) + 1),
                    help="times the store is reopened for the first recall from the stored mirror (median)")
    ap.add_argument("--fill-only", action="store_true", help="fill to the largest size and stop")
    ap.add_argument("--backend", nargs="+", choices=("sqlite", "postgres"), default=["sqlite"],
                    help="the stores measured, in this order (postgres: see above)")
    ap.add_argument("--pg-sweep", action="store_true",
                    help="postgres: also measure the vector search with other candidates and ef_search settings")
    ap.add_argument("--pg-index", choices=("after", "during"), default="after",
                    help="postgres: build the HNSW indexes after each fill, or keep them during it")
    ap.add_argument("--vectors", choices=KINDS, default="text",
                    help="the fill's vectors: text-like (the model's statistics), a mixture fitted to real embeddings, or "
                         "uniformly random (bench/_vectors.py)")
    add_data_argument(ap)
    a = ap.parse_args()
    a.make_vectors = generator(a.vectors, a.data)
    if a.keep and not a.dir:
        ap.error("--keep needs --dir")
    if "postgres" in a.backend and (a.keep or a.fill_only):
        ap.error("--keep and --fill-only are for the sqlite backend")
    done: dict[str, dict[int, dict]] = {}
    for backend in a.backend:
        done[backend] = run_postgres(a) if backend == "postgres" else run_sqlite(a)
    if len(done) > 1:
        side_by_side(done)
    return 0


def run_sqlite(a) -> dict[int, dict]:
    from engine import Engine
    from engine.store.sqlite import vectors

    min_rows = vectors.STORED_MIN_ROWS
    base = Path(a.dir).resolve() if a.dir else Path(tempfile.mkdtemp(prefix="pllm-scale-"))
    if base.exists() and not a.keep:
        shutil.rmtree(base)
    base.mkdir(parents=True, exist_ok=True)
    os.environ["PERSONAL_LLM_HOME"] = str(base / "profile")
    os.environ["PYTHON_KEYRING_BACKEND"] = "keyrings.alt.file.PlaintextKeyring"
    os.environ["XDG_DATA_HOME"] = str(base / "xdg-data")
    rng = random.Random(3)
    eng = Engine.open(base / "profile", actor="sdk")
    eng.embedder.load()
    eng.space.ensure()
    fill = Fill(eng, a.make_vectors)
    if a.keep:
        fill.resume()
        print(f"kept profile: {fill.count:,} items", flush=True)
    # the baseline: a store of the first size kept open beside the big one, the flat operations timed on the
    # two in turn (interleaved); topped up to its size before each round
    base_home = base / "baseline" / "profile"
    shutil.rmtree(base_home.parent, ignore_errors=True)
    base_eng = None
    results: dict[int, dict] = {}
    try:
        if a.fill_only:
            took = fill.grow(max(a.sizes))
            print(f"filled to {fill.count:,} in {took:.0f}s", flush=True)
            return {}
        for n in a.sizes:
            if n < fill.count:
                print(f"size {n:,}: skipped (the kept profile holds {fill.count:,})", flush=True)
                continue
            took = fill.grow(n)
            eng.fts.wait(600)  # the merge of the full-text indexes a big write starts (engine/fts_merge.py)
            print(f"size {n:,}: filled in {took:.0f}s; {load_average()}", flush=True)
            with eng.store.write() as con:
                vectors.drop_stored(con)  # the first reopen loads the mirror from every row
            eng, opened, first, _, how, _ = reopen(eng, base / "profile")
            t0 = time.perf_counter()
            stored = all(ix.save() for ix in eng.space.index.values())
            saved = time.perf_counter() - t0
            longest = max(ix.last_save.get("longest_write", 0.0) for ix in eng.space.index.values())
            firsts, seconds, cpus = [], [], []
            for q in FIRST_QUESTIONS[: a.reopens]:
                eng, opened2, first2, second2, how2, cpu2 = reopen(eng, base / "profile", q)
                firsts.append(first2)
                seconds.append(second2)
                cpus.append(cpu2)
            first2 = percentile(firsts, 0.5)
            vectors.STORED_MIN_ROWS = min_rows
            fill.eng = eng
            if base_eng is None:
                base_eng = Engine.open(base_home, actor="sdk")
                base_eng.embedder.load()
                base_eng.space.ensure()
                baseline = Side(base_eng, Fill(base_eng, a.make_vectors), base_home, random.Random(4))
            baseline.fill.grow(a.sizes[0])
            base_eng.fts.wait(600)
            # opened again, as the measured store was (`reopen`): an engine that made its store and wrote it
            # full in the same process ran some reads slower (stats 0.27 ms against 0.14 once reopened)
            base_eng.close()
            base_eng = Engine.open(base_home, actor="sdk")
            base_eng.embedder.load()
            baseline.eng = baseline.fill.eng = base_eng
            r = measure(eng, fill, base / "profile", a.ops, a.queries, rng, baseline)
            r["open"], r["first recall"], r["first recall (stored)"], r["store mirror"] = opened, first, first2, saved
            r["store mirror, longest write"] = longest
            r["first recalls (stored)"] = firsts
            r["second recalls (stored)"] = seconds
            r["first recall CPU (stored)"] = percentile(cpus, 0.5)
            r["cli"] = cli_times(base / "profile", a.reopens)
            r["fill s"] = took
            results[n] = r
            print(f"  open {opened * 1000:.0f} ms, first recall {first * 1000:.0f} ms ({how}); mirror stored "
                  f"{'in' if stored else 'NOT, after'} {saved:.1f}s (longest write {longest * 1000:.0f} ms); open {opened2 * 1000:.0f} ms, first recall "
                  f"{first2 * 1000:.0f} ms (median of {len(firsts)}, worst {max(firsts) * 1000:.0f}; CPU {percentile(cpus, 0.5) * 1000:.0f} ms; "
                  f"{how2}), the second "
                  f"{percentile(seconds, 0.5) * 1000:.0f} ms (worst {max(seconds) * 1000:.0f}); CLI recall "
                  f"{r['cli']['recall'] * 1000:.0f} ms, CLI stats {r['cli']['stats'] * 1000:.0f} ms; recall@10 {r['recall@10']:.3f}, mirror "
                  f"{r['mirror bytes'] / 2**20:.0f} MB vs float32 {r['float32 bytes'] / 2**20:.0f} MB", flush=True)
    finally:
        eng.close()
        if base_eng is not None:
            base_eng.close()
        shutil.rmtree(base_home.parent, ignore_errors=True)
        if not a.dir:
            shutil.rmtree(base, ignore_errors=True)
    if results:
        report(results, a.sizes[0])
    return results


def report(results: dict[int, dict], baseline_size: int) -> None:
    sizes = sorted(results)
    first = sizes[0]
    ops = [k for k, v in results[first].items() if isinstance(v, list)]
    header = ["operation"] + [f"{n:,}: med / p95 ms (x)" for n in sizes]
    rows = []
    for op in ops:
        row = [op]
        for n in sizes:
            xs = results[n][op]
            twin = results[n]["baseline"].get(op)
            # a flat operation: to the baseline store timed in turn with it; the rest: to the first size
            base_med = percentile(twin if twin else results[first][op], 0.5)
            med, p95 = percentile(xs, 0.5), percentile(xs, 0.95)
            d = 3 if base_med < 1e-4 else 2  # microsecond operations (get, an idle poll of the feed)
            row.append(f"{med * 1000:.{d}f} / {p95 * 1000:.{d}f} ({med / base_med:.2f}x)")
        rows.append(row)
    rows.append(["recall / floor (median)"] + [
        f"{percentile(results[n]['recall'], 0.5) / percentile(results[n]['floor'], 0.5):.2f}" for n in sizes])
    rows.append(["vector search / numpy (median)"] + [
        f"{percentile(results[n]['vector search'], 0.5) / percentile(results[n]['numpy top-10'], 0.5):.2f}"
        for n in sizes])
    rows.append(["background work after the open (buckets, save), s"] + [
        f"{results[n]['settling after the open, s']:.1f}" for n in sizes])
    rows.append(["recall@10 vs exact"] + [f"{results[n]['recall@10']:.3f}" for n in sizes])
    rows.append(["mirror vectors / float32"] + [
        f"{results[n]['mirror bytes'] / results[n]['float32 bytes']:.3f}" for n in sizes])
    rows.append(["mirror with filter columns, MB"] + [f"{results[n]['mirror bytes (all)'] / 2**20:.0f}" for n in sizes])
    rows.append(["open / first recall ms (mirror from every row)"] + [
        f"{results[n]['open'] * 1000:.0f} / {results[n]['first recall'] * 1000:.0f}" for n in sizes])
    rows.append(["first recall ms (from the stored blocks): median, worst"] + [
        f"{results[n]['first recall (stored)'] * 1000:.0f}, {max(results[n]['first recalls (stored)']) * 1000:.0f} "
        f"({results[n]['first recall'] / results[n]['first recall (stored)']:.1f}x faster)" for n in sizes])
    rows.append(["... its CPU ms, every thread (median)"] + [
        f"{results[n]['first recall CPU (stored)'] * 1000:.0f}" for n in sizes])
    rows.append(["second recall ms (loads the mirrors): median, worst"] + [
        f"{percentile(results[n]['second recalls (stored)'], 0.5) * 1000:.0f}, "
        f"{max(results[n]['second recalls (stored)']) * 1000:.0f}" for n in sizes])
    rows.append(["a cold `personal-llm recall` / `stats` process, median ms"] + [
        f"{results[n]['cli']['recall'] * 1000:.0f} / {results[n]['cli']['stats'] * 1000:.0f}" for n in sizes])
    rows.append(["... peak resident MB of the `recall` / `stats` process"] + [
        f"{results[n]['cli']['recall rss'] / 2**20:.0f} / {results[n]['cli']['stats rss'] / 2**20:.0f}" for n in sizes])
    rows.append(["storing the mirror: s (longest write transaction, ms)"] + [
        f"{results[n]['store mirror']:.2f} ({results[n]['store mirror, longest write'] * 1000:.0f})" for n in sizes])
    print()
    print(fmt_table(header, rows))
    print("\nfloor = the same query embedding + numpy float32 brute-force top-10 over the same vectors, in this run,"
          " on one BLAS thread.")
    print("The fill is synthetic (made-up unit vectors, bench/_vectors.py; made-up sentences), inserted through the "
          "storage layer.")
    flat = [op for op in ops if op in results[first]["baseline"]]
    print(f"Flat operations ({', '.join(flat)}): each ratio is to a {baseline_size:,}-item store kept open beside the "
          "measured one and timed in turn with it, operation by operation (its medians, ms, at each size: "
          + "; ".join(f"{n:,}: " + ", ".join(f"{percentile(results[n]['baseline'][op], 0.5) * 1000:.3g}" for op in flat)
                      for n in sizes) + f"). The other rows: to the first size measured ({first:,}).")


# -- PostgreSQL (--backend postgres) ----------------------------------------------------------------------


def pg_measure(eng, fill, ops: int, queries: int, rng: random.Random,
               sweep: list[tuple[int, int]] | None = None) -> dict:
    """At one size, through the user's engine: the vector search against exact numpy top-10 (recall@10, as
    `measure` does), recall end to end, remember (with its vector), get, forget (just made, and of the fill)."""
    from engine.store.types import Filter

    res: dict = {}
    ids, code, mat = fill.matrix()
    probes = make_probes(fill, mat, queries)
    exact, np_t = [], []
    for q in probes:
        q = q.astype(np.float32)
        with one_blas_thread():
            t0 = time.perf_counter()
            s = mat @ q
            top = np.argpartition(-s, 10)[:10]
            np_t.append(time.perf_counter() - t0)
        exact.append({(int(code[i]), int(ids[i])) for i in top})
    res["numpy top-10"] = np_t

    def vector_search() -> tuple[list[float], float, float]:
        """(times, recall@10 of the random probes, of the probes near a stored vector)."""
        times, found = [], []
        for q, want in zip(probes, exact, strict=True):
            q = q.astype(np.float32)
            t0 = time.perf_counter()
            with eng.store.read() as con:
                hm = eng.space.index["memories"].search(con, q, 10, Filter(activity=True))
                hc = eng.space.index["chunks"].search(con, q, 10, Filter(activity=True))
            times.append(time.perf_counter() - t0)
            ours = sorted([(s_, 0, i) for i, s_ in hm] + [(s_, 1, i) for i, s_ in hc], reverse=True)[:10]
            found.append(len(want & {(c, i) for _, c, i in ours}) / 10)
        half = queries // 2
        return times, float(np.mean(found[:half])), float(np.mean(found[half:]))

    from engine.store.postgres import vectors as pgv

    with eng.store.read() as con:
        rows = {t: eng.space.index[t].rows(con) for t in ("memories", "chunks")}
    res["ef_search"] = {t: "exact" if n <= pgv.EXACT_ROWS else pgv.ef_search(n, max(pgv.MIN_CANDIDATES, pgv.CANDIDATES * 10))
                        for t, n in rows.items()}
    res["vector search"], rand, near = vector_search()
    res["recall@10"], res["recall@10 (random, near)"] = (rand + near) / 2, (rand, near)
    if sweep:  # the same probes with other search settings (engine/store/postgres/vectors.py)
        kept = pgv.CANDIDATES, pgv.ef_search, pgv.EXACT_ROWS
        res["sweep"] = []
        try:
            for cand, ef in sweep:
                if cand == "exact":  # every distance computed (the path of a user with few vectors)
                    if len(mat) > 200_000:  # 15-25 s a question at a million
                        continue
                    pgv.EXACT_ROWS = len(mat)
                else:
                    pgv.CANDIDATES, pgv.ef_search = cand, (lambda rows, n, ef=ef: ef)
                times, rand, near = vector_search()
                pgv.CANDIDATES, pgv.ef_search, pgv.EXACT_ROWS = kept
                res["sweep"].append((cand, ef, percentile(times, 0.5), (rand + near) / 2, rand, near))
                label = "exact (every distance)" if cand == "exact" else f"candidates {cand}x k, ef_search {ef}"
                print(f"    {label}: vector search p50 {percentile(times, 0.5) * 1000:.1f} ms, "
                      f"recall@10 {(rand + near) / 2:.3f} (random probes {rand:.3f}, near a stored vector {near:.3f}); "
                      f"{load_average()}", flush=True)
        finally:
            pgv.CANDIDATES, pgv.ef_search, pgv.EXACT_ROWS = kept

    qs = [sentence(rng).replace(".", "?") for _ in range(queries)]
    eng.recall(qs[0])  # warm
    rec = []
    for q in qs:
        t0 = time.perf_counter()
        eng.recall(q)
        rec.append(time.perf_counter() - t0)
    res["recall"] = rec

    def timed(name: str, fn, n: int) -> None:
        res[name] = []
        for i in range(n):
            t0 = time.perf_counter()
            fn(i)
            res[name].append(time.perf_counter() - t0)

    made: list[str] = []
    timed("remember (vector)", lambda i: made.append(eng.remember(f"{sentence(rng)} ({rng.random()})", embed="sync").id),
          ops)
    timed("get", lambda i: eng.get(made[i]), ops)
    timed("forget", lambda i: eng.forget(made[i]), ops)
    mem = np.concatenate(fill.ids["memories"])
    old = [int(x) for x in mem[np.random.default_rng(len(mem)).choice(len(mem), min(ops, len(mem)), replace=False)]]
    with eng.store.read() as con:
        uids = dict(con.execute("SELECT id, uid FROM memories WHERE id = ANY(%s)", (old,)).fetchall())
    timed("forget (an old memory)", lambda i: eng.forget(uids[old[i]]), len(old))
    fill.drop("memories", set(old))
    return res


# (candidates x k, hnsw.ef_search), or ("exact", None): every distance computed. More candidates at the same
# ef_search found nothing more at a million (10x and 40x k at 1,000 both 0.930 on the text-like vectors).
SWEEP = [(4, 100), (4, 400), (4, 1000), (10, 1000), ("exact", None)]


def run_postgres(a) -> dict[int, dict]:
    """The sizes on a PostgreSQL database (see the module doc); prints a table, returns the results."""
    from bench._pg import PgFill, make_database, sizes, start_server
    from engine import Engine
    from engine.config import Settings
    from engine.embeddings import Embedder
    from engine.store.postgres.database import Database
    from engine.users import make_token, token_hash

    server = start_server()
    home = Path(tempfile.mkdtemp(prefix="pllm-scale-pg-"))
    results: dict[int, dict] = {}
    try:
        url = make_database(server)
        print(f"postgres: a PostgreSQL 18 + pgvector server in {server.root} (durable commits)", flush=True)
        with Database(url) as db:
            user = db.add_user("bench", token_hash(make_token()))
            embedder = Embedder()
            embedder.load()
            fill = PgFill(url, user, index=a.pg_index, vectors=a.make_vectors)
            rng = random.Random(3)
            for n in a.sizes:
                took = fill.grow(n)
                print(f"size {n:,}: filled in {took:.0f}s (rows {fill.last['rows s']:.0f}s, HNSW indexes "
                      f"{fill.last['index s']:.0f}s); {load_average()}", flush=True)
                eng = Engine.for_user(db, user, "bench", home=home, settings=Settings(), embedder=embedder)
                eng.space.ensure()
                try:
                    r = pg_measure(eng, fill, a.ops, a.queries, rng, SWEEP if a.pg_sweep else None)
                finally:
                    eng.close()
                r.update({"fill s": took, "fill rows s": fill.last["rows s"], "index s": fill.last["index s"],
                          "bytes": sizes(url)})
                results[n] = r
                print(f"  recall p50 {percentile(r['recall'], 0.5) * 1000:.1f} ms, recall@10 {r['recall@10']:.3f} "
                      f"(vector search p50 {percentile(r['vector search'], 0.5) * 1000:.1f} ms; hnsw.ef_search of the "
                      f"memories / chunks {r['ef_search']['memories']} / {r['ef_search']['chunks']}), "
                      f"remember p50 {percentile(r['remember (vector)'], 0.5) * 1000:.1f} ms, forget p50 "
                      f"{percentile(r['forget'], 0.5) * 1000:.1f} ms (an old memory "
                      f"{percentile(r['forget (an old memory)'], 0.5) * 1000:.1f}), HNSW indexes "
                      f"{sum(v for k, v in r['bytes'].items() if k != 'database') / 2**20:.0f} MB, database "
                      f"{r['bytes']['database'] / 2**20:.0f} MB; {load_average()}", flush=True)
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
    if results:
        pg_report(results, a.pg_index)
    return results


def pg_report(results: dict[int, dict], index: str) -> None:
    sizes = sorted(results)
    header = ["postgres: median / p95 ms"] + [f"{n:,}" for n in sizes]
    rows = [[op] + [f"{percentile(results[n][op], 0.5) * 1000:.2f} / {percentile(results[n][op], 0.95) * 1000:.2f}"
                    for n in sizes]
            for op in ("recall", "vector search", "numpy top-10", "remember (vector)", "get", "forget",
                       "forget (an old memory)")]
    rows.append(["recall@10 vs exact"] + [f"{results[n]['recall@10']:.3f}" for n in sizes])
    rows.append(["... of random probes / near a stored vector"] + [
        "{:.3f} / {:.3f}".format(*results[n]["recall@10 (random, near)"]) for n in sizes])
    rows.append(["fill: rows / HNSW build, s"] + [
        f"{results[n]['fill rows s']:.0f} / {results[n]['index s']:.0f}" for n in sizes])
    rows.append(["HNSW indexes, MB"] + [
        f"{sum(v for k, v in results[n]['bytes'].items() if k != 'database') / 2**20:.0f}" for n in sizes])
    rows.append(["database, MB"] + [f"{results[n]['bytes']['database'] / 2**20:.0f}" for n in sizes])
    print()
    print(fmt_table(header, rows))
    print(f"\nOne user's rows, COPY in transactions of 100,000 rows, HNSW indexes built {index} the fill; the fill "
          "grows from size to size (its time is that step's). numpy top-10: exact float32 search over the same "
          "vectors held by this script, one BLAS thread.")


def side_by_side(done: dict[str, dict[int, dict]]) -> None:
    """recall, recall@10, remember and forget of each backend at each size, in one table."""
    sizes = sorted(set().union(*(set(r) for r in done.values())))
    header = ["median ms"] + [f"{b} {n:,}" for n in sizes for b in done]

    def cell(b: str, n: int, key: str, fmt) -> str:
        r = done[b].get(n)
        return "-" if r is None or key not in r else fmt(r[key])

    ms = lambda xs: f"{percentile(xs, 0.5) * 1000:.2f}"  # noqa: E731
    rows = [[label] + [cell(b, n, key, ms) for n in sizes for b in done]
            for label, key in (("recall", "recall"), ("vector search (memories + chunks, k=10)", "vector search"),
                               ("remember (with its vector)", "remember (vector)"), ("get", "get"),
                               ("forget (just made)", "forget"), ("forget (an old memory)", "forget (an old memory)"))]
    rows.append(["recall@10 vs exact"] + [cell(b, n, "recall@10", lambda x: f"{x:.3f}") for n in sizes for b in done])
    rows.append(["fill, s"] + [cell(b, n, "fill s", lambda x: f"{x:.0f}") for n in sizes for b in done])
    print()
    print(fmt_table(header, rows))


if __name__ == "__main__":
    sys.exit(main())
