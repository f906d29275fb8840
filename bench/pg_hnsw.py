"""pgvector's HNSW on real embeddings against random unit vectors: recall@10 against exact, by ef_search.

    python bench/pg_hnsw.py [--sentences 20000] [--queries 300] [--data /work/shared/data/scifact]

bench/scale.py fills with random unit vectors (a million real embeddings would take hours to compute here).
In 384 dimensions those have no neighbourhoods at all, the hardest case there is for a graph index; text
embeddings lie close to a space of far fewer dimensions. This measures how much that matters, at one size:
SENTENCES sentences of SciFact's abstracts embedded by the bundled model, with SciFact's claims as
questions, against as many random unit vectors with random questions. Each set goes into a table of a
PostgreSQL 18 + pgvector server (tests/pg_server.py) with an HNSW index (pgvector's defaults, m 16,
ef_construction 64), and each question asks the index for 40 candidates, rescored exactly, as the engine's
vector search does for k = 10 (engine/store/postgres/vectors.py): recall@10 of that against exact numpy top-10.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import fmt_table  # noqa: E402
from bench._pg import _HEADER, _TRAILER, admin, binary_vectors, start_server, unit_vectors  # noqa: E402
from bench.recall_latency import percentile  # noqa: E402
from tests.pg_server import new_database  # noqa: E402

EF = (40, 100, 200, 400)
CANDIDATES = 40


def sentences(data: Path, n: int) -> list[str]:
    out: list[str] = []
    with open(data / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            for s in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"]):
                if len(s) >= 40:
                    out.append(s)
                    if len(out) == n:
                        return out
    return out


def measure(url: str, name: str, vecs: np.ndarray, queries: np.ndarray) -> list[list[str]]:
    with admin(url) as con:
        con.execute(f"CREATE TABLE {name}(user_id bigint, id bigint PRIMARY KEY, embedding vector({vecs.shape[1]}))")
        with con.cursor().copy(f"COPY {name} FROM STDIN (FORMAT BINARY)") as cp:
            cp.write(_HEADER + binary_vectors(1, np.arange(len(vecs), dtype=np.int64), vecs) + _TRAILER)
        t0 = time.perf_counter()
        con.execute(f"CREATE INDEX ON {name} USING hnsw (embedding vector_cosine_ops)")
        con.commit()
        built = time.perf_counter() - t0
        exact = [set(np.argsort(-(vecs @ q))[:10].tolist()) for q in queries]
        rows = []
        for ef in EF:
            con.execute(f"SET hnsw.ef_search = {ef}")
            times, found = [], []
            for q, want in zip(queries, exact, strict=True):
                t0 = time.perf_counter()
                ids = [r[0] for r in con.execute(
                    f"SELECT id FROM {name} ORDER BY embedding <=> %s::vector LIMIT {CANDIDATES}",
                    ("[" + ",".join(map(repr, q.tolist())) + "]",)).fetchall()]
                times.append(time.perf_counter() - t0)
                top = sorted(ids, key=lambda i: -float(vecs[i] @ q))[:10]
                found.append(len(want & set(top)) / 10)
            rows.append([name, f"{len(vecs):,}", f"{built:.0f}", ef, f"{np.mean(found):.3f}",
                         f"{percentile(times, 0.5) * 1000:.1f}"])
            print("  ".join(map(str, rows[-1])), flush=True)
        con.rollback()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--data", default="/work/shared/data/scifact", help="BEIR SciFact (corpus.jsonl, queries.jsonl)")
    a = ap.parse_args()
    from engine.embeddings import Embedder

    data = Path(a.data)
    texts = sentences(data, a.sentences)
    with open(data / "queries.jsonl", encoding="utf-8") as f:
        claims = [json.loads(line)["text"] for line in f][: a.queries]
    emb = Embedder()
    t0 = time.perf_counter()
    real = emb.encode(texts).astype(np.float32)
    asked = emb.encode(claims).astype(np.float32)
    print(f"embedded {len(texts):,} sentences and {len(claims)} claims in {time.perf_counter() - t0:.0f}s", flush=True)
    rng = np.random.default_rng(1)
    server = start_server()
    try:
        url = server.url(new_database(server))
        with admin(url) as con:
            con.execute("CREATE EXTENSION vector")
            con.commit()
        rows = measure(url, "scifact", real, asked)
        rows += measure(url, "random", unit_vectors(rng, len(texts)), unit_vectors(rng, len(claims)))
    finally:
        server.stop()
    print()
    print(fmt_table(["vectors", "rows", "HNSW build s", "ef_search", f"recall@10 ({CANDIDATES} candidates)", "p50 ms"],
                    rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
