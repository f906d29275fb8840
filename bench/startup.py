"""Desktop startup: process start → first paint of the main window → embedding model ready, and idle RSS.

    .venv/bin/python bench/startup.py [--runs 3] [--keep-profile]
    .venv/bin/python bench/startup.py --after-ingest 200     # idle RSS after ingesting 200 files; cold CLI recall

--after-ingest N: a process that imports the desktop app and its engine as the app does (Qt offscreen),
ingests N generated files of ~2 KB (bench/ingest_throughput.py's prose) through the engine, waits for the
background embedding to finish, idles and reports its RSS (target < 300 MB); then the cold CLI `recall`
on that store: wall time and peak RSS of the `personal-llm recall` process.

Runs the real app (`desktop.app.main`) as a subprocess on a throw-away profile (the plaintext test keyring),
offscreen unless $DISPLAY is set. The app writes its milestones to $PERSONAL_LLM_STARTUP_REPORT. Targets:
window < 1 s, idle RSS < 300 MB with the model loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
WINDOW_TARGET_S = 1.0
RSS_TARGET_MB = 300.0


def events(report: Path, key: str = "t") -> dict[str, float]:
    """First time (wall clock "t", or process CPU seconds "cpu") of each milestone."""
    if not report.exists():
        return {}
    out: dict[str, float] = {}
    for line in report.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        out.setdefault(record["event"], record.get(key, float("nan")))
    return out


def one_run(profile: Path, idle: float, timeout: float, model: bool = True) -> dict[str, float]:
    report = profile / f"startup-{time.time_ns()}.jsonl"
    home = profile / ("home" if model else "home-no-model")
    if not model:
        home.mkdir(parents=True, exist_ok=True)
        (home / "settings.json").write_text(json.dumps({"embedding_model": "none"}), encoding="utf-8")
    wait_for = "model_ready" if model else "engine_opened"
    env = dict(os.environ, PERSONAL_LLM_HOME=str(home), PERSONAL_LLM_STARTUP_REPORT=str(report),
               PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring")
    if not env.get("DISPLAY"):
        env["QT_QPA_PLATFORM"] = "offscreen"
    started = time.time()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from desktop.app import main; sys.exit(main([]))"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while wait_for not in events(report):
            if proc.poll() is not None:
                raise SystemExit(f"the app exited early with {proc.returncode}")
            if time.monotonic() > deadline:
                raise SystemExit(f"no '{wait_for}' within {timeout:.0f}s")
            time.sleep(0.02)
        seen = events(report)
        cpu = events(report, "cpu")
        time.sleep(idle)
        process = psutil.Process(proc.pid)
        rss = process.memory_info().rss / 2**20
        uss = process.memory_full_info().uss / 2**20
        return {
            "window_s": seen["window_painted"] - started,
            "window_cpu_s": cpu["window_painted"],
            "engine_s": seen.get("engine_opened", float("nan")) - started,
            "model_s": seen.get("model_ready", float("nan")) - started,
            "rss_mb": rss,
            "uss_mb": uss,
        }
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


AFTER_INGEST = r"""
import gc, json, os, sys, time
from pathlib import Path
import psutil
from PySide6.QtWidgets import QApplication
import desktop.app, desktop.bridge  # noqa: F401  what the app imports
from engine import Engine
app = QApplication([])
eng = Engine.open(Path(sys.argv[1]), actor="desktop")
eng.start_background()
eng.wait_for_embeddings()
results = eng.ingest([Path(sys.argv[2])])
while eng.stats().pending_embeddings:
    time.sleep(0.2)
heavy = [m for m in ("torch", "sentence_transformers", "transformers", "scipy") if m in sys.modules]
gc.collect()
time.sleep(float(sys.argv[3]))
p = psutil.Process()
print(json.dumps({"rss_mb": p.memory_info().rss / 2**20, "uss_mb": p.memory_full_info().uss / 2**20,
                  "files": sum(r.status == "added" for r in results), "heavy": heavy}))
