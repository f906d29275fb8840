"""The knowledge graph on a real encrypted store, with the real `ollama` client talking to a local server
that speaks Ollama's API and answers with structured JSON (tests/ollama_server.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from engine import Engine, NotFound
from engine.cli import main
from tests import backends
from tests.ollama_server import OllamaTestServer, Reply


def triple(s: str, r: str, o: str, st: str | None = None, ot: str | None = None) -> dict[str, Any]:
    return {"subject": s, "relation": r, "object": o, "subject_type": st, "object_type": ot}


# What the "model" extracts from each note (matched by the note's text inside the prompt).
TRIPLES: dict[str, list[dict[str, Any]]] = {
    "Alice works at Acme.": [triple("Alice", "works at", "Acme", "person", "organization")],
    "Acme is based in Berlin.": [triple("Acme", "is based in", "Berlin", "organization", "place")],
    "Bob works at Acme too.": [triple("Bob", "works at", "ACME", "person", "organization")],
    "Alice Smith lives in Lisbon.": [triple("Alice Smith", "lives in", "Lisbon", "person", "place")],
    "Alice plays chess.": [triple("alice", "plays", "chess", "person", None)],
    "Lisbon is in Portugal.": [triple("LISBON.", "is in", "Portugal", "place", "place")],
    "Paris was rainy.": [triple("Paris", "had", "rain")],
    "Paris Hilton opened a hotel in Lisbon.": [triple("Paris Hilton", "opened a hotel in", "Lisbon", None, "place")],
    "Bob Marley played in Lisbon.": [triple("Bob Marley", "played in", "Lisbon", "person", "place")],
    "Alice keeps her notes in notes.md at https://acme.com.": [
        triple("Alice", "keeps notes at", "Acme", "person", "organization"),
        triple("it", "is", "thing"),
        triple("Alice", "wrote", "notes.md"),
        triple("Alice", "reads", "https://acme.com"),
        triple("Alice", "calls", "load_notes()"),
        triple("the user", "likes", "Alice"),
        triple("Alice", "", "Acme"),
    ],
}


def schema_title(request: dict[str, Any]) -> str | None:
    fmt = request.get("format")
    return fmt.get("title") if isinstance(fmt, dict) else None


def extraction_reply(request: dict[str, Any]) -> Reply:
    prompt = request["messages"][-1]["content"]
    for text, triples in TRIPLES.items():
        if text in prompt:
            return Reply(json={"triples": triples})
    return Reply(json={"triples": []})


@pytest.fixture
def server() -> Iterator[OllamaTestServer]:
    with OllamaTestServer(models=["llama3.2"], reply_fn=extraction_reply) as s:
        yield s


@pytest.fixture
def graph_eng(eng: Engine, server: OllamaTestServer) -> Engine:
    eng.settings.llm.provider = "ollama"
    eng.settings.llm.host = server.url
    return eng


def remember_all(eng: Engine, *texts: str) -> list[str]:
    return [eng.remember(t).id for t in texts]


def aliases(eng: Engine) -> dict[str, list[str]]:
    """{name: aliases} of every node."""
    return {name: json.loads(a) if isinstance(a, str) else a
            for name, a in backends.rows(eng, "SELECT name, aliases FROM nodes")}


def counts(eng: Engine) -> tuple[int, int]:
    s = eng.stats()
    return s.nodes, s.edges


def test_remember_stays_instant_and_extraction_admits_and_counts_refusals(graph_eng: Engine,
                                                                         server: OllamaTestServer) -> None:
    (uid,) = remember_all(graph_eng, "Alice keeps her notes in notes.md at https://acme.com.")
    assert server.chat_requests == []  # remember never waits for a language model

    report = graph_eng.extract_pending()

    assert report.processed == 1 and report.edges == 1 and report.nodes == 2 and report.remaining == 0
    expected = {"pronoun": 1, "file_name": 1, "url": 1, "code_symbol": 1, "generic": 1, "relation_empty": 1}
    assert report.rejected == expected
    assert graph_eng.admission_rejections() == expected
    assert counts(graph_eng) == (2, 1)
    view = graph_eng.neighbours("alice")
    assert [e.text for e in view.edges] == ["Alice —keeps notes at→ Acme"]
    assert view.edges[0].sources == [uid]  # provenance
    (request,) = server.chat_requests
    assert request["format"]["title"] == "TripleExtraction"  # structured output, constrained by schema
    assert "<untrusted_content>" in request["messages"][-1]["content"]
    audit = [e for e in graph_eng.audit_log() if e.action == "extract_triples"]
    assert audit[0].target == uid and audit[0].detail["rejected"] == 6
    assert "notes" not in json.dumps(audit[0].detail)  # counts, never text

    again = graph_eng.extract_pending()  # nothing left: no second request
    assert again.processed == 0 and len(server.chat_requests) == 1
    graph_eng.remember("Alice keeps her notes in notes.md at https://acme.com.")  # a merge changes nothing
    assert graph_eng.extract_pending().processed == 0


def test_entities_resolve_by_normalised_name_and_unambiguous_alias(graph_eng: Engine) -> None:
    remember_all(graph_eng, "Alice Smith lives in Lisbon.", "Alice plays chess.", "Lisbon is in Portugal.")
    report = graph_eng.extract_pending()
    assert report.edges == 3
    names = aliases(graph_eng)
    assert set(names) == {"Alice Smith", "Lisbon", "chess", "Portugal"}  # "alice", "LISBON." resolved
    assert names["Alice Smith"] == ["alice"]
    view = graph_eng.neighbours("Alice", hops=2)  # found by alias
    assert view.entity == "Alice Smith"
    assert {n.name: n.hops for n in view.nodes} == {"Alice Smith": 0, "Lisbon": 1, "chess": 1, "Portugal": 2}
    assert {n.name: n.type for n in view.nodes}["Lisbon"] == "place"


def test_a_first_word_joins_only_people(graph_eng: Engine) -> None:
    """Untyped or non-person names never merge by their first word; a person with an untyped first name does
    only when that first name is unambiguous."""
    remember_all(graph_eng, "Paris was rainy.", "Paris Hilton opened a hotel in Lisbon.", "Bob works at Acme too.",
                 "Bob Marley played in Lisbon.")
    graph_eng.extract_pending()
    names = aliases(graph_eng)
    assert {"Paris", "Paris Hilton"} <= set(names) and names["Paris Hilton"] == []
    assert "Bob Marley" not in names and names["Bob"] == ["Bob Marley"]  # people: one person


def test_a_two_hop_question_is_answered_through_the_graph(graph_eng: Engine) -> None:
    alice, acme = remember_all(graph_eng, "Alice works at Acme.", "Acme is based in Berlin.")
    graph_eng.extract_pending()

    one_hop = graph_eng.graph_context("Where does Alice work?", hops=1)
    two_hops = graph_eng.graph_context("Where does Alice work?", hops=2)

    assert one_hop == ["Alice —works at→ Acme"]
    assert two_hops == ["Alice —works at→ Acme", "Acme —is based in→ Berlin"]
    rows = dict(backends.rows(graph_eng, "SELECT uid, id FROM memories"))
    assert graph_eng.graph_memory_ids("In which city is Alice's employer?", hops=2) == [rows[alice], rows[acme]]
    assert graph_eng.graph_keys("Where does Alice work?", hops=1) == [("m", rows[alice])]
    assert graph_eng.graph_context("What is the weather like?") == []
    assert graph_eng.graph_context("Where does Alice work?", project="work") == []  # other project: nothing
    with pytest.raises(Exception, match="hops"):
        graph_eng.graph_context("Alice", hops=3)


def test_forgetting_a_memory_removes_its_edges_and_orphan_nodes(graph_eng: Engine) -> None:
    alice, bob = remember_all(graph_eng, "Alice works at Acme.", "Bob works at Acme too.")
    graph_eng.extract_pending()
    assert counts(graph_eng) == (3, 2)  # "ACME" is Acme

    removed = graph_eng.forget(alice).removed

    assert removed["edges"] == 1 and removed["nodes"] == 1
    assert counts(graph_eng) == (2, 1)
    with pytest.raises(NotFound):
        graph_eng.neighbours("Alice")
    assert graph_eng.graph_context("Where does Alice work?") == []
    assert graph_eng.graph_context("Who works at Acme?") == ["Bob —works at→ Acme"]
    graph_eng.forget(bob)
    assert counts(graph_eng) == (0, 0)


def test_forgetting_a_document_removes_the_edges_of_its_chunks(graph_eng: Engine) -> None:
    now = time.time()
    with graph_eng.store.write() as con:
        doc = backends.execute(
            con, "INSERT INTO documents(uid, title, mime, content_hash, created_at, updated_at) "
            "VALUES ('doc_test', 'Org chart', 'text/plain', 'h', ?, ?) RETURNING id", (now, now)).fetchone()[0]
        backends.execute(con, "INSERT INTO chunks(uid, document_id, position, text, content_hash) "
                         "VALUES ('chk_test', ?, 0, 'Acme is based in Berlin.', 'c')", (doc,))
    (alice,) = remember_all(graph_eng, "Alice works at Acme.")
    report = graph_eng.extract_pending()
    assert report.processed == 2 and report.edges == 2
    view = graph_eng.neighbours("Acme")
    assert {e.text: e.sources for e in view.edges} == {
        "Alice —works at→ Acme": [alice], "Acme —is based in→ Berlin": ["chk_test"]}

    graph_eng.forget("doc_test")

    assert counts(graph_eng) == (2, 1)
    assert graph_eng.graph_context("Where does Alice work?") == ["Alice —works at→ Acme"]


def test_an_answer_that_never_fits_is_counted_and_does_not_block_the_queue(graph_eng: Engine,
                                                                          server: OllamaTestServer) -> None:
    remember_all(graph_eng, "Alice works at Acme.", "Acme is based in Berlin.")
    server.script(Reply(text="Sure! Alice works at Acme.", times=2))  # prose instead of JSON, twice
    report = graph_eng.extract_pending()
    assert report.processed == 2 and report.failed == 1 and report.edges == 1 and report.remaining == 0


def test_extraction_waits_without_a_language_model(eng: Engine, server: OllamaTestServer) -> None:
    remember_all(eng, "Alice works at Acme.")
    eng.settings.llm.provider = "none"
    report = eng.extract_pending()
    assert report.waiting and report.processed == 0 and report.remaining == 1
    assert "language model" in report.note
    assert any("wait for a language model" in n for n in eng.stats().notes)

    url = server.url
    server.close()  # configured, but nobody answers
    eng.settings.llm.provider, eng.settings.llm.host = "ollama", url
    eng.reset_llm()  # the router follows the new settings
    report = eng.extract_pending()
    assert report.waiting and report.remaining == 1 and "Ollama is not running" in report.note
    assert counts(eng) == (0, 0)


@pytest.mark.sqlite_only("the CLI opens the desktop profile's store")
def test_cli_graph_shows_the_neighbourhood(graph_eng: Engine, capsys: pytest.CaptureFixture[str]) -> None:
    remember_all(graph_eng, "Alice works at Acme.", "Acme is based in Berlin.")
    graph_eng.extract_pending()

    assert main(["graph", "Alice", "--hops", "2", "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["entity"] == "Alice" and {n["name"] for n in view["nodes"]} == {"Alice", "Acme", "Berlin"}
    assert all(e["sources"][0].startswith("mem_") for e in view["edges"])

    assert main(["graph", "Alice"]) == 0
    out = capsys.readouterr().out
    assert "Alice —works at→ Acme" in out and "Berlin" not in out

    assert main(["graph", "Nobody"]) == 1
    assert "Nothing in the knowledge graph" in capsys.readouterr().err
