"""Recall by words alone (no embedding model) on both backends, in process: the lexical side of recall, which
is where SQLite (FTS5) and PostgreSQL (full-text search, BM25 from the tsvector) differ.

    .venv/bin/python bench/words_parity.py --scifact DIR --locomo FILE [--backend sqlite|postgres] [--pg-data DIR]

Stores SciFact's abstracts (title + text, project "scifact") and LoCoMo's turns as eval_beir.py and
eval_locomo.py do, in a fresh profile (SQLite) or a fresh database of a PostgreSQL it starts (`_served.py`),
through the engine with no embedding model, and asks every question once (`recall(k=10, project=…)`):
prints SciFact test nDCG@10 and LoCoMo evidence recall per category. Both backends get the same rules for the
words searched (engine/store/lexical.py); what differs is how each finds and scores the matching rows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
import eval_beir as B  # noqa: E402
import eval_locomo as L  # noqa: E402


def run(eng, scifact: Path | None, locomo: Path | None, label: str) -> None:
    from engine.memories import Remembered

    if scifact is not None:
        corpus = B.read_jsonl(scifact / "corpus.jsonl")
        queries = {q["_id"]: q["text"] for q in B.read_jsonl(scifact / "queries.jsonl")}
        qrels = B.read_qrels(scifact / "qrels" / "test.tsv")
        uid_doc: dict[str, list[str]] = {}
        t0 = time.perf_counter()
        for p in range(0, len(corpus), 200):
            part = corpus[p : p + 200]
            items = [Remembered((d.get("title", "").strip() + "\n" + d.get("text", "").strip()).strip(),
                                project="scifact") for d in part]
            for d, r in zip(part, eng.remember_many(items), strict=True):
                uid_doc.setdefault(r.id, []).append(str(d["_id"]))
        stored = time.perf_counter() - t0
        scores, lat = [], []
        for qid in [q for q in qrels if q in queries]:
            t1 = time.perf_counter()
            hits = eng.recall(queries[qid], k=10, project="scifact")
            lat.append(time.perf_counter() - t1)
            scores.append(C.ndcg_at_k(B.documents_of([h.id for h in hits], uid_doc), qrels[qid], 10))
        print(f"{label}: SciFact test nDCG@10, words only: {sum(scores) / len(scores):.4f} ({len(scores)} queries; "
              f"stored in {stored:.0f}s; {C.latency_line('recall', lat)})", flush=True)
    if locomo is not None:
        data = json.loads(locomo.read_text(encoding="utf-8"))
        uid_dias: dict[str, set[str]] = {}
        for s in data:
            turns = L.turns_of(s)
            for p in range(0, len(turns), 200):
                part = turns[p : p + 200]
                made = eng.remember_many([Remembered(text, kind="episodic", project=s["sample_id"], at=at)
                                          for _dia, text, at in part])
                for (dia, _t, _a), r in zip(part, made, strict=True):
                    uid_dias.setdefault(r.id, set()).add(dia)
        results = []
        for s in data:
            for q in s["qa"]:
                gold = L.evidence_ids(q.get("evidence"))
                ranked = [h.id for h in eng.recall(q["question"], k=10, project=s["sample_id"])]
                results.append({"category": q["category"], "gold": gold,
                                **{f"ours@{k}": L.evidence_recall(ranked, uid_dias, gold, k) for k in L.KS}})
        header, _groups, rows = L.recall_table(results, ("ours",), L.CATEGORIES)
        print(f"{label}: LoCoMo evidence recall, words only")
        print(C.fmt_table(header, rows), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scifact", help="the BEIR SciFact folder")
    ap.add_argument("--locomo", help="a LoCoMo-format JSON file")
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--pg-data", help="--backend postgres: the PostgreSQL cluster's folder (default: a temporary one)")
    args = ap.parse_args(argv)
    if not (args.scifact or args.locomo):
        ap.error("give --scifact, --locomo or both")
    scifact = Path(args.scifact) if args.scifact else None
    locomo = Path(args.locomo) if args.locomo else None
    from engine import Engine, users
    from engine.config import Settings
    from engine.embeddings import NoEmbedder

    home = Path(tempfile.mkdtemp(prefix="pllm-words-"))
    try:
        if args.backend == "sqlite":
            os.environ["PERSONAL_LLM_HOME"] = str(home / "profile")
            os.environ["PYTHON_KEYRING_BACKEND"] = "keyrings.alt.file.PlaintextKeyring"
            os.environ["XDG_DATA_HOME"] = str(home / "xdg-data")
            with Engine.open(home / "profile", embedder=NoEmbedder()) as eng:
                run(eng, scifact, locomo, "SQLite")
            return 0
        from _served import PostgresData

        from engine.store.postgres.database import Database

        with PostgresData(args.pg_data) as pg:
            url = pg.fresh_database("pllm_words")
            users.add(url, "bench")
            with Database(url) as db:
                user = next(u.id for u in db.users() if u.name == "bench")
                eng = Engine.for_user(db, user, "bench", home=home / "server", settings=Settings(),
                                      embedder=NoEmbedder())
                try:
                    run(eng, scifact, locomo, "PostgreSQL")
                finally:
                    eng.close()
        return 0
    finally:
        C.cleanup(str(home))


if __name__ == "__main__":
    raise SystemExit(main())
