"""Hot statements use their index whatever the planner knows: no full scan of a project where an index on
the exact key exists (remember stays flat as the store grows)."""

from __future__ import annotations

from engine import Engine
from engine.embeddings import NoEmbedder
from engine.storage import memories as memory_rows


class Recording:
    """A connection that remembers the statements run through it."""

    def __init__(self, con):
        self.con, self.statements = con, []

    def execute(self, sql, params=()):
        self.statements.append((sql, params))
        return self.con.execute(sql, params)


def plan_of(con, fn, *args) -> str:
    """The query plan of the statement `fn(con, *args)` runs."""
    rec = Recording(con)
    fn(rec, *args)
    sql, params = rec.statements[-1]
    return " | ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall())


def test_the_duplicate_lookup_uses_the_hash_index_in_a_big_project(profile_home):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        for i in range(300):
            eng.remember(f"Note {i} about shelf {i * 7} in the garage.", project="house")
        plan = plan_of(eng.con, memory_rows.same_words, "0" * 64, "fact", "house", None)
    assert "memories_hash" in plan and "memories_project" not in plan, plan
