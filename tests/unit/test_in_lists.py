"""IN lists take a few lengths (engine.db.marks / padded), so that the statements a process runs are a bounded
set that its statement cache holds (engine.db.CACHED_STATEMENTS)."""

from __future__ import annotations

import sqlite3

from engine.store.sqlite.db import marks, padded


def test_a_list_is_padded_to_the_next_power_of_two_with_its_last_value():
    assert (marks([]), padded([])) == ("", [])
    assert (marks([7]), padded([7])) == ("?", [7])
    assert (marks([1, 2, 3]), padded([1, 2, 3])) == ("?,?,?,?", [1, 2, 3, 3])
    assert padded(range(5)) == [0, 1, 2, 3, 4, 4, 4, 4] and marks(range(5)).count("?") == 8
    assert marks({"a", "b"}) == "?,?" and sorted(padded({"a", "b"})) == ["a", "b"]
    # long lists: multiples of 1,024, and never more values than one statement may bind
    assert len(padded(range(20_000))) == marks(range(20_000)).count("?") == 20_480
    assert len(padded(range(32_700))) == marks(range(32_700)).count("?") == 32_700


def test_every_length_up_to_a_thousand_takes_one_of_eleven_statements_and_means_the_same():
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, i * i) for i in range(2000)])
    texts = set()
    for n in range(1, 1001):
        ids = list(range(0, 2 * n, 2))
        sql = f"SELECT id, v FROM t WHERE id IN ({marks(ids)}) ORDER BY id"
        texts.add(sql)
        assert con.execute(sql, padded(ids)).fetchall() == [(i, i * i) for i in ids]
        left = con.execute(f"SELECT count(*) FROM t WHERE id NOT IN ({marks(ids)})", padded(ids)).fetchone()[0]
        assert left == 2000 - n
    assert len(texts) == 11
