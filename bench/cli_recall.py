"""A cold `personal-llm recall`: with the profile's API server running (the CLI asks it) and without (the CLI
opens the store and loads the model), each against Python's own startup, timed in turn in the same run.

    .venv/bin/python bench/cli_recall.py [--runs 7] [--memories 20] [--baseline-tree /path/to/older/checkout]
                                         [--keyring-search]

A throw-away profile (the plaintext test keyring) with `--memories` memories; every process is the console
script's `main` in a fresh interpreter, its wall time from the parent and its peak RSS from wait4. Bytecode is
compiled once before timing, as an installed package has it. Rounds interleave: python -c pass, the recall
without a server, then (with `serve` started) python -c pass and the recall through the server, so load on the
machine falls on all of them alike. `--baseline-tree`: the in-process recall of another checkout of the engine
(PYTHONPATH) timed in the same rounds, and its CLI asking the server. `--keyring-search`: nothing configures
keyring's backend, as on most machines, so keyring searches for one (no D-Bus here: it finds the file keyring)
or the CLI loads the one found before (engine/keys.py). Targets (a quiet machine, where Python starts in ~0.04 s): <= 0.3 s
with the server, <= 0.6 s without, medians.

Beside the wall time, each process's CPU time (user + system, from wait4; through the server, plus what the
server spent on the request, from /proc): on a busy machine the wall time is mostly waiting for a core,
while the CPU time moves little with the load, and on a quiet one a process that waits for no disk is
about its CPU time.
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

ROOT = Path(__file__).resolve().parents[1]
WITH_SERVER_TARGET_S = 0.3
IN_PROCESS_TARGET_S = 0.6
QUERY = "where is the harbour budget"

TOPICS = ("the harbour budget", "my sister's flat in Lisbon", "the dentist on Thursday", "the bike repair",
          "the garden shed", "the tax return", "the school trip", "the quarterly report")


def env_for(home: Path, tree: Path = ROOT, *, search: bool = False) -> dict[str, str]:
    env = dict(os.environ, PERSONAL_LLM_HOME=str(home), PYTHONPATH=str(tree),
               PYTHON_KEYRING_BACKEND="keyrings.alt.file.PlaintextKeyring", XDG_DATA_HOME=str(home.parent / "xdg"))
    if search:  # keyring searches its backends, as where nothing configures one; no D-Bus: it finds the file
        del env["PYTHON_KEYRING_BACKEND"]
        env.update(XDG_CONFIG_HOME=str(home.parent / "config"),
                   DBUS_SESSION_BUS_ADDRESS=f"unix:path={home.parent / 'no-bus'}")
    for name in ("PYTHONDONTWRITEBYTECODE", "PERSONAL_LLM_PASSPHRASE", "OPENBLAS_NUM_THREADS",
                 "PYDANTIC_DISABLE_PLUGINS"):
        env.pop(name, None)  # an installed package has its bytecode; the CLI sets the libraries' own defaults
    return env


def timed(argv: list[str], env: dict[str, str], cwd: Path, server: int | None = None) -> tuple[float, float, float, str]:
    """(wall seconds, peak RSS in MB, CPU seconds, stdout) of one process; with `server` (a pid), the CPU
    time that process spent meanwhile is counted too."""
    with tempfile.TemporaryFile() as out:
        before = cpu_of(server) if server else 0.0
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.perf_counter() - t0
        served = cpu_of(server) - before if server else 0.0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:4])} … exited with {proc.returncode}")
        out.seek(0)
        return took, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime + served, out.read().decode()


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def answered(home: Path) -> int:
    """Recalls the server has answered so far (its access log lines, in the profile's logs)."""
    return sum(p.read_text(encoding="utf-8").count("engine.api: GET /memory/recall 200")
               for p in (home / "logs").glob("*.log"))


def cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from engine.cli import main; sys.exit(main())", *args]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--memories", type=int, default=20)
    ap.add_argument("--baseline-tree", type=Path, help="also time the in-process recall of this checkout")
    ap.add_argument("--keyring-search", action="store_true",
                    help="no keyring backend configured: keyring searches for one (it finds the file keyring)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pllm-cli-recall-") as tmp:
        home = Path(tmp) / "profile"
        env = env_for(home, search=args.keyring_search)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "engine")], env=env, check=True)
        if args.baseline_tree:
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(args.baseline_tree / "engine")], env=env,
                           check=True)
        for i in range(args.memories):
            subprocess.run(cli("remember", f"Note {i}: about {TOPICS[i % len(TOPICS)]}, item {i}."), env=env,
                           cwd=tmp, check=True, capture_output=True)
        python = [sys.executable, "-c", "pass"]
        recall = cli("recall", QUERY, "--json")
        base_env = env_for(home, args.baseline_tree, search=args.keyring_search) if args.baseline_tree else None
        for argv in (python, recall):  # warm the page cache and the bytecode
            timed(argv, env, Path(tmp))
        if base_env:
            timed(recall, base_env, Path(tmp))
        rows: dict[str, list[tuple[float, float, float]]] = {"python": [], "in process": [],
                                                             "baseline in process": []}
        expected = None
        for _ in range(args.runs):
            rows["python"].append(timed(python, env, Path(tmp))[:3])
            took, rss, cpu, out = timed(recall, env, Path(tmp))
            rows["in process"].append((took, rss, cpu))
            expected = expected or [h["id"] for h in json.loads(out)]
            if base_env:
                rows["baseline in process"].append(timed(recall, base_env, Path(tmp))[:3])
        serve = subprocess.Popen(cli("serve", "--port", "0", "--json"), env=env, cwd=tmp, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        try:
            assert serve.stdout is not None
            serve.stdout.readline()  # `serve --json` announces its URL once it listens
            deadline = time.monotonic() + 120
            while not (home / "serving.json").exists():
                if time.monotonic() > deadline:
                    raise SystemExit("the server wrote no server file")
                time.sleep(0.1)
            # the server answers by words alone while its model loads: time it once it answers as in process
            deadline = time.monotonic() + 600
            while [h["id"] for h in json.loads(timed(recall, env, Path(tmp))[3])] != expected:
                if time.monotonic() > deadline:
                    raise SystemExit("the server's recall still differs from the in-process one after 600 s")
                time.sleep(0.5)
            rows["python, server running"] = []
            rows["through the server"] = []
            asked_before = answered(home)
            for _ in range(args.runs):
                rows["python, server running"].append(timed(python, env, Path(tmp))[:3])
                took, rss, cpu, out = timed(recall, env, Path(tmp), server=serve.pid)
                rows["through the server"].append((took, rss, cpu))
                if base_env:
                    rows.setdefault("baseline through the server", []).append(
                        timed(recall, base_env, Path(tmp), server=serve.pid)[:3])
                if [h["id"] for h in json.loads(out)] != expected:
                    raise SystemExit("the server's recall differs from the in-process one")
            asked = answered(home) - asked_before
        finally:
            serve.terminate()
            serve.wait(30)
    print(f"a cold `personal-llm recall` on {args.memories} memories, median of {args.runs}"
          f"{', keyring searching for its backend' if args.keyring_search else ''} "
          f"(load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs):")
    print(f"| {'process':<26} | wall s | x python | CPU s | x python | peak RSS MB |")
    print(f"| {'-' * 26} | ------ | -------- | ----- | -------- | ----------- |")
    med = {name: tuple(statistics.median(x[i] for x in r) for i in range(3)) for name, r in rows.items() if r}
    for name, (wall, rss, cpu) in med.items():
        py = med["python, server running" if "server" in name else "python"]
        print(f"| {name:<26} | {wall:6.3f} | {wall / py[0]:8.1f} | {cpu:5.3f} | {cpu / py[2]:8.1f} | {rss:11.0f} |")
    server_ok = med["through the server"][0] <= WITH_SERVER_TARGET_S
    local_ok = med["in process"][0] <= IN_PROCESS_TARGET_S
    print(f"targets: through the server <= {WITH_SERVER_TARGET_S} s: {'met' if server_ok else 'MISSED'}; in process "
          f"<= {IN_PROCESS_TARGET_S} s: {'met' if local_ok else 'MISSED'} (python itself {med['python'][0]:.3f} s here)")
    print(f"CPU time against the targets: through the server {med['through the server'][2]:.3f} s (with the "
          f"server's share), in process {med['in process'][2]:.3f} s")
    print(f"recalls the server answered: {asked} of {args.runs * (2 if base_env else 1)} (its log); results the same "
          "as in process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
