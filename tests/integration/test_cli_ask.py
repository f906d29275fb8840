"""`personal-llm ask` and `personal-llm config`, run as a user would, against tests/ollama_server.py."""

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
FACT = "My sister Alice lives in Lisbon."
QUESTION = "Where does my sister live?"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def ok(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    p = run(*args, env=env)
    assert p.returncode == 0, p.stderr
    return p


@pytest.fixture
def server() -> Iterator[OllamaTestServer]:
    with OllamaTestServer(models=["llama3.2", "qwen2.5:3b"]) as s:
        yield s


def test_ask_json_in_a_fresh_profile_is_grounded_in_the_remembered_fact(profile_home: Path, server):
    fact = json.loads(ok("remember", FACT, "--json").stdout)["id"]
    server.script("Your sister Alice lives in Lisbon [1].")
    env = {"OLLAMA_HOST": server.url}
    r = json.loads(ok("ask", QUESTION, "--json", env=env).stdout)

    assert r["grounded"] is True and r["llm_available"] is True and r["notice"] is None
    assert r["answer"] == "Your sister Alice lives in Lisbon [1]."
    assert r["sources"][0]["id"] == fact and {"n", "id", "kind", "text"} <= r["sources"][0].keys()
    assert {"document_id", "document_title", "locator"} <= r["sources"][0].keys()
    assert "<untrusted_content>" in server.chat_requests[0]["messages"][-1]["content"]

    never = json.loads(ok("ask", "What is the boiling point of tungsten?", "--json", env=env).stdout)
    assert never["grounded"] is False and never["sources"] == [] and len(server.chat_requests) == 1


def test_config_points_ask_at_a_model_and_the_answer_streams_with_sources(profile_home: Path, server):
    fact = json.loads(ok("remember", FACT, "--json").stdout)["id"]
    assert "llm.host = (not set: http://127.0.0.1:11434)" in ok("config", "get").stdout
    ok("config", "set", "llm.host", server.url)
    ok("config", "set", "llm.model", "qwen2.5:3b")
    assert json.loads(ok("config", "get", "llm.model", "--json").stdout) == {"llm.model": "qwen2.5:3b"}
    assert json.loads((profile_home / "settings.json").read_text())["llm"]["host"] == server.url

    server.script(Reply(tokens=["Alice", " lives", " in", " Lisbon", " [1]."]),
                  Reply(json={"supported": True, "unsupported_claims": []}))
    p = ok("ask", QUESTION, "--verify")
    assert p.stdout.startswith("Alice lives in Lisbon [1].\n")
    assert f"[1] {fact}  fact  {FACT}" in p.stdout and "Verified" in p.stdout and "--conversation cnv_" in p.stdout
    assert server.chat_requests[0]["model"] == "qwen2.5:3b"

    p = run("config", "set", "llm.provider", "chatgpt")
    assert p.returncode == 1 and p.stderr.startswith("error: 'chatgpt' is not a valid value for llm.provider")


def test_without_a_model_the_passages_are_the_answer_and_exit_is_zero(profile_home: Path):
    fact = json.loads(ok("remember", FACT, "--json").stdout)["id"]
    ok("config", "set", "llm.provider", "none")
    p = ok("ask", QUESTION)
    assert f"[1] {FACT}" in p.stdout and fact in p.stdout
    assert "note: The language model is not available" in p.stderr
    r = json.loads(ok("ask", QUESTION, "--json").stdout)
    assert r["llm_available"] is False and r["grounded"] is True and r["sources"][0]["id"] == fact


def test_a_model_failing_mid_answer_prints_the_passages_then_the_error(profile_home: Path, server):
    fact = json.loads(ok("remember", FACT, "--json").stdout)["id"]
    server.script(Reply(text="Alice lives", error="llama runner process has terminated"))
    p = run("ask", QUESTION, env={"OLLAMA_HOST": server.url})
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stdout.startswith("Alice lives\n") and f"[1] {fact}" in p.stdout
    assert p.stderr.startswith("error: Ollama stopped with an error")
