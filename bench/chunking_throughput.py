"""Chunking throughput on a large document, next to the tokenizer floor measured in the same run.

    python bench/chunking_throughput.py [--mb 2] [--repeats 5] [--busy 0]

Builds MB megabytes of synthetic prose with headings (no data needed), warms the token counter as it is
after the first documents of a session, then times `chunk_document` on it and the floor: one pass of the
same tokenizer over every paragraph (chunking has to count the tokens of each piece at least once). It
prints the median MB/s of both and their ratio. `--busy N` keeps N CPU-bound processes running meanwhile,
to see the figure on a busy machine.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WORDS = (
    "the report budget meeting garden kitchen lisbon berlin project deadline invoice vacation hiking "
    "piano recipe coffee doctor hotel flight train birthday anniversary review summary plan notes"
).split()


def prose(paragraphs: int, rng: random.Random) -> str:
    out = []
    for _ in range(paragraphs):
        sentences = [" ".join(rng.choices(WORDS, k=rng.randint(6, 18))).capitalize() + "." for _ in range(rng.randint(2, 6))]
        out.append(" ".join(sentences))
    return "\n\n".join(out)


def spin() -> None:
    while True:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=2.0, help="document size in megabytes (default 2)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--busy", type=int, default=0, help="CPU-bound processes to run meanwhile")
    args = ap.parse_args()

    from engine.chunking import chunk_document, make_token_counter
    from engine.parsers import parse_text

    rng = random.Random(7)
    size = int(args.mb * 1_000_000)
    parts = []
    total = 0
    i = 0
    while total < size:
        part = f"## Part {i}\n\n" + prose(20, rng)
        parts.append(part)
        total += len(part) + 2
        i += 1
    text = "\n\n".join(parts)[:size]
    doc = parse_text(text, "big")
    count = make_token_counter()
    chunk_document(doc, count_tokens=count)  # warm
    paragraphs = [p for p in text.split("\n\n") if p]

    busy = [mp.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for p in busy:
        p.start()
    try:
        floor_s, chunk_s, n_chunks = [], [], 0
        for _ in range(args.repeats):
            t = time.perf_counter()
            for p in paragraphs:
                count(p)
            floor_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            n_chunks = len(chunk_document(doc, count_tokens=count))
            chunk_s.append(time.perf_counter() - t)
    finally:
        for p in busy:
            p.terminate()
    mb = len(text) / 1e6
    floor = mb / statistics.median(floor_s)
    chunking = mb / statistics.median(chunk_s)
    print(f"document: {mb:.1f} MB, {len(paragraphs)} paragraphs, {n_chunks} chunks, busy processes: {args.busy}")
    print(f"tokenizer floor: {floor:.1f} MB/s   chunking: {chunking:.1f} MB/s   ratio (floor / chunking): {floor / chunking:.2f}")


if __name__ == "__main__":
    main()
