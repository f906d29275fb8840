"""Recall on a large store with and without the lexical posting budget (docs/retrieval.md, "a posting budget").

    python bench/lexical_budget.py DIR [--questions 15] [--rounds 2]

DIR is a store kept by `bench/scale.py --dir DIR --keep` (grown to 1M items, say; the budget cannot fire below
~100k rows). Questions: `--questions` like the scale bench's (made-up sentences of its Zipf vocabulary) and as
many naming two of its words that are in 2,000-20,000 memories (costly for FTS5 to rank, kept by pruning).
Each question is asked with the budget (`engine.store.types.LEXICAL_BUDGET`) and with every kept term searched by FTS5,
one right after the other, `--rounds` times: medians, p90 and worst of each, and how many top-10s are the same.
The fill's vectors are random, so a different top 10 says nothing about relevance (the evaluations do).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import fmt_table  # noqa: E402
from bench.recall_latency import COMMON, VOCAB, percentile, sentence  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="a store kept by bench/scale.py --dir DIR --keep")
    ap.add_argument("--questions", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    base = Path(a.dir).resolve()
    if not (base / "profile" / "memory.db").exists():
        ap.error(f"no store kept by bench/scale.py in {base}")
    os.environ["PERSONAL_LLM_HOME"] = str(base / "profile")
    os.environ["PYTHON_KEYRING_BACKEND"] = "keyrings.alt.file.PlaintextKeyring"
    os.environ["XDG_DATA_HOME"] = str(base / "xdg-data")
    from engine import Engine
    from engine.store import lexical
    from engine.store import types as store_types
    from engine.store.sqlite import retrieval

    eng = Engine.open(base / "profile", actor="sdk")
    try:
        eng.embedder.load()
        eng.space.ensure()
        budget = store_types.LEXICAL_BUDGET
        rows = retrieval.indexed_rows(eng.con, "memories_fts")
        dfs = {w: retrieval._doc_freq(eng.con, "memories_fts", w) for w in dict.fromkeys([*VOCAB[:400], *COMMON])}
        mid = [w for w, d in dfs.items() if lexical.PRUNE_MIN_DF < d <= 20_000]
        print(f"{rows:,} memories indexed; {len(mid)} words in {lexical.PRUNE_MIN_DF:,}-20,000 of them", flush=True)
        if len(mid) < 2:
            print("too few common words: grow the store (bench/scale.py --sizes 1000000 --dir DIR --keep)")
            return 1
        rng = random.Random(5)
        qs = [sentence(rng).replace(".", "?") for _ in range(a.questions)]
        qs += [f"what about the {rng.choice(mid)} and {rng.choice(mid)}?" for _ in range(a.questions)]
        eng.recall(qs[0])  # warm
        times: dict[str, list[float]] = {"every kept term searched": [], f"budget {budget:,} rows": []}
        same = 0
        for _ in range(a.rounds):
            for q in qs:
                tops = []
                for name, b in zip(times, (None, budget), strict=True):
                    store_types.LEXICAL_BUDGET = b if b is not None else 10**15
                    t0 = time.perf_counter()
                    hits = eng.recall(q)
                    times[name].append(time.perf_counter() - t0)
                    tops.append([h.id for h in hits])
                same += tops[0] == tops[1]
        store_types.LEXICAL_BUDGET = budget
    finally:
        eng.close()
    print(fmt_table(["recall, ms", "median", "p90", "worst"],
                    [[name, f"{1000 * statistics.median(xs):.1f}", f"{1000 * percentile(xs, 0.9):.1f}",
                      f"{1000 * max(xs):.1f}"] for name, xs in times.items()]))
    base_t, new_t = (statistics.median(xs) for xs in times.values())
    print(f"median with the budget / without: {new_t / base_t:.2f}; the same top 10: {same} of {len(qs) * a.rounds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
