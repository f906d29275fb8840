"""Desktop startup: process start → first paint of the main window → embedding model ready, and idle RSS.

    .venv/bin/python bench/startup.py [--runs 3] [--keep-profile]
    .venv/bin/python bench/startup.py --after-ingest 200 [--idle 15] [--notes]   # the app's idle RSS after
                                                                                 # adding 200 files; cold CLI recall

--after-ingest N: the app itself, started with a folder of N generated documents to add (PDF, Word, web pages,
Markdown, text, slides and sheets in turn, 3–12 paragraphs of bench/ingest_throughput.py's prose each; with
--notes, Markdown and text notes of ~2 KB), as "Open with" hands files over. Once the CLI's `stats` sees every
document stored and embedded, the app idles and its RSS is read (target < 300 MB); then the cold CLI `recall`
on that store: wall time and peak RSS of the `personal-llm recall` process.

Runs the real app (`desktop.app.main`) as a subprocess on a throw-away profile (the plaintext test keyring),
offscreen unless $DISPLAY is set. The app writes its milestones to $PERSONAL_LLM_STARTUP_REPORT. Targets:
window < 1 s, idle RSS < 300 MB with the model loaded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
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


def app_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment the app (and the CLI beside it) runs in: a throw-away profile, the plaintext test keyring,
    offscreen unless $DISPLAY is set."""
    env = dict(os.environ, PERSONAL_LLM_HOME=str(home), PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring",
               **extra)
    if not env.get("DISPLAY"):
        env["QT_QPA_PLATFORM"] = "offscreen"
    return env


@contextlib.contextmanager
def running_app(env: dict[str, str], *args: str) -> Iterator[subprocess.Popen]:
    """The app (`desktop.app.main`) as a subprocess given these arguments; terminated on the way out."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from desktop.app import main; sys.exit(main(sys.argv[1:]))",
                             *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def one_run(profile: Path, idle: float, timeout: float, model: bool = True) -> dict[str, float]:
    report = profile / f"startup-{time.time_ns()}.jsonl"
    home = profile / ("home" if model else "home-no-model")
    if not model:
        home.mkdir(parents=True, exist_ok=True)
        (home / "settings.json").write_text(json.dumps({"embedding_model": "none"}), encoding="utf-8")
    wait_for = "model_ready" if model else "engine_opened"
    env = app_env(home, PERSONAL_LLM_STARTUP_REPORT=str(report))
    started = time.time()
    with running_app(env) as proc:
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


# `personal-llm recall` as the console script runs it, printing its own peak RSS (KiB) last on stderr
CLI_RECALL = r"""
import resource, runpy, sys
sys.argv = ["personal-llm", "recall", "where is the harbour budget", "--json"]
try:
    runpy.run_module("engine.cli", run_name="__main__")
finally:
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


KINDS = ("pdf", "docx", "html", "md", "txt", "pdf", "md", "pptx", "xlsx", "docx")


def write_mixed(root: Path, files: int, seed: int = 11) -> None:
    """`files` documents of the kinds a user drops (PDF, Word, web pages, Markdown, text, slides, sheets;
    KINDS in turn), each 3–12 paragraphs of bench/ingest_throughput.py's prose."""
    import docx
    import openpyxl
    from ingest_throughput import paragraph
    from pptx import Presentation
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        kind = KINDS[i % len(KINDS)]
        paras = [paragraph(rng) for _ in range(rng.randint(3, 12))]
        path = root / f"file-{i:04d}.{kind}"
        if kind == "pdf":
            c = canvas.Canvas(str(path), pagesize=A4)
            c.setTitle(f"Report {i}")
            for page in range(0, len(paras), 2):
                text = c.beginText(50, 800)
                words = " ".join(paras[page:page + 2]).split()
                for at in range(0, len(words), 12):
                    text.textLine(" ".join(words[at:at + 12]))
                c.drawText(text)
                c.showPage()
            c.save()
        elif kind == "docx":
            d = docx.Document()
            d.add_heading(f"Plan {i}", 1)
            for para in paras:
                d.add_paragraph(para)
            d.save(str(path))
        elif kind == "pptx":
            deck = Presentation()
            for para in paras[:5]:
                slide = deck.slides.add_slide(deck.slide_layouts[1])
                slide.shapes.title.text = f"Slide {i}"
                slide.placeholders[1].text = para
            deck.save(str(path))
        elif kind == "xlsx":
            book = openpyxl.Workbook()
            for j, para in enumerate(paras):
                book.active.append([f"row {i}-{j}", para[:200], j * 1.5])
            book.save(str(path))
        elif kind == "html":
            body = "".join(f"<p>{para}</p>" for para in paras)
            path.write_text(f"<html><head><title>Page {i}</title></head><body><h1>Page {i}</h1>{body}</body></html>",
                            encoding="utf-8")
        else:
            path.write_text(f"# Notes {i}\n\n" + "\n\n".join(paras), encoding="utf-8")


