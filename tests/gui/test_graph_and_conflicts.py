"""The Graph page (an entity's relations, a fact's sources, forgetting a source with undo) and the Conflicts
page (keep one, keep both), on a real store whose facts and contradictions come from the real `ollama`
client talking to the scripted server of tests/ollama_server.py."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from PySide6.QtCore import Qt

from desktop.main_window import PAGES
from tests.gui.conftest import engine_of, wait_idle
from tests.ollama_server import OllamaTestServer, Reply

TRIPLES = {
    "Alice works at Acme.": [("Alice", "works at", "Acme", "person", "organization")],
    "Acme is based in Berlin.": [("Acme", "is based in", "Berlin", "organization", "place")],
    "Alice plays chess with Bob.": [("Alice", "plays chess with", "Bob", "person", "person")],
    "Carol lives in Lisbon.": [("Carol", "lives in", "Lisbon", "person", "place")],
    "Carol lives in Porto.": [("Carol", "lives in", "Porto", "person", "place")],
    "Dan works at Initech.": [("Dan", "works at", "Initech", "person", "organization")],
    "Dan works at Globex.": [("Dan", "works at", "Globex", "person", "organization")],
    "Eve founded Hooli in 2019.": [("Eve", "founded", "Hooli", "person", "organization")],
    "Eve mentors Alice.": [("Eve", "mentors", "Alice", "person", "person")],
}
CONTRADICTIONS = (("Lisbon", "Porto"), ("Initech", "Globex"))


def reply(request: dict[str, Any]) -> Reply:
    title = request["format"]["title"]
    prompt = request["messages"][-1]["content"]
    if title == "TripleExtraction":
        found = [t for text, ts in TRIPLES.items() if text in prompt for t in ts]
        return Reply(json={"triples": [dict(zip(("subject", "relation", "object", "subject_type", "object_type"),
                                                t, strict=True)) for t in found]})
    if title == "ContradictionVerdict":
        return Reply(json={"contradicts": any(a in prompt and b in prompt for a, b in CONTRADICTIONS)})
    return Reply(json={"facts": []})


@pytest.fixture
def llm_app(desktop) -> Iterator[Any]:
    with OllamaTestServer(models=["llama3.2"], reply_fn=reply) as server:
        eng = engine_of(desktop)
        eng.settings.llm.provider = "ollama"
        eng.settings.llm.host = server.url
        eng.reset_llm()
        yield desktop


def test_the_graph_shows_an_entitys_relations_and_an_edge_leads_to_its_source_which_can_be_forgotten(qtbot, llm_app):
    eng = engine_of(llm_app)
    ids = {t: eng.remember(t).id for t in ("Alice works at Acme.", "Acme is based in Berlin.",
                                           "Alice plays chess with Bob.")}
    assert eng.extract_pending().edges == 3
    w = llm_app.window
    w.show_page("graph")
    page = w.graph
    page.resize(1200, 700)
    qtbot.waitUntil(lambda: page.starts.count() == 4)  # the best-connected entities to start from
    assert page.starts.item(0).text().startswith("Acme") or page.starts.item(0).text().startswith("Alice")
    assert page.sources_panel.isHidden()  # no fact shown yet: nothing to choose, no "Choose a fact…"

    page.search.setText("alice")
    qtbot.keyClick(page.search, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: page.facts.topLevelItemCount() == 2)
    facts = {page.facts.topLevelItem(i).text(0) for i in range(2)}
    assert facts == {"Alice —works at→ Acme", "Alice —plays chess with→ Bob"}
    assert not page.sources_panel.isHidden()
    page.hops.setCurrentIndex(1)  # 2 hops reaches Berlin through Acme
    qtbot.waitUntil(lambda: page.facts.topLevelItemCount() == 3)

    works = next(f for f in page._facts if f.rel == "works at")
    qtbot.waitUntil(lambda: page.canvas.fact_at(works.index) is not None)
    qtbot.mouseClick(page.canvas.viewport(), Qt.MouseButton.LeftButton, pos=page.canvas.fact_at(works.index).toPoint())
    qtbot.waitUntil(lambda: len(page.cards) == 1 and page.cards[0].text.text() == "Alice works at Acme.")
    assert "said Today" in page.cards[0].meta.text()

    qtbot.mouseClick(page.cards[0].forget, Qt.MouseButton.LeftButton)
    assert page.undo_bar.isVisible() and page.facts.topLevelItemCount() == 2  # hidden at once
    qtbot.mouseClick(page.undo_bar.undo, Qt.MouseButton.LeftButton)
    assert page.facts.topLevelItemCount() == 3
    wait_idle(qtbot, llm_app)
    qtbot.wait(600)  # longer than the undo window: nothing was forgotten
    assert eng.get(ids["Alice works at Acme."]).text == "Alice works at Acme."

    page.select_fact(works.index)
    qtbot.waitUntil(lambda: len(page.cards) == 1 and page.cards[0].forget.isEnabled())
    qtbot.mouseClick(page.cards[0].forget, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: eng.stats().memories == 2, timeout=5000)  # forgotten when the undo window closed
    qtbot.waitUntil(lambda: page.facts.topLevelItemCount() == 1)  # Berlin is no longer reachable
    assert page.facts.topLevelItem(0).text(0) == "Alice —plays chess with→ Bob"


def test_conflicts_keep_one_archives_the_other_and_keep_both_unflags_the_pair(qtbot, llm_app):
    eng = engine_of(llm_app)
    now = datetime.now(UTC)
    lisbon = eng.remember("Carol lives in Lisbon.", at=now - timedelta(days=20)).id
    porto = eng.remember("Carol lives in Porto.", at=now - timedelta(days=5)).id
    initech = eng.remember("Dan works at Initech.").id
    globex = eng.remember("Dan works at Globex.").id
    report = eng.consolidate()
    assert len(report.conflicts) == 2
    w = llm_app.window
    w.show_page("conflicts")
    page = w.conflicts
    page.refresh()
    qtbot.waitUntil(lambda: len(page.cards) == 2)
    # the sidebar and the status bar count the same pairs the page shows
    sidebar = w.sidebar.item([key for _label, key in PAGES].index("conflicts"))
    qtbot.waitUntil(lambda: sidebar.text() == "Conflicts (2)")
    w._refresh_counts()
    qtbot.waitUntil(lambda: "2 to resolve" in w.status.count.text())
    card = next(c for c in page.cards if {c.pair.a.id, c.pair.b.id} == {lisbon, porto})
    assert card.older.uid == lisbon and card.newer.uid == porto
    assert card.older.meta.text().startswith("Older · said ") and card.newer.meta.text().startswith("Newer · said ")
    said_older = (now - timedelta(days=20)).astimezone()
    assert f"{said_older.day} {said_older:%b %Y}" in card.older.meta.text()

    qtbot.mouseClick(card.newer.keep, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(page.cards) == 1)
    assert eng.get(lisbon).archived and not eng.get(porto).archived and eng.get(porto).conflict_with is None

    qtbot.mouseClick(page.cards[0].both, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.stack.currentWidget() is page.empty)
    for uid in (initech, globex):
        m = eng.get(uid)
        assert not m.archived and m.conflict_with is None
    assert eng.conflicts() == []
    assert len(eng.consolidate().conflicts) == 0  # keep both: not flagged again


def test_the_graph_around_a_memory_and_a_passage_behind_a_fact_whose_document_can_be_forgotten(qtbot, llm_app):
    eng = engine_of(llm_app)
    mentor = eng.remember("Eve mentors Alice.").id
    eng.remember("Alice works at Acme.")
    doc = eng.ingest_text("Company history. Eve founded Hooli in 2019.", "Hooli notes")
    assert eng.extract_pending().edges == 3
    w = llm_app.window
    w.show_page("graph")
    page = w.graph
    page.resize(1200, 700)

    page.search.setText("who mentors")  # names no entity: memories with these words are offered
    qtbot.keyClick(page.search, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: page.start_title.text().startswith("Memories matching") and page.starts.count() >= 1)
    item = next(page.starts.item(i) for i in range(page.starts.count())
                if page.starts.item(i).data(Qt.ItemDataRole.UserRole) == ("memory", mentor))
    page._start_chosen(item)
    qtbot.waitUntil(lambda: page.facts.topLevelItemCount() == 3)  # 1 hop from Eve and Alice, whom it names
    assert {page.facts.topLevelItem(i).text(0) for i in range(3)} == {
        "Eve —mentors→ Alice", "Alice —works at→ Acme", "Eve —founded→ Hooli"}
    assert "the memory you chose" in page.facts.headerItem().text(0)

    page.show_entity("Hooli")
    qtbot.waitUntil(lambda: page.facts.topLevelItemCount() == 1)
    page.select_fact(page._facts[0].index)
    qtbot.waitUntil(lambda: len(page.cards) == 1 and page.cards[0].target == doc.document_id)
    card = page.cards[0]
    assert card.meta.text() == "Passage from “Hooli notes” · paragraph 1" and "Eve founded Hooli" in card.text.text()
    assert card.forget.text() == "Forget document" and not card.open.isVisible()
    qtbot.mouseClick(card.forget, Qt.MouseButton.LeftButton)
    assert page.facts.topLevelItemCount() == 0
    qtbot.waitUntil(lambda: eng.list_documents() == [], timeout=5000)
    qtbot.waitUntil(lambda: page.middle.currentWidget() is page.empty)  # Hooli is gone with its document


def test_an_empty_graph_shows_its_message_alone(qtbot, desktop):
    """With no facts yet the page said "Choose a fact to see the memories…" under the empty message, with the
    grips of two splitters floating on an empty page."""
    w = desktop.window
    w.resize(800, 600)
    w.show()
    w.show_page("graph")
    page = w.graph
    qtbot.waitUntil(lambda: page.middle.currentWidget() is page.empty and page.isVisible())
    assert "empty so far" in page.empty.title.text()
    assert not page.sources_panel.isVisible() and not page.source_title.isVisible()
    assert all(not page.inner.handle(i).isVisible() for i in range(1, page.inner.count()))
