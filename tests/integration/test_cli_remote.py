"""`personal-llm recall` asks the profile's running server (engine/cli/remote.py, engine/runtime.py): the same
results and errors as in process; a stale server file or a refused token leaves the recall in process."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "import sys; from engine.cli import main; sys.exit(main())"]

NOTES = [
    ("My sister Alice lives in Lisbon.", "family"),
    ("The harbour budget was cut by ten percent.", "work"),
    ("Dentist appointment moved to Friday.", None),
    ("The bike lock code is 0451.", "errands"),
    ("Alice's birthday is on the third of May.", "family"),
]


MODULES = """
import json, sys
from engine.cli import main
try:
    main(sys.argv[1:])
finally:
    print(json.dumps(sorted(m for m in sys.modules if sys.modules[m] is not None)), file=sys.stderr)
"""


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, env=dict(os.environ))


def answered(home: Path) -> int:
    """Recalls a server of this profile answered (its access log: ids and statuses, never text)."""
    return sum(p.read_text(encoding="utf-8").count("engine.api: GET /memory/recall 200")
               for p in (home / "logs").glob("*.log"))


@contextmanager
def serving(home: Path) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen([*CLI, "serve", "--port", "0", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        deadline = time.monotonic() + 60
        while not (home / "serving.json").exists():
            assert time.monotonic() < deadline, "no server file"
            time.sleep(0.05)
        yield proc
    finally:
        proc.terminate()
        proc.wait(60)


def model_loaded(home: Path) -> None:
    """Wait until the running server's model is loaded: until then it answers a recall by words alone
    (engine/recall.py `words_only_now`), as the app's search does."""
    from engine.cli import remote

    deadline = time.monotonic() + 300
    while not (remote.ask(home, "/stats", {}) or {}).get("embedding_ready"):
        assert time.monotonic() < deadline, "the server's model did not load"
        time.sleep(0.2)


@pytest.fixture
def filled(profile_home: Path) -> Path:
    for text, project in NOTES:
        args = ["remember", text] + (["--project", project] if project else [])
        assert run(*args).returncode == 0
    return profile_home


def same_hits(a: list[dict], b: list[dict]) -> None:
    """The same hits in the same order, every field equal (score and recency move with the clock; the query's
    vector of a CLI that runs the recall itself is the numpy runtime's, within 1e-6 of the server's ONNX
    Runtime one, so the similarities agree to that)."""
    assert [h["id"] for h in a] == [h["id"] for h in b]
    moving = ("score", "recency", "similarity", "cosine")
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        assert {k: v for k, v in x.items() if k not in moving} == {k: v for k, v in y.items() if k not in moving}
        assert x["score"] == pytest.approx(y["score"], abs=1e-3)
        assert x["similarity"] == pytest.approx(y["similarity"], abs=1e-5)
        assert (x["cosine"] is None) == (y["cosine"] is None)
        assert x["cosine"] is None or x["cosine"] == pytest.approx(y["cosine"], abs=1e-5)


QUERIES = [
    ("where does my sister live",),
    ("Alice", "--project", "family", "-k", "2"),
    ("dentist", "--project", "work", "--unscoped"),
    ("budget", "--since", "2020-01-01", "--until", "2999-12-31T23:00Z"),
    ("budget", "--kind", "episodic"),
    ("bike code", "--archived"),
]


BAD = (("x", "-k", "0"), ("x", "-k", "5000"), ("x", "--since", "yesterday"), ("x", "--since", "1714567890"))


