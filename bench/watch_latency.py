"""Watched folders: how long until the store follows a change, against ingesting the same file directly.

    python bench/watch_latency.py [--files 200] [--rounds 5]

On a fresh encrypted store (a temp profile) with the real model, it writes `--files` small Markdown files
into a watched folder and measures:

- the first scan of the folder, against `Engine.ingest` of a copy of the same files in another folder
  (the baseline: the ratio is the watcher's overhead over the plain ingest);
- a rescan of the unchanged folder (what every start costs), against the first scan;
- for `--rounds` rounds, the time from writing, editing, renaming and deleting one file to the store
  showing it (the running watcher, polled every 10 ms), against ingesting one such file directly. The
  watcher's share is mostly its debounce: it waits for a quiet moment (engine.watch.QUIET_MS).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cleanup, prepare_home  # noqa: E402


def text(i: int, version: int = 0) -> str:
    return (f"# Note {i}\n\nThis note number {i} (version {version}) is about item {i * 7919 % 1000} "
            "in the workshop inventory: a drawer of brass screws, a tin of wood glue and a spare saw blade.\n")


def wait(cond, timeout: float = 60.0) -> float:
    t0 = time.perf_counter()
    while not cond():
        if time.perf_counter() - t0 > timeout:
            raise SystemExit("the store did not follow within a minute")
        time.sleep(0.01)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--order", choices=("ingest-first", "watch-first"), default="ingest-first",
                    help="which of the first scan and the baseline ingest runs first")
    a = ap.parse_args()
    home, _, tmp = prepare_home(None, "watch")
    from engine import Engine
    from engine.watch import QUIET_MS

    work = Path(tempfile.mkdtemp(prefix="pllm-watch-"))
    try:
        with Engine.open(home) as eng:
            eng.load_embeddings()
            watched, plain = work / "watched", work / "plain"
            for d in (watched, plain):
                d.mkdir()
                for i in range(a.files):
                    (d / f"note{i:04}.md").write_text(text(i), encoding="utf-8")
            # the baseline's copy differs in one word per file, so neither run finds the other's documents
            for i in range(a.files):
                (plain / f"note{i:04}.md").write_text(text(i, 99), encoding="utf-8")
            warm = work / "warm"
            warm.mkdir()
            for i in range(a.files):  # whichever run came first was ~3x slower (warm-up): neither pays for it
                (warm / f"note{i:04}.md").write_text(text(i, 98), encoding="utf-8")
            eng.ingest([warm])
            eng.watch_add(watched)
            t0 = time.perf_counter()
            if a.order == "watch-first":
                eng.watch_scan()
                first = time.perf_counter() - t0
                t0 = time.perf_counter()
                eng.ingest([plain])
                direct = time.perf_counter() - t0
            else:
                eng.ingest([plain])
                direct = time.perf_counter() - t0
                t0 = time.perf_counter()
                eng.watch_scan()
                first = time.perf_counter() - t0
            t0 = time.perf_counter()
            [again] = eng.watch_scan()
            rescan = time.perf_counter() - t0
            assert again.unchanged == a.files and again.added == 0
            print(f"first scan of {a.files} files   {first:7.2f} s   ingest of the same files {direct:7.2f} s   "
                  f"ratio {first / direct:5.2f}")
            print(f"rescan, nothing changed    {rescan:7.3f} s   first scan {first:7.2f} s            "
                  f"ratio {rescan / first:5.3f}")

            def paths() -> set[str]:
                return {d.path for d in eng.list_documents() if d.path}

            eng.start_watching()
            wait(lambda: eng.watch.watching)
            time.sleep(1.5)  # the watch is set up at its first yield
            lat: dict[str, list[float]] = {"create": [], "edit": [], "rename": [], "delete": []}
            single: list[float] = []
            for r in range(a.rounds):
                f = watched / f"new{r}.md"
                f.write_text(text(10_000 + r), encoding="utf-8")
                lat["create"].append(wait(lambda f=f: str(f) in paths()))
                uid = next(d.id for d in eng.list_documents() if d.path == str(f))
                before = eng.get_document(uid).updated_at
                f.write_text(text(10_000 + r, 1), encoding="utf-8")
                lat["edit"].append(wait(lambda uid=uid, before=before: any(
                    d.id == uid and d.updated_at != before for d in eng.list_documents())))
                g = watched / f"renamed{r}.md"
                os.rename(f, g)
                lat["rename"].append(wait(lambda g=g: str(g) in paths()))
                g.unlink()
                lat["delete"].append(wait(lambda g=g: str(g) not in paths()))
                one = plain / f"single{r}.md"
                one.write_text(text(20_000 + r), encoding="utf-8")
                t0 = time.perf_counter()
                eng.ingest([one])
                single.append(time.perf_counter() - t0)
            base = statistics.median(single)
            print(f"ingest of one file (median of {a.rounds})   {base:6.3f} s   quiet period {QUIET_MS / 1000:.1f} s")
            for what, xs in lat.items():
                m = statistics.median(xs)
                print(f"{what:7} seen after (median) {m:6.3f} s   max {max(xs):6.3f} s   ratio to one ingest "
                      f"{m / base:5.1f}")
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
        cleanup(tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
