"""pgvector's HNSW on real embeddings against the synthetic stand-ins: recall@10 against exact, by size and by
the search's settings.

    python bench/pg_hnsw.py [--sets real text mixture random] [--sizes 10000 50000] [--queries 300]
                            [--real N] [--index halfvec vector] [--settings 40:100 100:400 0:0 ...]
                            [--build 16:64 32:128] [--users U]

A million real embeddings would take hours to compute here, so bench/scale.py fills with made-up vectors
(bench/_vectors.py). This measures how HNSW's recall on those compares with real text embeddings of the
bundled model, at the sizes real ones can be had: `real` is every sentence of SciFact's abstracts and every
turn of the LoCoMo and REALTALK conversations (bench/_vectors.py's real_embeddings, ~57,000, or the first
`--real N` of a fixed shuffled order), of which `--queries` are held out as questions (texts like the stored
ones), and the data sets' own questions (SciFact's claims, the conversations' questions) are asked too. The
stand-ins (`text`, `mixture`, `random`) are asked `--queries` fresh draws of their own kind.

Each set, at each size, goes into a table of a PostgreSQL 18 + pgvector server (tests/pg_server.py) with the
product's HNSW index (halfvec, pgvector's build defaults m 16, ef_construction 64, or `--build M:EFC`;
`--index vector`: on the single-precision vectors), built as bench/_pg.py builds (room for the graph, a
parallel worker): the build's time, the index's size, and for each setting `C:EF` (C candidates asked of the
index, hnsw.ef_search EF) the recall@10 of the C candidates rescored exactly against exact numpy top-10, as
the engine's vector search does (engine/store/postgres/vectors.py); `0:0` is the engine's exact search. A
row found counts when it is at least as close as the exact 10th (real texts repeat: a tie is not a miss).
`--users U` deals the rows out among U users of one table and searches the first user's (`measure`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import fmt_table  # noqa: E402
from bench._pg import _HEADER, _TRAILER, BUILD, admin, binary_vectors, start_server  # noqa: E402
from bench._vectors import add_data_argument, generator, real_embeddings  # noqa: E402
from bench.recall_latency import percentile  # noqa: E402
from tests.pg_server import new_database  # noqa: E402

SETTINGS = ("40:40", "40:100", "40:200", "40:400", "100:400", "100:1000")

INDEXES = {  # how the column is indexed, and how a search orders by it
    "vector": ("embedding vector_cosine_ops", "embedding <=> %s::vector"),
    "halfvec": ("(embedding::halfvec({dim})) halfvec_cosine_ops", "embedding::halfvec({dim}) <=> %s::halfvec({dim})"),
}


def measure(url: str, name: str, vecs: np.ndarray, asked: dict[str, np.ndarray], kinds: list[str],
            settings: list[tuple[int, int]], builds: list[tuple[int, int]], users: int = 1) -> list[list[str]]:
    """Rows of the table for one set of vectors: each index kind and build, each setting, each kind of question.
    With several users the rows are dealt out among them (row i to user i % users, as a server's tables are
    shared), the index is over all of them, and the questions search the first user's rows only (pgvector's
    iterative scan on, as the engine runs it), against exact search over that user's rows; the setting 0:0 is
    the engine's exact search of a user with few vectors (every distance, single precision)."""
    dim = vecs.shape[1]
    owner = np.arange(len(vecs)) % users
    mine = np.flatnonzero(owner == 0)
    with admin(url) as con:
        con.execute(f"CREATE TABLE {name}(user_id bigint, id bigint, embedding vector({dim}), PRIMARY KEY (user_id, id))")
        with con.cursor().copy(f"COPY {name} FROM STDIN (FORMAT BINARY)") as cp:
            cp.write(_HEADER)
            for u in range(users):
                at = np.flatnonzero(owner == u)
                cp.write(binary_vectors(u, at.astype(np.int64), vecs[at]))
            cp.write(_TRAILER)
        con.execute(f"ANALYZE {name}")
        con.commit()
        for setting in BUILD:
            con.execute(setting)
        con.execute("SET hnsw.iterative_scan = relaxed_order")
        # the 10th best cosine of the user's rows to each question: a row found at least that close counts, so
        # that rows tied with it (the same text stored twice: real texts repeat) are not counted as misses
        tenth = {what: [float(np.sort(vecs[mine] @ q)[-10]) for q in qs] for what, qs in asked.items()}
        rows = []
        for kind, (m, efc) in ((k, b) for k in kinds for b in builds):
            index, order = (x.format(dim=dim) for x in INDEXES[kind])
            t0 = time.perf_counter()
            con.execute(f"CREATE INDEX {name}_hnsw ON {name} USING hnsw ({index}) WITH (m = {m}, ef_construction = {efc})")
            con.commit()
            built = time.perf_counter() - t0
            size = con.execute("SELECT pg_relation_size(%s)", (f"{name}_hnsw",)).fetchone()[0]
            for cand, ef in settings:
                if ef:
                    con.execute(f"SET hnsw.ef_search = {ef}")
                by = order if ef else INDEXES["vector"][1]
                for what, qs in asked.items():
                    times, found = [], []
                    for q, bar in zip(qs, tenth[what], strict=True):
                        t0 = time.perf_counter()
                        ids = [r[0] for r in con.execute(
                            f"SELECT id FROM {name} WHERE user_id = 0 ORDER BY {by} LIMIT {cand or 40}",
                            ("[" + ",".join(map(repr, q.tolist())) + "]",)).fetchall()]
                        times.append(time.perf_counter() - t0)
                        top = sorted((float(vecs[i] @ q) for i in ids), reverse=True)[:10]
                        found.append(sum(c >= bar - 1e-6 for c in top) / 10)
                    rows.append([name.split("_")[0], what, f"{len(vecs):,}" + (f" / {users}" if users > 1 else ""),
                                 f"{kind} {m}:{efc}", f"{built:.0f}", f"{size / 2**20:.0f}",
                                 f"{cand}:{ef}" if ef else "exact", f"{np.mean(found):.3f}",
                                 f"{percentile(times, 0.5) * 1000:.1f}"])
                    print("  ".join(map(str, rows[-1])), flush=True)
            con.execute(f"DROP INDEX {name}_hnsw")
            con.commit()
        con.execute(f"DROP TABLE {name}")
        con.commit()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", choices=("real", "text", "mixture", "random"),
                    default=["real", "text", "mixture"])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--users", type=int, default=1,
                    help="deal the rows out among this many users; search the first user's (see measure)")
    ap.add_argument("--real", type=int, metavar="N", help="only the first N real texts (of a fixed shuffled order)")
    add_data_argument(ap)
    ap.add_argument("--index", nargs="+", choices=tuple(INDEXES), default=["halfvec"],
                    help="the indexes compared: on the vectors cast to halfvec (the product's), or on the vectors")
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), metavar="C:EF",
                    help="candidates asked of the index : hnsw.ef_search")
    ap.add_argument("--build", nargs="+", default=["16:64"], metavar="M:EFC",
                    help="the index's m : ef_construction (pgvector's defaults, the product's: 16:64)")
    a = ap.parse_args()
    settings = [tuple(int(x) for x in s.split(":")) for s in a.settings]
    builds = [tuple(int(x) for x in s.split(":")) for s in a.build]

    rows = []
    server = start_server()
    try:
        url = server.url(new_database(server))
        with admin(url) as con:
            con.execute("CREATE EXTENSION vector")
            con.commit()
        for kind in a.sets:
            for n in a.sizes:
                if kind == "real":
                    texts, questions = real_embeddings(a.real, a.data)
                    order = np.random.default_rng(1).permutation(len(texts))
                    held, rest = texts[order[:a.queries]], texts[order[a.queries:]]
                    if n > len(rest):
                        print(f"real: only {len(rest):,} texts besides the held-out ones; {n:,} skipped", flush=True)
                        continue
                    vecs, asked = rest[:n], {"held-out texts": held, "questions": questions}
                else:
                    rng = np.random.default_rng(1)
                    make = generator(kind, a.data)
                    vecs, asked = make(rng, n), {"fresh draws": make(rng, a.queries)}
                rows += measure(url, f"{kind}_{n}", vecs, asked, a.index, settings, builds, a.users)
    finally:
        server.stop()
    print()
    print(fmt_table(["vectors", "questions", "rows" + (" / users" if a.users > 1 else ""), "index m:ef_construction", "HNSW build s", "MB", "candidates:ef_search",
                     "recall@10", "p50 ms"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