eng.close()
"""


# `personal-llm recall` as the console script runs it, printing its own peak RSS (KiB) last on stderr
CLI_RECALL = r"""
import resource, runpy, sys
sys.argv = ["personal-llm", "recall", "where is the harbour budget", "--json"]
try:
    runpy.run_module("engine.cli", run_name="__main__")
finally:
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def after_ingest(files: int, idle: float) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ingest_throughput import write_corpus

    with tempfile.TemporaryDirectory(prefix="pllm-startup-") as tmp:
        home, corpus = Path(tmp) / "home", Path(tmp) / "corpus"
        write_corpus(corpus, files, files * 2 * 1024)  # short notes, ~2 KB each
        env = dict(os.environ, PERSONAL_LLM_HOME=str(home), PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring",
                   QT_QPA_PLATFORM="offscreen")
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", AFTER_INGEST, str(home), str(corpus), str(idle)], env=env,
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"after ingesting {r['files']} files ({time.perf_counter() - t0:.0f}s): idle RSS {r['rss_mb']:.0f} MB "
              f"(USS {r['uss_mb']:.0f} MB; target < {RSS_TARGET_MB:.0f} MB: "
              f"{'met' if r['rss_mb'] < RSS_TARGET_MB else 'MISSED'}); heavy modules loaded: {r['heavy'] or 'none'}")
        times, peaks = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            r2 = subprocess.run([sys.executable, "-c", CLI_RECALL], env=env, cwd=ROOT, capture_output=True, text=True)
            times.append(time.perf_counter() - t0)
            peaks.append(float(r2.stderr.strip().splitlines()[-1]) / 1024)
        print(f"cold CLI recall: median {statistics.median(times):.2f}s of 3 (runs {', '.join(f'{t:.2f}' for t in times)}); "
              f"peak RSS {statistics.median(peaks):.0f} MB")
    print(f"load average now: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--after-ingest", type=int, default=0, metavar="FILES",
                        help="measure idle RSS after ingesting this many files, and cold CLI recall")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", type=float, default=3.0, help="seconds to idle before measuring RSS")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    if args.after_ingest:
        return after_ingest(args.after_ingest, args.idle)
    results = []
    with tempfile.TemporaryDirectory(prefix="pllm-startup-") as tmp:
        for i in range(args.runs):
            r = one_run(Path(tmp), args.idle, args.timeout)
            kind = "first run (creates key and store)" if i == 0 else "warm start"
            print(f"run {i + 1} ({kind}): window {r['window_s']:.3f}s (CPU {r['window_cpu_s']:.3f}s) · engine open {r['engine_s']:.3f}s · "
                  f"model ready {r['model_s']:.2f}s · idle RSS {r['rss_mb']:.0f} MB (USS {r['uss_mb']:.0f} MB)")
            results.append(r)
        bare = one_run(Path(tmp), args.idle, args.timeout, model=False)
        print(f"without the model (embedding_model = none): window {bare['window_s']:.3f}s · idle RSS "
              f"{bare['rss_mb']:.0f} MB (USS {bare['uss_mb']:.0f} MB)")
    med = {k: statistics.median(r[k] for r in results) for k in results[0]}
    ok_window = med["window_s"] < WINDOW_TARGET_S
    ok_rss = med["rss_mb"] < RSS_TARGET_MB
    print("(CPU: the app's own CPU seconds until that moment — what the window costs on an idle machine)")
    print(f"load average now: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"\nmedian of {args.runs}: window {med['window_s']:.3f}s (target < {WINDOW_TARGET_S:.0f}s: "
          f"{'met' if ok_window else 'MISSED'}), model ready {med['model_s']:.2f}s, idle RSS {med['rss_mb']:.0f} MB "
          f"(target < {RSS_TARGET_MB:.0f} MB: {'met' if ok_rss else 'MISSED'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
