"""Ingest throughput against raw sentence-transformers encode, measured in the same run on the same chunk texts.

    python bench/ingest_throughput.py [--files 200] [--mb 2] [--batch-sizes 32 64 128] [--sweep-chunks 512]
    python bench/ingest_throughput.py --latency 60 [--busy 2]

The engine embeds with its default runtime (ONNX Runtime, engine/onnx_minilm.py, unless it fell back to
numpy); the baselines are the numpy runtime (engine/minilm.py, what the engine ran on before) and
sentence-transformers (torch, the same weights, the same number of threads: engine.minilm.batch_threads),
which is what ingest ran on before that, so "ingest / sentence-transformers" >= 0.9 means ingest is at
least as fast as it was then (it was 0.9x of raw sentence-transformers). Needs the dev extra
(sentence-transformers) for that baseline.

It writes a corpus of realistic prose (Markdown with headings and plain text, paragraphs of sentences
drawn from a Zipf-distributed vocabulary) into a temp folder, ingests the folder into a fresh encrypted
store (a temp profile) through `Engine.ingest` and times it end to end: walking, hashing, parsing,
chunking, writing rows and FTS, embedding, storing vectors, committing. Then it encodes exactly the
chunk texts the engine stored with the bare runtime (`Embedder.encode`, the same batch size, one call per
batch over the whole list) and with sentence-transformers, and prints the rates and their ratios. The raw
rates are measured before and after the ingest and averaged, because the machine may be shared.

`--batch-sizes` also measures the raw model on `--sweep-chunks` of those texts at each batch size, which
is how the engine's batch size (engine.ingest.EMBED_BATCH_SIZE) was chosen.

`--latency N` instead measures one sentence embedded N times (median, p90, worst) and the RSS after
loading, for each runtime in a fresh process of its own, the runtimes taking turns; `--busy K` runs K
CPU-bound loops meanwhile (a busy machine).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cleanup, prepare_home  # noqa: E402

WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an "
    "they you were her she there been one all we their has would when if more no out so said what up its "
    "about into than them can only other new some could time these two may then do first any my now such "
    "like our over man me even most made after also did many before must through back years where much "
    "your way well down should because each just those people how too little state good very make world "
    "still own see men work long get here between both life being under never day same another know while "
    "last might us great old year off come since against go came right used take three garden river budget "
    "meeting project report invoice harbour lighthouse kitchen village station winter summer letter "
    "council market bridge engine library school doctor hospital museum forest mountain island orchard "
    "weather harvest festival railway journey ledger contract supplier warehouse schedule committee"
).split()
HEADINGS = ("Overview", "Background", "Budget", "Schedule", "Risks", "Notes", "Results", "Next steps",
            "Suppliers", "Appendix", "History", "Travel", "Maintenance", "Inventory", "Contacts")


def sentence(rng: random.Random) -> str:
    n = rng.randint(8, 24)
    words = [WORDS[min(int(rng.paretovariate(1.1)) - 1, len(WORDS) - 1)] if rng.random() < 0.6
             else rng.choice(WORDS) for _ in range(n)]
    if rng.random() < 0.3:
        words.insert(rng.randrange(n), str(rng.randint(2, 9999)))
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice(".....?!")


def paragraph(rng: random.Random) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(3, 8)))


def write_corpus(root: Path, files: int, total_bytes: int, seed: int = 7) -> int:
    """`files` documents, half Markdown with headings and half plain text, about `total_bytes` in all."""
    rng = random.Random(seed)
    per_file = total_bytes // files
    written = 0
    for i in range(files):
        folder = root / f"area-{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        markdown = i % 2 == 0
        parts = [f"# Document {i}: {rng.choice(HEADINGS)}\n"] if markdown else [f"Notes {i}\n"]
        size = 0
        while size < per_file:
            if markdown and rng.random() < 0.25:
                parts.append(f"\n{'#' * rng.randint(2, 3)} {rng.choice(HEADINGS)}\n")
            para = paragraph(rng)
            parts.append("\n" + para + "\n")
            size += len(para) + 2
        path = folder / f"doc-{i:04d}.{'md' if markdown else 'txt'}"
        path.write_text("".join(parts), encoding="utf-8")
        written += path.stat().st_size
    return written


def raw_rate(embedder, texts: list[str], batch_size: int) -> float:
    """Chunks per second of the bare model over `texts`, one encode call per batch."""
    t0 = time.perf_counter()
    for i in range(0, len(texts), batch_size):
        embedder.encode(texts[i:i + batch_size], batch_size=batch_size)
    return len(texts) / (time.perf_counter() - t0)


class SentenceTransformersBaseline:
    """Raw sentence-transformers encode of the same model, on the engine's batch thread count."""

    def __init__(self, model_dir: Path):
        import torch

        from engine.embeddings import _sentence_transformer
        from engine.minilm import batch_threads

        self.model = _sentence_transformer(model_dir)
        torch.set_num_threads(batch_threads())

    def encode(self, texts: list[str], batch_size: int):
        return self.model.encode(texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
                                 show_progress_bar=False)


