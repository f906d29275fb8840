"""Words alone on PostgreSQL: nDCG@10 and R@10 of a BEIR data set (SciFact) ranked by ts_rank and
ts_rank_cd (with and without length normalisation) over the server schema's generated tsvector, beside
FTS5's BM25 (the desktop's lexical side) on the same texts and the same OR of the query's terms.

    .venv/bin/python bench/pg_lexical.py DIR --database URL [--split test]

DIR holds corpus.jsonl, queries.jsonl and qrels/SPLIT.tsv. The database is used as a user of a fresh
`server init` (a user `bench-lexical` is added, and erased at the end with all its rows).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
from eval_beir import read_jsonl, read_qrels  # noqa: E402

K = 10
RANKINGS = {
    "ts_rank": "ts_rank(tsv, q)",
    "ts_rank/len": "ts_rank(tsv, q, 1)",
    "ts_rank_cd": "ts_rank_cd(tsv, q)",
    "ts_rank_cd/len": "ts_rank_cd(tsv, q, 1)",
}


def bm25_sql(con, words: list[str], n: int, avgdl: float, k1: float = 1.2, b: float = 0.75) -> list[str]:
    """BM25 (FTS5's constants) from the tsvector itself: each query lexeme's document frequency by the GIN
    index, its frequency in a row from the row's positions, the row's length as its count of positions."""
    lexemes = [r[0] for r in con.execute("SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', %s))",
                                         (" ".join(words),))]
    if not lexemes:
        return []
    idf = {}
    for lex in lexemes:
        (df,) = con.execute("SELECT count(*) FROM chunks WHERE tsv @@ %s::tsquery",
                            ("'" + lex.replace("'", "''") + "'",)).fetchone()
        idf[lex] = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return [r[0] for r in con.execute(
        "SELECT c.uid FROM chunks c, LATERAL (SELECT sum(array_length(positions, 1)) AS dl FROM unnest(c.tsv)) d, "
        "LATERAL (SELECT sum(w.idf * array_length(u.positions, 1) * (%s + 1) / (array_length(u.positions, 1) "
        "+ %s * (1 - %s + %s * d.dl / %s))) AS score FROM unnest(c.tsv) u "
        "JOIN unnest(%s::text[], %s::float8[]) AS w(lexeme, idf) ON w.lexeme = u.lexeme) s "
        "WHERE c.tsv @@ %s::tsquery ORDER BY s.score DESC, c.id LIMIT %s",
        (k1, k1, b, b, avgdl, list(idf), list(idf.values()),
         " | ".join("'" + x.replace("'", "''") + "'" for x in lexemes), K))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--database", required=True, help="postgresql://… of a database `server init` has set up")
    ap.add_argument("--split", default="test")
    args = ap.parse_args(argv)

    from engine import users
    from engine.store.postgres.database import Database
    from engine.store.sqlite.retrieval import terms

    root = Path(args.dir)
    corpus = read_jsonl(root / "corpus.jsonl")
    queries = {str(q["_id"]): q["text"] for q in read_jsonl(root / "queries.jsonl")}
    qrels = read_qrels(root / "qrels" / f"{args.split}.tsv")
    texts = {str(d["_id"]): (d.get("title", "").strip() + "\n" + d.get("text", "").strip()).strip() for d in corpus}

    users.add(args.database, "bench-lexical")
    try:
        with Database(args.database) as db:
            (me,) = [u.id for u in db.users() if u.name == "bench-lexical"]
            t0 = time.perf_counter()
            with db.transaction(me) as con:  # COPY FROM is refused on a table with row-level security
                (doc,) = con.execute("INSERT INTO documents(uid, title, mime, content_hash, created_at, updated_at) "
                                     "VALUES ('d', 'corpus', 'text/plain', '-', 0, 0) RETURNING id").fetchone()
                con.cursor().executemany("INSERT INTO chunks(uid, document_id, position, text, content_hash) "
                                         "VALUES (%s, %s, %s, %s, '-')",
                                         [(did, doc, i, text) for i, (did, text) in enumerate(texts.items())])
            print(f"{len(texts)} texts stored in {time.perf_counter() - t0:.1f}s", flush=True)
            with db.transaction(me) as con:  # BM25's collection statistics, once
                n, avgdl = con.execute("SELECT count(*), avg((SELECT sum(array_length(positions, 1)) "
                                       "FROM unnest(tsv))) FROM chunks").fetchone()
            runs: dict[str, dict[str, list[str]]] = {name: {} for name in [*RANKINGS, "bm25 (sql)", "fts5 bm25"]}
            seconds: dict[str, float] = dict.fromkeys(runs, 0.0)
            bm25 = C.BM25Baseline(("p", did, text) for did, text in texts.items())
            for qid in qrels:
                words = terms(queries[qid])
                t = time.perf_counter()
                runs["fts5 bm25"][qid] = bm25.search(queries[qid], K, "p")
                seconds["fts5 bm25"] += time.perf_counter() - t
                if not words:
                    for name in [*RANKINGS, "bm25 (sql)"]:
                        runs[name][qid] = []
                    continue
                with db.transaction(me) as con:
                    for name, rank in RANKINGS.items():
                        t = time.perf_counter()
                        runs[name][qid] = [r[0] for r in con.execute(
                            f"SELECT uid FROM chunks, websearch_to_tsquery('english', %s) q WHERE tsv @@ q "
                            f"ORDER BY {rank} DESC, id LIMIT %s", (" or ".join(words), K))]
                        seconds[name] += time.perf_counter() - t
                    t = time.perf_counter()
                    runs["bm25 (sql)"][qid] = bm25_sql(con, words, int(n), float(avgdl))
                    seconds["bm25 (sql)"] += time.perf_counter() - t
        rows = []
        for name, ranked in runs.items():
            ndcg = sum(C.ndcg_at_k(ranked[q], qrels[q], K) for q in qrels) / len(qrels)
            recall = sum(len(set(ranked[q][:K]) & set(qrels[q])) / len(qrels[q]) for q in qrels) / len(qrels)
            rows.append([name, f"{ndcg:.4f}", f"{recall:.4f}", f"{1000 * seconds[name] / len(qrels):.2f}"])
        print(C.fmt_table(["ranking", "nDCG@10", "R@10", "ms/query"], rows))
    finally:
        users.remove(args.database, "bench-lexical", forget=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
