"""pgvector's HNSW on real embeddings against random unit vectors: recall@10 against exact, by ef_search.

    python bench/pg_hnsw.py [--sentences 20000] [--queries 300] [--data /work/shared/data/scifact]
                            [--index vector halfvec] [--text-like N]

bench/scale.py fills with random unit vectors (a million real embeddings would take hours to compute here).
In 384 dimensions those have no neighbourhoods at all, the hardest case there is for a graph index; text
embeddings lie close to a space of far fewer dimensions. This measures how much that matters, at one size:
SENTENCES sentences of SciFact's abstracts embedded by the bundled model, with SciFact's claims as
questions, against as many random unit vectors with random questions. Each set goes into a table of a
PostgreSQL 18 + pgvector server (tests/pg_server.py) with an HNSW index (pgvector's defaults, m 16,
ef_construction 64), and each question asks the index for 40 candidates, rescored exactly, as the engine's
vector search does for k = 10 (engine/store/postgres/vectors.py): recall@10 of that against exact numpy top-10.
Each set is indexed twice, on the single-precision vectors and on them cast to halfvec (the product's index,
migrations.hnsw_index), built as bench/_pg.py builds (room for the graph, a parallel worker): the build's
time, the index's size, and the recall of each. --sentences 0 leaves out the real embeddings (and the random
set of their size); --text-like N adds N vectors of bench/_vectors.py's text-like kind.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import fmt_table  # noqa: E402
from bench._pg import _HEADER, _TRAILER, BUILD, admin, binary_vectors, start_server, unit_vectors  # noqa: E402
from bench._vectors import sentences  # noqa: E402
from bench.recall_latency import percentile  # noqa: E402
from tests.pg_server import new_database  # noqa: E402

EF = (40, 100, 200, 400)
CANDIDATES = 40


INDEXES = {  # how the column is indexed, and how a search orders by it
    "vector": ("embedding vector_cosine_ops", "embedding <=> %s::vector"),
    "halfvec": ("(embedding::halfvec({dim})) halfvec_cosine_ops", "embedding::halfvec({dim}) <=> %s::halfvec({dim})"),
}


def measure(url: str, name: str, vecs: np.ndarray, queries: np.ndarray, kinds: list[str]) -> list[list[str]]:
    dim = vecs.shape[1]
    with admin(url) as con:
        con.execute(f"CREATE TABLE {name}(user_id bigint, id bigint PRIMARY KEY, embedding vector({dim}))")
        with con.cursor().copy(f"COPY {name} FROM STDIN (FORMAT BINARY)") as cp:
            cp.write(_HEADER + binary_vectors(1, np.arange(len(vecs), dtype=np.int64), vecs) + _TRAILER)
        con.commit()
        for setting in BUILD:
            con.execute(setting)
        exact = [set(np.argsort(-(vecs @ q))[:10].tolist()) for q in queries]
        rows = []
        for kind in kinds:
            index, order = (x.format(dim=dim) for x in INDEXES[kind])
            t0 = time.perf_counter()
            con.execute(f"CREATE INDEX {name}_hnsw ON {name} USING hnsw ({index})")
            con.commit()
            built = time.perf_counter() - t0
            size = con.execute("SELECT pg_relation_size(%s)", (f"{name}_hnsw",)).fetchone()[0]
            for ef in EF:
                con.execute(f"SET hnsw.ef_search = {ef}")
                times, found = [], []
                for q, want in zip(queries, exact, strict=True):
                    t0 = time.perf_counter()
                    ids = [r[0] for r in con.execute(
                        f"SELECT id FROM {name} ORDER BY {order} LIMIT {CANDIDATES}",
                        ("[" + ",".join(map(repr, q.tolist())) + "]",)).fetchall()]
                    times.append(time.perf_counter() - t0)
                    top = sorted(ids, key=lambda i: -float(vecs[i] @ q))[:10]
                    found.append(len(want & set(top)) / 10)
                rows.append([name, kind, f"{len(vecs):,}", f"{built:.0f}", f"{size / 2**20:.0f}", ef,
                             f"{np.mean(found):.3f}", f"{percentile(times, 0.5) * 1000:.1f}"])
                print("  ".join(map(str, rows[-1])), flush=True)
            con.execute(f"DROP INDEX {name}_hnsw")
            con.commit()
        con.rollback()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--data", default="/work/shared/data/scifact", help="BEIR SciFact (corpus.jsonl, queries.jsonl)")
    ap.add_argument("--index", nargs="+", choices=tuple(INDEXES), default=list(INDEXES),
                    help="the indexes compared: on the vectors, or on them cast to halfvec (the product's)")
    ap.add_argument("--text-like", type=int, default=0, metavar="N",
                    help="also N text-like vectors (bench/_vectors.py: the model's statistics), with N as questions")
    a = ap.parse_args()
    from bench._vectors import TextLike

    rng = np.random.default_rng(1)
    sets = []
    if a.sentences:
        from engine.embeddings import Embedder

        data = Path(a.data)
        texts = sentences(data, a.sentences)
        with open(data / "queries.jsonl", encoding="utf-8") as f:
            claims = [json.loads(line)["text"] for line in f][: a.queries]
        emb = Embedder()
        t0 = time.perf_counter()
        real = emb.encode(texts).astype(np.float32)
        asked = emb.encode(claims).astype(np.float32)
        print(f"embedded {len(texts):,} sentences and {len(claims)} claims in {time.perf_counter() - t0:.0f}s",
              flush=True)
        sets += [("scifact", real, asked), ("random", unit_vectors(rng, len(texts)), unit_vectors(rng, len(claims)))]
    if a.text_like:
        like = TextLike()
        sets.append(("textlike", like(rng, a.text_like), like(rng, a.queries)))
    server = start_server()
    try:
        url = server.url(new_database(server))
        with admin(url) as con:
            con.execute("CREATE EXTENSION vector")
            con.commit()
        rows = [r for name, vecs, qs in sets for r in measure(url, name, vecs, qs, a.index)]
    finally:
        server.stop()
    print()
    print(fmt_table(["vectors", "index", "rows", "HNSW build s", "MB", "ef_search",
                     f"recall@10 ({CANDIDATES} candidates)", "p50 ms"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
