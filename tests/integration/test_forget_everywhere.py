"""A forgotten memory or document never comes back: not in recall, ask, the graph, nor old answers; an edited
memory leaves no answer quoting its old words."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import AskResult, Engine
from engine.config import LLMSettings
from tests.backends import one, vector_count, word_count
from tests.ollama_server import OllamaTestServer

FACT = "The storage unit on Elm Street is number 117."


@pytest.fixture
def server(eng: Engine) -> Iterator[OllamaTestServer]:
    """The engine's language model, answering from FACT with its citation."""
    with OllamaTestServer(models=["llama3.2"]) as s:
        eng.settings.llm = LLMSettings(host=s.url, model="llama3.2")
        eng.reset_llm()
        s.reply_fn = lambda req: "Your storage unit is number 117 [1]."
        yield s


def answered(eng: Engine) -> tuple[str, AskResult]:
    """FACT remembered, and one stored answer that cites it."""
    mid = eng.remember(FACT, embed="sync").id
    first = eng.ask("What number is my storage unit?")
    assert first.grounded and [s.id for s in first.sources] == [mid]
    return mid, first


def test_forgetting_a_memory_scrubs_answers_that_cited_it(eng: Engine, server: OllamaTestServer):
    mid, first = answered(eng)
    stored = one(eng, "SELECT count(*) FROM messages WHERE content LIKE '%117%'")
    assert stored == 1

    asked = len(server.chat_requests)
    removed = eng.forget(mid).removed
    assert removed["answers"] == 1
    assert one(eng, "SELECT count(*) FROM messages WHERE content LIKE '%117%'") == 0
    again = eng.ask("What number is my storage unit?", conversation_id=first.conversation_id)
    assert not again.grounded and again.sources == []
    for req in server.chat_requests[asked:]:  # nothing sent after the forget carries the text
        assert all("117" not in m["content"] for m in req["messages"])
    assert all(h.id != mid for h in eng.recall("storage unit Elm Street number", k=50))


def test_forgetting_a_document_scrubs_its_chunks_everywhere(eng: Engine, tmp_path: Path):
    if not hasattr(eng, "ingest"):
        raise AssertionError("ingest is part of the engine")
    doc = tmp_path / "unit.md"
    doc.write_text("# Storage\n\n" + FACT + "\n")
    res = eng.ingest([doc])[0]
    assert res.status == "added"
    hits = eng.recall("storage unit Elm Street number")
    assert any(h.document_id == res.document_id for h in hits)
    eng.forget(res.document_id)
    assert all(h.document_id != res.document_id for h in eng.recall("storage unit Elm Street number", k=50))
    assert word_count(eng, "chunks", "elm") == 0
    assert vector_count(eng, "chunks") == 0
    assert one(eng, "SELECT count(*) FROM memories WHERE source = 'document'") == 0


def test_editing_a_memory_scrubs_answers_that_quoted_its_old_words(eng: Engine, server: OllamaTestServer):
    """A continued conversation must not feed the model an answer built on what the user corrected."""
    mid, first = answered(eng)

    eng.update(mid, text="The storage unit on Elm Street is number 240.")
    assert one(eng, "SELECT count(*) FROM messages WHERE content LIKE '%117%'") == 0
    assert next(e for e in eng.audit_log() if e.action == "update").detail["answers_removed"] == 1
    asked = len(server.chat_requests)
    server.reply_fn = lambda req: "Your storage unit is number 240 [1]."
    again = eng.ask("And which number was it?", conversation_id=first.conversation_id)
    assert again.grounded and "240" in again.answer
    for req in server.chat_requests[asked:]:
        assert all("117" not in m["content"] for m in req["messages"])
