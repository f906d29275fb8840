"""A quick, in-process evidence-recall run over LoCoMo and REALTALK files, for trying ranking changes.

    .venv/bin/python bench/recall_lab.py PATH [PATH ...] --cache-dir DIR [--every N] [--out r.json]

Each PATH is what bench/eval_locomo.py reads (a LoCoMo file, or a REALTALK chat file or folder). The turns
are stored as the HTTP API stores them (`Engine.remember`: episodic, the turn's time, default source and
importance), embedded in batches, and the store is kept under DIR (keyed by the data and the schema
version, so a change to what is stored builds it again). Every question (or every Nth with --every) is
asked through `Engine.recall(k=10, project=…)`, the API's default options; prints R@5/R@10 per category
beside FTS5 BM25 on the same turns. The figures equal eval_locomo.py --http's first pass up to the
vectors' batch rounding; confirm a change with that before keeping it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
import eval_locomo as L  # noqa: E402


def load(path: Path) -> tuple[list[dict], dict[int, str], str]:
    if path.is_dir() or isinstance(json.loads(path.read_text(encoding="utf-8")), dict):
        data, cats, name = L.realtalk_samples(path), L.REALTALK_CATEGORIES, "REALTALK"
    else:
        data, cats, name = json.loads(path.read_text(encoding="utf-8")), L.CATEGORIES, "LoCoMo"
    return data, cats, name


def build(eng, data: list[dict]) -> dict[str, set[str]]:
    from engine.memories import Remembered

    uid_dias: dict[str, set[str]] = {}
    for sample in data:
        turns = L.turns_of(sample)
        for p in range(0, len(turns), 64):
            part = turns[p : p + 64]
            for (dia, _t, _a), r in zip(part, eng.remember_many(
                    [Remembered(text, kind="episodic", project=sample["sample_id"], at=at) for dia, text, at in part],
                    embed="sync"), strict=True):
                uid_dias.setdefault(r.id, set()).add(dia)
    return uid_dias


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--every", type=int, default=1, help="ask every Nth question only (a quick subset)")
    ap.add_argument("--out", help="write per-question results as JSON here")
    args = ap.parse_args(argv)
    from engine import Engine
    from engine.store.sqlite.migrations import MIGRATIONS

    report = {}
    for raw in args.paths:
        path = Path(raw)
        data, cats, name = load(path)
        size = sum(f.stat().st_size for f in path.glob("*.json")) if path.is_dir() else path.stat().st_size
        stem = re.sub(r"\W+", "_", path.stem)
        key = f"lab-{stem}-{size}-m{len(MIGRATIONS)}"
        home, ready, _ = C.prepare_home(args.cache_dir, key)
        eng = Engine.open(home)
        t0 = time.perf_counter()
        if ready:
            uid_dias = {k: set(v) for k, v in json.loads((home.parent / "merges.json").read_text()).items()}
        else:
            uid_dias = build(eng, data)
            (home.parent / "merges.json").write_text(json.dumps({k: sorted(v) for k, v in uid_dias.items()}))
            C.mark_ready(home)
            print(f"{name}: stored and embedded {len(uid_dias)} memories in {time.perf_counter() - t0:.0f}s", flush=True)
        texts = {}
        for s in data:
            for m in eng.list_memories(project=s["sample_id"], limit=1_000_000):
                texts[m.id] = (m.project, m.text)
        bm25 = C.BM25Baseline((p, uid, t) for uid, (p, t) in texts.items())
        questions = [(s["sample_id"], q) for s in data for q in s["qa"]][:: args.every]
        results, lat = [], []
        for sid, q in questions:
            gold = L.evidence_ids(q.get("evidence"))
            t1 = time.perf_counter()
            hits = eng.recall(q["question"], k=10, project=sid)
            lat.append(time.perf_counter() - t1)
            rec = {"sample": sid, "category": q["category"], "question": q["question"], "gold": gold,
                   "ours": [h.id for h in hits]}
            for nm, ids in (("ours", rec["ours"]), ("bm25", bm25.search(q["question"], 10, sid))):
                for k in L.KS:
                    rec[f"{nm}@{k}"] = L.evidence_recall(ids, uid_dias, gold, k)
            results.append(rec)
        header, _groups, rows = L.recall_table(results, ("ours", "bm25"), cats)
        print(f"\n{name} {path.name}: {len(results)} questions")
        print(C.fmt_table(header, rows))
        print(C.latency_line("recall", lat), flush=True)
        report[name] = {"rows": rows, "questions": results, "uid_dias": {k: sorted(v) for k, v in uid_dias.items()},
                        "texts": texts}
        eng.close()
    if args.out:
        Path(args.out).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
