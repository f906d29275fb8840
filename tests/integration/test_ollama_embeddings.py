"""Embeddings through Ollama (`embedding.model = ollama:NAME`, engine/ollama_embeddings.py), with the real
`ollama` client against the test server's /api/embed: the space guard re-embeds on a change to and from an
Ollama model, the dimension is the model's, and a down Ollama leaves recall to words and loses nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ollama
import pytest

from engine import Engine
from engine.config import Settings, load_settings
from tests.ollama_server import OllamaTestServer

CLI = [sys.executable, "-c", "import sys; from engine.cli import main; sys.exit(main())"]
MODEL = "nomic-embed-text"
NOTES = ["My sister Alice lives in Lisbon.", "The harbour budget was cut by ten percent.",
         "The bike lock code is 0451."]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, env=dict(os.environ))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch):
    with OllamaTestServer(models=["llama3.2", MODEL], embedding_dim=24, context_length=64) as s:
        monkeypatch.setenv("OLLAMA_HOST", s.url)
        yield s


def test_the_test_server_speaks_ollamas_embed(server: OllamaTestServer):
    client = ollama.Client(host=server.url)
    one = client.embed(model=MODEL, input="Alice lives in Lisbon")
    assert len(one.embeddings) == 1 and len(one.embeddings[0]) == 24
    assert sum(x * x for x in one.embeddings[0]) == pytest.approx(1.0)
    many = client.embed(model=MODEL, input=["Alice lives in Lisbon", "the harbour budget"])
    assert many.embeddings[0] == one.embeddings[0] and many.embeddings[1] != one.embeddings[0]
    assert client.embed(model=MODEL, input=[]).embeddings == []
    with pytest.raises(ollama.ResponseError) as missing:
        client.embed(model="bge-m3", input="x")
    assert missing.value.status_code == 404 and "not found" in missing.value.error
    long = " ".join(f"word{i}" for i in range(100))
    cut = " ".join(f"word{i}" for i in range(64))
    assert client.embed(model=MODEL, input=long).embeddings == client.embed(model=MODEL, input=cut).embeddings
    with pytest.raises(ollama.ResponseError) as refused:
        client.embed(model=MODEL, input=long, truncate=False)
    assert refused.value.status_code == 400 and "context length" in refused.value.error
    close = client.embed(model=MODEL, input=["Alice lives in Lisbon", "where does Alice live", "bike lock"]).embeddings
    cos = [sum(a * b for a, b in zip(close[0], v, strict=True)) for v in close[1:]]
    assert cos[0] > cos[1]  # texts sharing words are closer, as with a model


def test_choosing_an_ollama_model_re_embeds_everything_and_back(profile_home: Path, server: OllamaTestServer):
    for text in NOTES:
        assert run("remember", text).returncode == 0
    p = run("config", "set", "embedding.model", f"ollama:{MODEL}")
    assert p.returncode == 0, p.stderr
    assert load_settings(profile_home).embedding_model == f"ollama:{MODEL}"
    embedded = [t for body in server.embed_requests for t in (body["input"] if isinstance(body["input"], list)
                                                                else [body["input"]])]
    assert set(NOTES) <= set(embedded) and all(b["model"] == MODEL for b in server.embed_requests)
    stats = json.loads(run("stats", "--json").stdout)
    assert stats["embedding_model"] == f"ollama:{MODEL}" and stats["pending_embeddings"] == 0
    assert stats["embedding_dimension"] == 24  # the model's, read from its first vector
    before = len(server.embed_requests)
    hits = json.loads(run("recall", "where does Alice live", "--json").stdout)
    assert hits[0]["text"] == NOTES[0]
    assert any(b["input"] == ["where does Alice live"] for b in server.embed_requests[before:])  # the query's vector
    with Engine.open(profile_home) as eng:
        changes = [e for e in eng.audit_log() if e.action == "embedding_space_changed"]
        assert len(changes) == 1 and changes[0].detail["to"][:3] == ["ollama", f"ollama:{MODEL}", 24]
    # and back to the bundled model: everything is embedded again in its space
    p = run("config", "set", "embedding.model", "default")
    assert p.returncode == 0, p.stderr
    stats = json.loads(run("stats", "--json").stdout)
    assert stats["embedding_dimension"] == 384 and stats["pending_embeddings"] == 0
    with Engine.open(profile_home) as eng:
        changes = [e for e in eng.audit_log() if e.action == "embedding_space_changed"]
        assert len(changes) == 2 and changes[0].detail["from"][:3] == ["ollama", f"ollama:{MODEL}", 24]


def test_a_model_ollama_lacks_or_a_down_ollama_changes_nothing(profile_home: Path, server: OllamaTestServer):
    assert run("remember", NOTES[0]).returncode == 0
    p = run("config", "set", "embedding.model", "ollama:bge-m3")
    assert p.returncode == 1 and "not installed in Ollama" in p.stderr and "ollama pull bge-m3" in p.stderr
    assert "Nothing was changed" in p.stderr and "Traceback" not in p.stderr
    assert load_settings(profile_home).embedding_model == "all-MiniLM-L6-v2"
    server.close()
    p = run("config", "set", "embedding.model", f"ollama:{MODEL}")
    assert p.returncode == 1 and f"Ollama is not running at {server.url}" in p.stderr, p.stderr
    assert load_settings(profile_home).embedding_model == "all-MiniLM-L6-v2"
    p = run("config", "set", "embedding.model", f"ollama:{MODEL}", "--later")  # saved anyway, when asked to
    assert p.returncode == 0 and load_settings(profile_home).embedding_model == f"ollama:{MODEL}"
    for bad in ("ollama:", "ollama:two words"):
        p = run("config", "set", "embedding.model", bad)
        assert p.returncode == 1 and "ollama:NAME" in p.stderr


def test_a_down_ollama_leaves_recall_to_words_and_loses_nothing(profile_home: Path, server: OllamaTestServer,
                                                                 monkeypatch: pytest.MonkeyPatch):
    import engine.ollama_embeddings as oe

    settings = Settings(embedding_model=f"ollama:{MODEL}")
    with Engine.open(profile_home, settings=settings) as eng:
        for text in NOTES:
            eng.remember(text, embed="sync")
        assert eng.stats().pending_embeddings == 0 and eng.space.embedder.space.provider == "ollama"
        server.embed_down = True  # Ollama's runner crashed
        hits = eng.recall("harbour budget")
        assert hits and hits[0].text == NOTES[1]  # by its words
        kept = eng.remember("The garden shed key is under the blue pot.")
        assert eng.get(kept.id).text == "The garden shed key is under the blue pot."
        stats = eng.stats()
        assert stats.pending_embeddings == 1 and stats.memories == 4
        assert any("could not embed" in n and "HTTP 500" in n for n in stats.notes), stats.notes
        assert eng.space.status()[0] == "failed"
        server.embed_down = False  # back up: after the retry time, the waiting row gets its vector
        monkeypatch.setattr(oe, "RETRY_SECONDS", 0.0)
        assert eng.embed_pending() == 1
        assert eng.stats().pending_embeddings == 0
        assert eng.recall("where is the shed key")[0].id == kept.id
