"""A short command does not pay for what it never uses: the CLI's `remember` and `recall` run in a process
that never imports the LLM clients (ollama, httpx), the agents (engine/agent) or their schema checker;
those load on first use and then work."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HEAVY = ("ollama", "httpx", "jsonschema", "anyio", "engine.agent", "click")

PROBE = """
import json, sys
from engine.cli import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code or 0
loaded = sorted(m for m in sys.modules if m.split('.')[0] in {'ollama', 'httpx', 'jsonschema', 'anyio', 'click'}
                or m.startswith('engine.agent'))
# a lazy module sits in sys.modules unexecuted until used: only count the ones that ran (their submodules);
# a None entry is an import refused (engine/lazy.py UNUSED_SUBMODULES)
ran = [m for m in loaded if sys.modules[m] is not None and type(sys.modules[m]).__name__ != '_LazyModule']
print(json.dumps({"code": code, "ran": ran}), file=sys.stderr)
"""


def run(*args: str) -> dict:
    p = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=dict(os.environ),
                       timeout=300)
    return {**json.loads(p.stderr.strip().splitlines()[-1]), "out": p.stdout}


def test_remember_and_recall_never_import_the_llm_clients_or_agents():
    r = run("remember", "My sister Alice lives in Lisbon.")
    assert r["code"] == 0 and "Remembered" in r["out"]
    assert [m for m in r["ran"] if m.split(".")[0] in HEAVY or m.startswith("engine.agent")] == []
    r = run("recall", "Where does my sister live?")
    assert r["code"] == 0 and "Lisbon" in r["out"]
    assert r["ran"] == []


def test_the_lazy_modules_load_when_used():
    code = ("import engine, engine.llm as llm, engine.agent.mcp_tools as m; "
            "assert llm.httpx.Timeout(3.0).read == 3.0; assert hasattr(llm.ollama, 'Client'); "
            "assert m.jsonschema.ValidationError and m.anyio.fail_after; "
            "assert engine.AgentInfo.__name__ == 'AgentInfo' and engine.ConfirmRequest; "
            "import sys; assert 'httpx._client' in sys.modules and 'ollama._client' in sys.modules; "
            # httpx's own command-line client (engine/lazy.py UNUSED_SUBMODULES) stays out, with what it imports
            "assert not {'click', 'rich', 'pygments'} & {n.split('.')[0] for n in sys.modules}, sorted(sys.modules); "
            "c = llm.httpx.Client(); c.close()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([sys.executable, "-c", "import engine; engine.NoSuchThing"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and "NoSuchThing" in p.stderr


MODULES = """
import json, sys
from engine.cli import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code or 0
print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if sys.modules[m] is not None)}), file=sys.stderr)
"""


def modules(*args: str) -> dict:
    p = subprocess.run([sys.executable, "-c", MODULES, *args], capture_output=True, text=True, env=dict(os.environ),
                       timeout=300)
    return {**json.loads(p.stderr.strip().splitlines()[-1]), "out": p.stdout}


def test_recall_in_process_imports_only_what_a_recall_needs():
    assert modules("remember", "My sister Alice lives in Lisbon.")["code"] == 0
    r = modules("recall", "Where does my sister live?", "--json")
    assert r["code"] == 0 and "Lisbon" in r["out"]
    unused = {"engine.ask", "engine.ingest", "engine.parsers", "engine.chunking", "engine.imports", "engine.transfer",
              "engine.records", "engine.watch", "engine.consolidation", "engine.selftest", "engine.api",
              "engine.remote"}  # the client of a profile that lives on a server: this one is on this computer
    assert unused.isdisjoint(r["modules"]), sorted(unused & set(r["modules"]))
    # nor the server's, the app's or the terminal tables' libraries (--json prints no table)
    assert not {"fastapi", "starlette", "uvicorn", "PySide6", "rich"} & {m.split(".")[0] for m in r["modules"]}
    # the query was encoded by the numpy runtime over the memory-mapped weights: ONNX Runtime is not loaded
    assert "engine.minilm" in r["modules"] and not {"onnxruntime", "engine.onnx_minilm"} & set(r["modules"])
    # numpy's BLAS started on one thread (the CLI's OPENBLAS_NUM_THREADS): threadpoolctl is not asked to find it
    assert "threadpoolctl" not in r["modules"]
    # nor pydantic (~0.15 s of a cold process): the settings are read as written, the hits are plain data
    assert not {"pydantic", "pydantic_core"} & {m.split(".")[0] for m in r["modules"]}
    assert not {"engine.config", "engine.models", "engine.llm", "engine.graph_models"} & set(r["modules"])


def test_recall_in_process_reads_the_settings_without_their_models_and_builds_them_when_needed(profile_home):
    """Settings the app saved are read as written: a recall follows them (here: words only, no model)
    without pydantic; settings the models must check (an agent of the user's) are read by them, and a
    broken file is the error it always was."""
    from engine.config import Settings, save_settings

    assert modules("remember", "My sister Alice lives in Lisbon.")["code"] == 0
    save_settings(Settings(embedding_model="none"), profile_home)
    r = modules("recall", "Where does my sister live?", "--json")
    assert r["code"] == 0 and json.loads(r["out"])[0]["via"] == ["fts"]  # words only, as the settings say
    assert not {"pydantic", "engine.config", "engine.minilm"} & set(r["modules"])
    settings = json.loads((profile_home / "settings.json").read_text())
    settings["agents"]["agents"] = [{"name": "Gardener", "tools": ["today"]}]
    (profile_home / "settings.json").write_text(json.dumps(settings))
    r = modules("recall", "Where does my sister live?", "--json")
    assert r["code"] == 0 and json.loads(r["out"])[0]["via"] == ["fts"] and "pydantic" in r["modules"]
    (profile_home / "settings.json").write_text('{"theme": "purple"}')
    p = subprocess.run([sys.executable, "-m", "engine.cli", "recall", "sister"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 1 and "settings.json is not valid (ValidationError); fix or delete it" in p.stderr



SCANS = """
import json, os, sys
scanned = []


def audit(event, args):
    if event == "open" and isinstance(args[0], str) and args[0].endswith("entry_points.txt"):
        scanned.append(args[0])


sys.addaudithook(audit)
from engine.cli import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code or 0
print(json.dumps({"code": code, "scanned": len(scanned), "threads": len(os.listdir("/proc/self/task"))}),
      file=sys.stderr)
"""


def test_recall_in_process_scans_no_entry_points_and_starts_no_blas_threads():
    """Nothing a recall loads looks through every installed package's entry points (pydantic's plugins),
    and numpy's BLAS, which the engine runs on one thread, starts no thread of its own per core."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "PYDANTIC_DISABLE_PLUGINS")}

    def run_scans(*args: str) -> dict:
        p = subprocess.run([sys.executable, "-c", SCANS, *args], capture_output=True, text=True, env=env, timeout=300)
        return {**json.loads(p.stderr.strip().splitlines()[-1]), "out": p.stdout}

    assert run_scans("remember", "My sister Alice lives in Lisbon.")["code"] == 0
    r = run_scans("recall", "Where does my sister live?", "--json")
    assert r["code"] == 0 and "Lisbon" in r["out"]
    assert r["scanned"] == 0
    assert r["threads"] == 1  # the main thread: the engine's own threads end when it closes


