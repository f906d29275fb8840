"""The word search of one user among several on PostgreSQL, under row-level security: the time of recall's
lexical side (retrieval.lexical_memories: its statements, as recall runs them) and the plan of its main
statement (EXPLAIN ANALYZE), for a user with ROWS memories in a database where OTHERS more users hold as many.

    .venv/bin/python bench/pg_words_rls.py [--rows 100000] [--others 3] [--queries 30] [--database URL]

Without --database it starts a PostgreSQL of its own (tests/pg_server.py's, as bench/_pg.py runs it) and sets
it up as `personal-llm server init` does. The memories are synthetic notes (bench/recall_latency.py's
sentences: common words and a Zipf-distributed long tail), written by COPY as the superuser (bench/_pg.py).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from psycopg import sql  # noqa: E402

from bench._pg import admin, make_database, start_server  # noqa: E402
from bench.recall_latency import COMMON, VOCAB, sentence  # noqa: E402


def fill(url: str, user_id: int, n: int, seed: int) -> None:
    """n memories of one user, by COPY (row triggers off, the counts written once, as bench/_pg.py)."""
    from engine.memory_rules import content_hash, new_uid
    from engine.store.postgres.migrations import MEMORY_TALLY_KEY

    rng = random.Random(seed)
    now = time.time()
    with admin(url) as con:
        con.execute("SET LOCAL session_replication_role = replica")
        first = int(con.execute("SELECT coalesce(max(id), 0) + 1 FROM memories").fetchone()[0])
        with con.cursor().copy("COPY memories(user_id, id, uid, kind, text, content_hash, importance, created_at, "
                               "updated_at, project, source, processed, extracted) FROM STDIN") as cp:
            for rid in range(first, first + n):
                text = sentence(rng)
                when = now - rng.random() * 3e7
                cp.write_row((user_id, rid, new_uid("mem"), rng.choice(("fact", "episodic", "procedural")), text,
                              content_hash(text), rng.random(), when, when, rng.choice((None, "work", "home")),
                              "user", True, True))
        con.execute(sql.SQL(
            "INSERT INTO tallies AS t (user_id, name, n) SELECT user_id, {key}, count(*) FROM memories r "
            "WHERE user_id = %s AND id >= %s GROUP BY 1, 2 "
            "ON CONFLICT (user_id, name) DO UPDATE SET n = t.n + excluded.n").format(
                key=sql.SQL(MEMORY_TALLY_KEY.format(r="r"))), (user_id, first))
        con.execute("SELECT setval(pg_get_serial_sequence('personal_llm.memories', 'id'), "
                    "(SELECT max(id) FROM memories))")
        con.commit()


class Traced:
    """A connection that keeps the statements it runs (to EXPLAIN the one recall runs)."""

    def __init__(self, con) -> None:
        self.con = con
        self.statements: list[tuple] = []

    def execute(self, query, params=None):
        self.statements.append((query, params))
        return self.con.execute(query, params)


def questions(n: int, seed: int = 3) -> list[str]:
    """Questions of two to four words: common ones and some of the long tail (rare and middling)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(COMMON)] + [rng.choice(VOCAB[: 200 if rng.random() < 0.5 else len(VOCAB)])
                                        for _ in range(rng.randint(1, 3))]
        out.append("when did " + " ".join(words))
    return out


def rare(n: int, seed: int = 4) -> list[str]:
    """Questions of one to three words of the long tail (past the 1,000 most frequent)."""
    rng = random.Random(seed)
    return ["where is " + " ".join(rng.choice(VOCAB[1000:]) for _ in range(rng.randint(1, 3))) for _ in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000, help="memories of the measured user (and of each other)")
    ap.add_argument("--others", type=int, default=3, help="other users, each with as many memories")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--database", help="a database `server init` set up (default: a server of its own)")
    ap.add_argument("--user", type=int, help="measure this user of --database as it is (no fill): to time one "
                                             "database with two versions of the code")
    args = ap.parse_args(argv)

    from engine import users
    from engine.store.postgres import migrations, retrieval
    from engine.store.postgres.database import Database
    from engine.store.postgres.store import PgStore
    from engine.store.types import Filter

    server = None
    if args.database:
        url = args.database
        if args.user is None:
            users.init(url)
    else:
        server = start_server()
        url = make_database(server)
    try:
        db = Database(url)
        if args.user is None:
            ids = [db.add_user(f"words-{time.time_ns()}-{i}", users.token_hash(users.make_token()))
                   for i in range(args.others + 1)]
            t0 = time.perf_counter()
            for k, uid in enumerate(ids):
                fill(url, uid, args.rows, seed=k)
            with admin(url) as con:
                con.autocommit = True
                con.execute("VACUUM ANALYZE personal_llm.memories")
            print(f"filled {len(ids)} users x {args.rows:,} memories in {time.perf_counter() - t0:.0f} s", flush=True)
        else:
            ids = [args.user]
        print(f"code's schema version {migrations.SCHEMA_VERSION}", flush=True)

        store = PgStore(db, ids[0], "measured")
        with store.read() as con:
            rows = con.execute("SELECT count(*) FROM memories").fetchone()[0]
        qs = questions(args.queries)
        for label, chosen in (("a common word and 1-3 others", qs), ("long-tail words only", rare(args.queries))):
            times: list[float] = []
            found = 0
            for q in chosen:
                with store.read() as con:
                    t = time.perf_counter()
                    hits = retrieval.lexical_memories(con, q, 10, Filter())
                    times.append((time.perf_counter() - t) * 1000)
                    found += bool(hits)
            print(f"lexical_memories over the user's {rows:,} memories, {len(chosen)} questions of {label}: "
                  f"p50 {statistics.median(times):.1f} ms, mean {statistics.mean(times):.1f} ms, "
                  f"max {max(times):.1f} ms ({found} with hits)", flush=True)
        with store.read() as con:
            traced = Traced(con)
            retrieval.lexical_memories(traced, qs[0], 10, Filter())
            query, params = next(s for s in traced.statements if "ORDER BY" in str(s[0]))
            plan = con.execute(f"EXPLAIN (ANALYZE, COSTS OFF, BUFFERS OFF) {query}", params).fetchall()
        print(f"EXPLAIN ANALYZE of the search's main statement as the user ({qs[0]!r}):")
        print("\n".join("    " + r[0] for r in plan))
        db.close()
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
