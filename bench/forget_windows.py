"""Forgetting a memory in a store with many window vectors (long memories), with the window trigger as it is
and with the trigger stores had before (docs/performance.md, "A window's vector goes by its rowid").

    python bench/forget_windows.py [--memories 10000] [--windows 5] [--forgets 40]

A throwaway encrypted store gets `--memories` memories with `--windows` window vectors each (random unit
vectors of 384 dimensions, inserted through the storage layer: no model is needed). Then `--forgets` random
memories are forgotten through the engine, alternating between the current trigger and the old one (which
deleted the windows' vectors with `rowid IN (…)`, a read of every window vector by sqlite-vec). Prints both
medians and their ratio, and checks that each forget took exactly its memory's windows with it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

OLD_TRIGGER = ("CREATE TRIGGER memories_windows_ad AFTER DELETE ON memories BEGIN DELETE FROM vec_memory_windows "
               "WHERE rowid IN (SELECT id FROM memory_windows WHERE memory_id = old.id); "
               "DELETE FROM memory_windows WHERE memory_id = old.id; END")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--windows", type=int, default=5, help="window vectors per memory")
    ap.add_argument("--forgets", type=int, default=40)
    a = ap.parse_args()
    if a.memories < a.forgets or a.forgets < 2 or a.windows < 1:
        ap.error("needs --windows >= 1, --forgets >= 2 and at least as many memories as forgets")
    tmp = Path(tempfile.mkdtemp(prefix="pllm-forget-windows-"))
    try:
        return run(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(a: argparse.Namespace, tmp: Path) -> int:
    os.environ["PERSONAL_LLM_HOME"] = str(tmp / "profile")
    os.environ["PYTHON_KEYRING_BACKEND"] = "keyrings.alt.file.PlaintextKeyring"
    os.environ["XDG_DATA_HOME"] = str(tmp / "xdg-data")
    import numpy as np

    from engine import Engine
    from engine.embeddings import NoEmbedder
    from engine.store.sqlite import memories as memory_rows
    from engine.store.sqlite import vectors

    rng = np.random.default_rng(3)
    t0 = time.perf_counter()
    with Engine.open(tmp / "profile", embedder=NoEmbedder()) as eng:
        with eng.store.write() as con:
            vectors.create_tables(con, 384)
            for i in range(a.memories):
                rid = memory_rows.insert(con, uid=f"mem_w{i}", kind="fact", text=f"long note {i}", chash=f"h{i}",
                                         importance=0.5, now=float(i), event_at=None, project=None, source="user",
                                         meta=None, conversation_id=None, document_id=None, done=True,
                                         dedup_pending=False)
                vecs = rng.standard_normal((a.windows, 384)).astype(np.float32)
                for v in vecs / np.linalg.norm(vecs, axis=1, keepdims=True):
                    wid = con.execute("INSERT INTO memory_windows(memory_id, start, end) VALUES (?, 0, 1)",
                                      (rid,)).lastrowid
                    con.execute("INSERT INTO vec_memory_windows(rowid, embedding) VALUES (?, ?)", (wid, v.tobytes()))
        print(f"{a.memories:,} memories, {a.memories * a.windows:,} window vectors stored in "
              f"{time.perf_counter() - t0:.0f}s")
        con = eng.con
        uids = [r[0] for r in con.execute("SELECT uid FROM memories ORDER BY random() LIMIT ?", (a.forgets,))]
        times: dict[str, list[float]] = {"now": [], "before": []}
        for j, uid in enumerate(uids):
            arm = "before" if j % 2 else "now"
            with eng.store.write() as w:
                w.execute("DROP TRIGGER memories_windows_ad")
                w.execute(OLD_TRIGGER if arm == "before" else vectors.WINDOWS_OWNER_TRIGGER)
            t = time.perf_counter()
            eng.forget(uid)
            times[arm].append(time.perf_counter() - t)
            left = con.execute("SELECT count(*) FROM vec_memory_windows").fetchone()[0]
            if left != (a.memories - j - 1) * a.windows:
                print(f"a forget left {left:,} window vectors, not {(a.memories - j - 1) * a.windows:,}")
                return 1
        with eng.store.write() as w:
            w.execute("DROP TRIGGER memories_windows_ad")
            w.execute(vectors.WINDOWS_OWNER_TRIGGER)
    now, before = (statistics.median(times[k]) * 1e3 for k in ("now", "before"))
    print(f"forget, median of {len(times['now'])} each: {now:.2f} ms now, {before:.2f} ms with the old trigger "
          f"({before / now:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