SEARCHED = ("keyring.backends.macOS", "keyring.backends.Windows", "keyring.backends.SecretService",
            "keyring.backends.kwallet", "keyring.backends.libsecret", "keyring.backends.chainer")


def test_without_a_configured_keychain_backend_a_recall_loads_only_the_one_found_before(tmp_path):
    """Where nothing chooses keyring's backend, keyring imports and asks every backend it knows (~0.1 s);
    the one it found is remembered in the cache folder and a later command loads only that one. A
    remembered backend that does not load here, or a name that is not a keyring backend, is searched for
    again, and the store opens as before."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_KEYRING_BACKEND"}
    env.update(PERSONAL_LLM_HOME=str(tmp_path / "profile"), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_CONFIG_HOME=str(tmp_path / "config"),  # no keyring config file
               DBUS_SESSION_BUS_ADDRESS=f"unix:path={tmp_path / 'no-bus'}")  # no Secret Service: the file keyring

    def cli(*args: str) -> dict:
        p = subprocess.run([sys.executable, "-c", MODULES, *args], capture_output=True, text=True, env=env,
                           timeout=300)
        return {**json.loads(p.stderr.strip().splitlines()[-1]), "out": p.stdout}

    remembered = tmp_path / "profile" / "cache" / "keychain-backend"
    assert cli("remember", "My sister Alice lives in Lisbon.")["code"] == 0
    assert remembered.read_text().strip() == "keyrings.alt.file.PlaintextKeyring"
    assert (remembered.stat().st_mode & 0o777) == 0o600
    r = cli("recall", "Where does my sister live?", "--json")
    assert r["code"] == 0 and "Lisbon" in r["out"]
    assert not [m for m in r["modules"] if m.startswith(SEARCHED)], r["modules"]
    for stale in ("keyring.backends.SecretService.Keyring", "os.system", "keyrings.alt.file.NoSuchKeyring"):
        remembered.write_text(stale + "\n")
        r = cli("recall", "Where does my sister live?", "--json")
        assert r["code"] == 0 and "Lisbon" in r["out"], r
        assert remembered.read_text().strip() == "keyrings.alt.file.PlaintextKeyring"