def numpy_embedder():
    """The default model on the numpy runtime (the engine's runtime before ONNX Runtime)."""
    from engine.embeddings import Embedder
    from engine.minilm import MiniLM

    return Embedder(runtime=lambda path, **_: MiniLM(path))


SENTENCE = "Which city is my sibling based in?"


def probe(runtime: str, n: int) -> dict:
    """In this (fresh) process: load the runtime, RSS after loading, then one sentence's latency n times."""
    import psutil

    from engine.embeddings import Embedder

    t0 = time.perf_counter()
    e = Embedder() if runtime == "onnxruntime" else numpy_embedder()
    e.load()
    load = time.perf_counter() - t0
    e.encode_one(SENTENCE)
    rss = psutil.Process().memory_info().rss / 2**20
    times = []
    for _ in range(n):
        t = time.perf_counter()
        e.encode_one(SENTENCE)
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return {"runtime": e.runtime, "load_s": load, "rss_mb": rss, "median_ms": statistics.median(times),
            "p90_ms": times[int(0.9 * (len(times) - 1))], "worst_ms": times[-1]}


def latency(n: int, busy: int, rounds: int = 3) -> int:
    """Each runtime in `rounds` fresh processes sharing one profile: the first ONNX load checks the graph
    against the numpy runtime and keeps the verdict, the later ones only re-check two probes."""
    home, _, tmp = prepare_home(None, "latency")
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        time.sleep(0.5 if busy else 0)
        rows: dict[str, list[dict]] = {"onnxruntime": [], "numpy": []}
        for _ in range(rounds):
            for runtime in rows:
                out = subprocess.run([sys.executable, __file__, "--probe", runtime, str(n)], capture_output=True,
                                     text=True, timeout=600, env=dict(os.environ))
                if out.returncode != 0:
                    print(out.stderr[-2000:])
                    return 1
                rows[runtime].append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        for p in loops:
            p.kill()
            p.wait()
        cleanup(tmp)
    print(f"one sentence x {n}, {busy} CPU-bound loops running, {rounds} fresh processes per runtime "
          "(the first ONNX load checks the graph against numpy):")
    for runtime, rs in rows.items():
        for r in rs:
            print(f"  {runtime:12} (ran on {r['runtime']}): median {r['median_ms']:6.1f} ms, p90 {r['p90_ms']:6.1f} ms, "
                  f"worst {r['worst_ms']:6.1f} ms; load {r['load_s']:.2f} s, RSS after loading {r['rss_mb']:.0f} MB")
    med = {k: statistics.median(r["median_ms"] for r in rs) for k, rs in rows.items()}
    p90 = {k: statistics.median(r["p90_ms"] for r in rs) for k, rs in rows.items()}
    print(f"ratio median onnxruntime / numpy: {med['onnxruntime'] / med['numpy']:.2f}, "
          f"p90: {p90['onnxruntime'] / p90['numpy']:.2f}")
    print(f"load average now: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--probe"]:  # a process of --latency (its profile set by the parent)
        print(json.dumps(probe(sys.argv[2], int(sys.argv[3]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--mb", type=float, default=2.0, help="total size of the corpus in MB")
    ap.add_argument("--batch-sizes", type=int, nargs="*", default=[32, 64, 128],
                    help="raw model sweep over these batch sizes (none: skip the sweep)")
    ap.add_argument("--sweep-chunks", type=int, default=512, help="chunk texts used by the sweep")
    ap.add_argument("--latency", type=int, metavar="N",
                    help="instead: one sentence's latency N times and the RSS after loading, per runtime")
    ap.add_argument("--busy", type=int, default=0, help="with --latency: CPU-bound loops running meanwhile")
    args = ap.parse_args()
    if args.latency:
        return latency(args.latency, args.busy)

    home, _, tmp = prepare_home(None, "ingest")
    corpus = Path(tempfile.mkdtemp(prefix="pllm-corpus-"))
    try:
        from engine import Engine
        from engine.ingest import EMBED_BATCH_SIZE

        size = write_corpus(corpus, args.files, int(args.mb * 1024 * 1024))
        print(f"corpus: {args.files} files, {size / 1024 / 1024:.2f} MB (Markdown + text)")
        with Engine.open(home, actor="sdk") as eng:
            eng.embedder.load()
            eng.embedder.encode(["warm up the model"] * 8)
            st = SentenceTransformersBaseline(eng.embedder._model_dir())
            np_rt = numpy_embedder()
            np_rt.load()
            sample_texts = [" ".join(paragraph(random.Random(i)) for _ in range(2)) for i in range(64)]
            raw_before = raw_rate(eng.embedder, sample_texts, EMBED_BATCH_SIZE)  # also warms up
            np_before = raw_rate(np_rt, sample_texts, EMBED_BATCH_SIZE)
            st_before = raw_rate(st, sample_texts, EMBED_BATCH_SIZE)
            t0 = time.perf_counter()
            results = eng.ingest([corpus])
            elapsed = time.perf_counter() - t0
            failed = [r for r in results if r.status == "failed"]
            if failed:
                print(f"{len(failed)} files failed, e.g. {failed[0].error}")
                return 1
            texts = [r[0] for r in eng.con.execute("SELECT text FROM chunks ORDER BY id").fetchall()]
            tokens = eng.con.execute("SELECT avg(token_count), max(token_count) FROM chunks").fetchone()
            raw_a = raw_rate(eng.embedder, texts, EMBED_BATCH_SIZE)
            np_a = raw_rate(np_rt, texts, EMBED_BATCH_SIZE)
            st_a = raw_rate(st, texts, EMBED_BATCH_SIZE)
            if args.batch_sizes:
                sweep = texts[: args.sweep_chunks]
                print(f"raw runtime over {len(sweep)} chunk texts, by batch size:")
                for bs in args.batch_sizes:
                    print(f"  batch {bs:>4}: {raw_rate(eng.embedder, sweep, bs):7.1f} chunks/s")
            st_b = raw_rate(st, texts, EMBED_BATCH_SIZE)
            np_b = raw_rate(np_rt, texts, EMBED_BATCH_SIZE)
            raw_b = raw_rate(eng.embedder, texts, EMBED_BATCH_SIZE)
            runtime = eng.embedder.runtime
        raw = (raw_a + raw_b) / 2
        np_rate = (np_a + np_b) / 2
        st_rate = (st_a + st_b) / 2
        rate = len(texts) / elapsed
        from engine.minilm import batch_threads

        print(f"chunks: {len(texts)} (tokens per chunk: mean {tokens[0]:.0f}, max {tokens[1]}); "
              f"batch size {EMBED_BATCH_SIZE}; {batch_threads()} threads; sample rates before ingest: "
              f"runtime {raw_before:.1f}/s, numpy {np_before:.1f}/s, sentence-transformers {st_before:.1f}/s")
        print(f"ingest (end to end):           {rate:7.1f} chunks/s  ({elapsed:.1f} s, {size / elapsed / 1024:.0f} KB/s)")
        print(f"{f'raw runtime ({runtime}):':31}{raw:7.1f} chunks/s  (runs: {raw_a:.1f}, {raw_b:.1f})")
        print(f"raw numpy runtime (before):    {np_rate:7.1f} chunks/s  (runs: {np_a:.1f}, {np_b:.1f})")
        print(f"raw sentence-transformers:     {st_rate:7.1f} chunks/s  (runs: {st_a:.1f}, {st_b:.1f})")
        print(f"ratio ingest / raw runtime:    {rate / raw:.2f}  (target >= 0.90)")
        print(f"ratio runtime / numpy:         {raw / np_rate:.2f}")
        print(f"ratio runtime / s-t:           {raw / st_rate:.2f}")
        print(f"ratio ingest / s-t:            {rate / st_rate:.2f}  (target >= 0.90: ingest ran at 0.9x of "
              "raw sentence-transformers before)")
        print(f"load average now: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        return 0
    finally:
        import shutil

        shutil.rmtree(corpus, ignore_errors=True)
        cleanup(tmp)


if __name__ == "__main__":
    sys.exit(main())