def test_recall_through_a_running_server_is_the_recall_in_process(filled: Path):
    alone = {q: run("recall", *q, "--json") for q in QUERIES}
    tables = {q: run("recall", *q) for q in QUERIES[:2]}
    for p in [*alone.values(), *tables.values()]:
        assert p.returncode == 0, p.stderr
    assert answered(filled) == 0
    with serving(filled) as server:
        path = filled / "serving.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert json.loads(path.read_text())["pid"] == server.pid
        model_loaded(filled)
        for q in QUERIES:
            before = answered(filled)
            p = run("recall", *q, "--json")
            assert p.returncode == 0, p.stderr
            assert answered(filled) == before + 1, q  # the server answered, not this process
            same_hits(json.loads(alone[q].stdout), json.loads(p.stdout))
        assert json.loads(alone[QUERIES[0]].stdout)[0]["text"] == "My sister Alice lives in Lisbon."
        for q in QUERIES[:2]:
            p = run("recall", *q)
            assert p.returncode == 0 and p.stdout.splitlines()[:2] == tables[q].stdout.splitlines()[:2]
            assert [ln.split("│")[2].strip() for ln in p.stdout.splitlines() if "mem_" in ln] == \
                   [ln.split("│")[2].strip() for ln in tables[q].stdout.splitlines() if "mem_" in ln]
        # this process imported neither the engine nor the model
        probe = subprocess.run([sys.executable, "-c", MODULES, "recall", *QUERIES[0], "--json"], capture_output=True,
                               text=True, timeout=300, env=dict(os.environ))
        loaded = set(json.loads(probe.stderr.strip().splitlines()[-1]))
        same_hits(json.loads(alone[QUERIES[0]].stdout), json.loads(probe.stdout))
        heavy = {"numpy", "onnxruntime", "pydantic", "sqlcipher3", "engine.engine", "engine.db", "engine.embeddings"}
        assert heavy.isdisjoint(loaded), sorted(heavy & loaded)
        # errors are the engine's own, whichever way the recall went: a bad k, a bad time
        served = {args: run("recall", *args) for args in BAD}
        assert server.poll() is None
    assert not (filled / "serving.json").exists()  # removed when the server stopped
    for args, there in served.items():
        here = run("recall", *args)
        assert there.returncode == here.returncode == 1 and there.stderr == here.stderr, args
        assert here.stderr.startswith("error: ") and "Traceback" not in here.stderr
    assert served[BAD[-1]].stderr.startswith("error: '1714567890' is not a date")


def test_a_stale_server_file_is_ignored(filled: Path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with socket.socket() as listener:  # something listens at the port the file names: it must not be asked
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        (filled / "serving.json").write_text(json.dumps({"pid": gone.pid, "port": listener.getsockname()[1]}))
        p = run("recall", "where does my sister live", "--json")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)[0]["text"] == "My sister Alice lives in Lisbon."
        with pytest.raises(BlockingIOError):
            listener.accept()
    (filled / "serving.json").write_text("{not json")
    assert run("recall", "Alice", "--json").returncode == 0


def test_a_refused_token_falls_back_to_the_recall_in_process(filled: Path):
    import keyring

    from engine.keys import SERVICE, read_profile

    account = read_profile(filled).token_account  # type: ignore[union-attr]
    with serving(filled):
        right = keyring.get_password(SERVICE, account)
        assert right
        keyring.set_password(SERVICE, account, "not-the-token")  # the server keeps the one it started with
        try:
            before = answered(filled)
            p = run("recall", "where does my sister live", "--json")
        finally:
            keyring.set_password(SERVICE, account, right)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)[0]["text"] == "My sister Alice lives in Lisbon."
        assert answered(filled) == before
        logs = "".join(f.read_text(encoding="utf-8") for f in (filled / "logs").glob("*.log"))
        assert "GET /memory/recall 401" in logs and "refused its API token; running in process" in logs


def test_commands_that_open_the_store_work_while_its_server_runs(filled: Path):
    """The running server's file is not the file of a profile that lives on a server (engine/remote.py): a
    command that opens the store beside `serve` opens it, instead of calling the profile damaged."""
    with serving(filled) as server:
        assert (filled / "serving.json").exists() and not (filled / "server.json").exists()
        p = run("remember", "The spare key is under the blue flowerpot.", "--json")
        assert p.returncode == 0, p.stderr
        assert run("token").returncode == 0
        assert server.poll() is None
    found = run("recall", "where is the spare key", "--json")
    assert found.returncode == 0 and json.loads(found.stdout)[0]["text"] == "The spare key is under the blue flowerpot."