def store_counts(env: dict[str, str]) -> tuple[int, int]:
    """(documents, embeddings waiting) of the app's store, asked through the CLI as another program would."""
    out = subprocess.run([sys.executable, "-m", "engine.cli", "stats", "--json"], env=env, cwd=ROOT,
                         capture_output=True, text=True)
    if out.returncode != 0:
        return -1, -1
    stats = json.loads(out.stdout)
    return int(stats["documents"]), int(stats["pending_embeddings"])


def after_ingest(files: int, idle: float, notes: bool, timeout: float) -> int:
    """The app itself (`desktop.app.main`, offscreen unless $DISPLAY is set) started with a folder of `files`
    documents to add, as "Open with" or a second launch hands them over; once every one is stored and embedded,
    it idles `idle` seconds and its RSS is read."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ingest_throughput import write_corpus

    with tempfile.TemporaryDirectory(prefix="pllm-startup-") as tmp:
        home, corpus = Path(tmp) / "home", Path(tmp) / "corpus"
        if notes:
            write_corpus(corpus, files, files * 2 * 1024)  # short notes, ~2 KB each
        else:
            write_mixed(corpus, files)
        env = app_env(home)
        t0 = time.perf_counter()
        with running_app(env, str(corpus)) as app:
            process = psutil.Process(app.pid)
            peak = 0.0
            while True:
                time.sleep(2)
                if app.poll() is not None:
                    raise SystemExit(f"the app exited early with {app.returncode}")
                if time.perf_counter() - t0 > timeout:
                    raise SystemExit(f"the files were not all stored within {timeout:.0f}s")
                peak = max(peak, process.memory_info().rss / 2**20)
                stored, waiting = store_counts(env)
                if stored >= files and waiting == 0:
                    break
            took = time.perf_counter() - t0
            time.sleep(idle)
            rss = process.memory_info().rss / 2**20
            uss = process.memory_full_info().uss / 2**20
            helpers = [c for c in process.children(recursive=True) if "parse_worker" in " ".join(c.cmdline())]
        print(f"the app, after adding {files} {'notes' if notes else 'files of ' + str(len(set(KINDS))) + ' kinds'} "
              f"({took:.0f}s; peak RSS {peak:.0f} MB while adding): idle RSS {rss:.0f} MB (USS {uss:.0f} MB; target < "
              f"{RSS_TARGET_MB:.0f} MB: {'met' if rss < RSS_TARGET_MB else 'MISSED'}); document reader processes "
              f"left: {len(helpers)}")
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
                        help="measure the app's idle RSS after it added this many files, and cold CLI recall")
    parser.add_argument("--notes", action="store_true",
                        help="with --after-ingest: Markdown and text notes of ~2 KB instead of a mix of kinds")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", type=float, default=3.0, help="seconds to idle before measuring RSS")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    if args.after_ingest:
        return after_ingest(args.after_ingest, args.idle, args.notes, max(args.timeout, 5.0 * args.after_ingest))
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
