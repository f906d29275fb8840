"""`personal-llm agent`, run as a user would, against tests/ollama_server.py (tool calling)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ollama_server import OllamaTestServer, Reply

CLI = shutil.which("personal-llm", path=str(Path(sys.executable).parent)) or "personal-llm"


def run(*args: str, server: OllamaTestServer | None = None, stdin: str = "") -> subprocess.CompletedProcess:
    """The CLI with `stdin` piped in and no controlling terminal (a new session), as from a script."""
    env = dict(os.environ)
    if server is not None:
        env["OLLAMA_HOST"] = server.url
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300, env=env, input=stdin,
                          start_new_session=True)


def on_terminal(*args: str, server: OllamaTestServer, typed: str) -> subprocess.CompletedProcess:
    """The CLI with a terminal (a pseudo-terminal) as stdin, on which `typed` is typed."""
    import pty

    env = {**os.environ, "OLLAMA_HOST": server.url}
    main, child = pty.openpty()
    try:
        p = subprocess.Popen([CLI, *args], stdin=child, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, start_new_session=True)
        os.write(main, typed.encode())
        out, err = p.communicate(timeout=300)
    finally:
        os.close(child)
        os.close(main)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def ok(*args: str, **kw) -> subprocess.CompletedProcess:
    p = run(*args, **kw)
    assert p.returncode == 0, p.stderr
    return p


def call(name: str, **arguments) -> Reply:
    return Reply(tool_calls=[{"name": name, "arguments": arguments}])


@pytest.fixture
def server() -> Iterator[OllamaTestServer]:
    with OllamaTestServer(models=["llama3.2"]) as s:
        yield s


@pytest.fixture
def words_only(profile_home: Path) -> Path:
    from engine.config import Settings, save_settings

    profile_home.mkdir(parents=True, exist_ok=True)
    save_settings(Settings(embedding_model="none"), profile_home)  # words only: no model to load in each process
    return profile_home


@pytest.fixture
def stored(words_only: Path) -> str:
    return json.loads(ok("remember", "The boat is moored in Porto, berth 12.", "--json").stdout)["id"]


def test_agent_run_shows_each_step_and_the_sources(server, stored):
    server.script(Reply(text="Let me search.", tool_calls=[{"name": "search_memory", "arguments": {"query": "boat"}}]),
                  Reply(text="Your boat is in Porto, berth 12 [1]."))
    p = ok("agent", "run", "Where is my boat?", server=server)
    lines = p.stdout.splitlines()
    assert lines[0] == "Let me search."
    assert lines[1] == '→ search_memory(query="boat")  [read_only]'
    assert lines[2] == "  ✓ 1 result"
    assert lines[3] == "Your boat is in Porto, berth 12 [1]."
    assert f"  [1] {stored}  fact  The boat is moored in Porto, berth 12." in lines
    assert lines[-1].startswith("(Research: 1 tool call; run run_")
    assert "Traceback" not in p.stderr


def test_confirmations_ask_y_n_and_yes_answers_only_for_write_tools(server, stored):
    # --yes runs a write tool without asking …
    server.script(call("update_memory", id=stored, project="boats"), Reply(text="Filed."))
    p = ok("agent", "run", "Organiser", "File the boat note", "--yes", server=server)
    assert "(--yes: update_memory runs)" in p.stderr and "[y/N]" not in p.stderr
    assert "  ✓ done" in p.stdout
    # … but never a sensitive one: "n" typed, or a "y" piped in (with or without --yes), runs nothing
    for answer, flags in (("n\n", []), ("", ["--yes"])):
        server.script(call("forget_memory", id=stored), Reply(text="Finished."))
        p = on_terminal("agent", "run", "Organiser", "Delete the boat note", *flags, server=server, typed=answer
                        or "\x04")  # ^D: the end of input
        assert p.returncode == 0, p.stderr
        assert f"? Organiser wants to run forget_memory(id=\"{stored}\"), which is sensitive. Run it? [y/N]" in p.stderr
        assert "  ✗ was not run: the person did not confirm it" in p.stdout
    for flags in ([], ["--yes"]):
        server.script(call("forget_memory", id=stored), Reply(text="Finished."))
        p = ok("agent", "run", "Organiser", "Delete the boat note", *flags, server=server, stdin="y\n" * 100)
        assert "forget_memory, which is sensitive: not run, there is no terminal to ask" in p.stderr
        assert "  ✗ was not run: the person did not confirm it" in p.stdout
    # a piped "y" does not approve a write tool the agent may not use either (--yes does, above)
    server.script(call("update_memory", id=stored, project="boats"), Reply(text="Filed."))
    p = ok("agent", "run", "Organiser", "File the boat note", server=server, stdin="y\n")
    assert "update_memory, which changes your memory: not run, there is no terminal to ask" in p.stderr
    assert "(or pass --yes)" in p.stderr and "  ✗ was not run: the person did not confirm it" in p.stdout
    # "y" typed at the terminal runs it (a memory already forgotten would fail here, so the refusals left it)
    server.script(call("forget_memory", id=stored), Reply(text="Finished."))
    p = on_terminal("agent", "run", "Organiser", "Delete the boat note", server=server, typed="y\n")
    assert p.returncode == 0, p.stderr
    assert "  ✓ done" in p.stdout
    gone = run("get", stored)
    assert gone.returncode == 1 and "No memory" in gone.stderr


def test_json_transcript_list_and_show(server, words_only):
    server.script(call("today"), Reply(text="It is a good day."))
    r = json.loads(ok("agent", "run", "What day is it?", "--json", server=server).stdout)
    assert r["answer"] == "It is a good day." and r["stopped"] == "answered"
    assert [s["kind"] for s in r["steps"]] == ["call", "observation", "answer"]
    assert json.loads(r["steps"][1]["result"])["weekday"]

    agents = json.loads(ok("agent", "list", "--json").stdout)
    assert [a["name"] for a in agents][:2] == ["Research", "Organiser"]
    shown = ok("agent", "show", "Organiser").stdout
    assert "forget_memory  [sensitive, asks first]" in shown and "update_memory  [write, asks first]" in shown
    assert "search_memory  [read_only]" in shown


def test_no_model_is_a_clear_error(words_only):
    p = run("agent", "run", "Where is my boat?", server=None)
    assert p.returncode == 1 and p.stderr.startswith("error: An agent needs a language model.")
    assert "Traceback" not in p.stderr
    p = run("agent", "run", "Nobody", "Where is my boat?")
    assert p.returncode == 1 and "There is no agent called 'Nobody'" in p.stderr
