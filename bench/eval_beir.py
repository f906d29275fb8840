"""nDCG@10 on a BEIR data set (SciFact) through the engine's public interface.

    .venv/bin/python bench/eval_beir.py DIR [--split test] [--out results.json] [--cache-dir DIR]
        [--http [--backend postgres [--pg-data DIR] [--fill-from CACHE_DIR]] | --server URL --token T]

DIR holds corpus.jsonl, queries.jsonl and qrels/SPLIT.tsv. Every document (title + abstract) becomes one
memory of kind fact in project "scifact"; every query of the split is asked through `Engine.recall`
(record_access=False). Prints nDCG@10 (and recall@10) beside BM25 alone and dense cosine alone, computed
in the same run on the same texts and vectors.

With --http it is a client of `personal-llm serve` (over a profile's SQLite file; `--backend postgres [--pg-data
DIR]`: `serve --database` over a PostgreSQL it starts; `--server URL --token T`: a running server): every document is stored with `POST /memory/remember`
({text, project}), every query asked with `GET /memory/recall?q=…&k=10&project=scifact` (default
options), all queries twice; it prints both passes beside BM25 on the same texts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

PROJECT = "scifact"
K = 10


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or (i == 0 and not parts[2].strip().lstrip("-").isdigit()):
                continue  # header
            qid, did, score = parts[0], parts[1], int(parts[2])
            if score > 0:
                out.setdefault(qid, {})[did] = score
    return out


def documents_of(uids: list[str], uid_doc: dict[str, list[str]]) -> list[str]:
    """The documents behind ranked memories, in order, each once."""
    out: list[str] = []
    for u in uids:
        for d in uid_doc.get(u, []):
            if d not in out:
                out.append(d)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="a BEIR data set folder (corpus.jsonl, queries.jsonl, qrels/)")
    ap.add_argument("--split", default="test")
    C.add_eval_args(ap)
    C.add_http_args(ap)
    args = ap.parse_args(argv)
    C.check_http_args(ap, args)

    root = Path(args.dir)
    try:
        corpus = read_jsonl(root / "corpus.jsonl")
        queries = {q["_id"]: q["text"] for q in read_jsonl(root / "queries.jsonl")}
        qrels = read_qrels(root / "qrels" / f"{args.split}.tsv")
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        ap.error(f"{root} is not a readable BEIR data set ({type(e).__name__}: {e})")
    if any(not isinstance(doc, dict) or "_id" not in doc for doc in corpus):
        ap.error(f"{root}/corpus.jsonl: a line that is not a document with an _id")
    qids = [q for q in qrels if q in queries]
    if not corpus or not qids:
        ap.error(f"{root}: no documents, or no queries with judgements in qrels/{args.split}.tsv")
    key = f"beir-{root.resolve().name}-{len(corpus)}"
    if args.http:
        return run_http(args, root, corpus, queries, qrels, qids, key + "-http")
    home, ready, tmp = C.prepare_home(args.cache_dir, key)
    from engine import Engine

    try:
        eng = Engine.open(home)
        t0 = time.perf_counter()
        if not ready:
            uid_doc: dict[str, list[str]] = {}
            for doc in corpus:
                text = (doc.get("title", "").strip() + "\n" + doc.get("text", "").strip()).strip()
                r = eng.remember(text, kind="fact", project=PROJECT, source="import",
                                 meta={"doc_id": str(doc["_id"])}, embed="background")
                uid_doc.setdefault(r.id, []).append(str(doc["_id"]))
            stored = time.perf_counter() - t0
            eng.embed_pending(batch_size=32)
            print(f"stored {len(corpus)} documents as {len(uid_doc)} memories in {stored:.1f}s, "
                  f"embedded in {time.perf_counter() - t0 - stored:.1f}s", flush=True)
            if args.cache_dir:
                (home.parent / "docs.json").write_text(json.dumps(uid_doc))
                C.mark_ready(home)
        else:
            uid_doc = json.loads((home.parent / "docs.json").read_text())
            print(f"reusing the cached store at {home} ({len(uid_doc)} memories)", flush=True)

        mems = {m.id: m for m in eng.list_memories(project=PROJECT, limit=10_000_000)}
        bm25 = C.BM25Baseline((PROJECT, uid, m.text) for uid, m in mems.items())
        row_uid = dict(eng.con.execute("SELECT id, uid FROM memories").fetchall())
        ids, mat = C.stored_vectors(eng, PROJECT)
        qvecs = eng.embedder.encode([queries[q] for q in qids], batch_size=64)
        dense_runs = C.dense_search(qvecs, mat, ids, K)

        def docs_of(uids: list[str]) -> list[str]:
            return documents_of(uids, uid_doc)

        results = []
        lat = []
        for qid, dense in zip(qids, dense_runs, strict=True):
            t1 = time.perf_counter()
            hits = eng.recall(queries[qid], k=K, project=PROJECT, record_access=False)
            lat.append(time.perf_counter() - t1)
            runs = {
                "ours": docs_of([h.id for h in hits]),
                "bm25": docs_of(bm25.search(queries[qid], K, PROJECT)),
                "dense": docs_of([row_uid[i] for i in dense]),
            }
            rec = {"qid": qid}
            for name, ranked in runs.items():
                rec[f"{name} nDCG@10"] = C.ndcg_at_k(ranked, qrels[qid], K)
                rec[f"{name} R@10"] = len(set(ranked[:K]) & set(qrels[qid])) / len(qrels[qid])
            results.append(rec)

        cols = [f"{n} {m}" for m in ("nDCG@10", "R@10") for n in ("ours", "bm25", "dense")]
        row = [f"{args.split} queries", len(results)] + [sum(r[c] for r in results) / len(results) for c in cols]
        print()
        print(f"BEIR {root.name}: {len(mems)} documents, {len(results)} {args.split} queries")
        print(C.fmt_table(["", "n", *cols], [row]))
        print(C.latency_line("recall latency", lat))
        if args.out:
            Path(args.out).write_text(json.dumps({"summary": dict(zip(cols, row[2:], strict=True)),
                                                  "queries": results}, indent=1))
        eng.close()
    finally:
        C.cleanup(tmp)
    return 0


def run_http(args, root: Path, corpus: list[dict], queries: dict, qrels: dict, qids: list[str], key: str) -> int:
    """The evaluation as a client of the HTTP API sees it (see the module's docstring)."""
    with C.http_target(args, key) as (api, ready, saved):
        t0 = time.perf_counter()
        uid_doc: dict[str, list[str]] = {}
        texts: dict[str, str] = {}
        if ready and saved is not None:
            uid_doc = json.loads((saved / "docs.json").read_text())
            texts = json.loads((saved / "texts.json").read_text())
            print(f"reusing the stored data ({len(uid_doc)} memories)", flush=True)
        else:
            for i, doc in enumerate(corpus, start=1):
                text = (doc.get("title", "").strip() + "\n" + doc.get("text", "").strip()).strip()
                r = api.remember(text, project=PROJECT)
                uid_doc.setdefault(r["id"], []).append(str(doc["_id"]))
                texts[r["id"]] = r["memory"]["text"]
                if i % 500 == 0:
                    print(f"  {i} documents stored ({i / (time.perf_counter() - t0):.1f}/s)", flush=True)
            print(f"stored {len(corpus)} documents as {len(uid_doc)} memories through the API in "
                  f"{time.perf_counter() - t0:.1f}s", flush=True)
            if saved is not None:
                (saved / "docs.json").write_text(json.dumps(uid_doc))
                (saved / "texts.json").write_text(json.dumps(texts))
        api.settle()
        bm25 = C.BM25Baseline((PROJECT, uid, t) for uid, t in texts.items())

        def docs_of(uids: list[str]) -> list[str]:
            return documents_of(uids, uid_doc)

        results = [{"qid": q} for q in qids]
        lat: list[float] = []
        for pass_no in (1, 2):
            for rec in results:
                qid = rec["qid"]
                t1 = time.perf_counter()
                hits = api.recall(queries[qid], k=K, project=PROJECT)
                lat.append(time.perf_counter() - t1)
                runs = {f"pass{pass_no}": docs_of([h["id"] for h in hits])}
                if pass_no == 1:
                    runs["bm25"] = docs_of(bm25.search(queries[qid], K, PROJECT))
                for name, ranked in runs.items():
                    rec[f"{name} nDCG@10"] = C.ndcg_at_k(ranked, qrels[qid], K)
                    rec[f"{name} R@10"] = len(set(ranked[:K]) & set(qrels[qid])) / len(qrels[qid])
        cols = [f"{n} {m}" for m in ("nDCG@10", "R@10") for n in ("pass1", "pass2", "bm25")]
        row = [f"{args.split} queries", len(results)] + [sum(r[c] for r in results) / len(results) for c in cols]
        print()
        print(f"BEIR {root.name} through the HTTP API ({C.target_name(args)}): {len(uid_doc)} documents, "
              f"{len(results)} {args.split} queries, each asked twice")
        print(C.fmt_table(["", "n", *cols], [row]))
        print(C.latency_line("recall over HTTP", lat))
        if args.out:
            Path(args.out).write_text(json.dumps({"summary": dict(zip(cols, row[2:], strict=True)),
                                                  "queries": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
