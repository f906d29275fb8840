"""A search beside a backlog of rows waiting for their vectors: it leaves the backlog to the background embedder
(it used to embed 512 rows first: 15 s at 100,000 waiting), still finds by words what the vectors cannot yet,
and says how many memories hold its words."""

from __future__ import annotations

import time

from engine.memory_rules import content_hash
from engine.store import memories as memory_rows


def stored_unembedded(eng, n: int) -> None:
    """n memories straight into the rows, none embedded (as an import or another program leaves them)."""
    with eng.store.write() as con:
        for i in range(n):
            text = f"Seed note {i} for the allotment"
            memory_rows.insert(con, uid=f"mem_seed{i:05d}", kind="fact", text=text, chash=content_hash(text),
                               importance=0.5, now=time.time() - i, event_at=None, project=None, source="user",
                               meta=None, conversation_id=None, document_id=None, done=True, dedup_pending=False)


def test_a_search_leaves_a_backlog_to_the_backfill_and_finds_by_words(eng):
    stored_unembedded(eng, 300)
    eng.remember("The shed key is archived now", embed="none")
    eng.update(eng.list_memories(limit=1)[0].id, archived=True)
    eng.backfill.paused = True  # running, but not embedding: the backlog stays for the test to see
    eng.start_background()
    try:
        waiting = eng.space.pending()
        assert waiting >= 300
        hits = eng.recall("allotment", k=20, include_chunks=False)
        assert len(hits) == 20 and all("allotment" in h.text for h in hits)  # found by words, unembedded
        assert eng.space.pending() == waiting  # nothing embedded by the search itself
        assert eng.count_matches("allotment") == 300
        assert eng.count_matches("shed key") == 0 and eng.count_matches("shed key", include_archived=True) == 1
        assert eng.count_matches("allotment", kind="episodic") == 0
    finally:
        eng.stop_background()


def test_without_a_backfill_a_search_embeds_what_waits_first(eng):
    stored_unembedded(eng, 10)
    assert eng.space.pending() == 10
    eng.recall("allotment", k=5, include_chunks=False)
    assert eng.space.pending() == 0


def test_a_search_while_the_model_loads_in_the_background_answers_by_words_at_once(profile_home):
    """The app's first search came while the background was still loading the model (a first start builds and
    checks its runtime): it waited for the whole load, 5-20 s. Now it answers by words at once, and finds by
    meaning too once the model is loaded."""
    import threading

    from engine import Engine
    from engine.embeddings import Embedder
    from engine.onnx_minilm import load_runtime

    gate = threading.Event()

    def held(path, **given):
        gate.wait(90)  # the real model's load, held as long as the test needs: a slow first start
        return load_runtime(path, **given)

    e = Engine.open(profile_home, embedder=Embedder(runtime=held))
    search: threading.Thread | None = None
    try:
        stored_unembedded(e, 300)
        e.start_background()
        assert e.embedding_status()[0] == "loading"
        answer: dict = {}
        search = threading.Thread(target=lambda: answer.update(hits=e.recall("allotment", k=20,
                                                                              include_chunks=False)))
        search.start()
        search.join(30)
        assert not search.is_alive(), "the search waited for the model's load"
        hits = answer["hits"]
        assert len(hits) == 20 and all(h.via == ["fts"] and "allotment" in h.text for h in hits)
        gate.set()
        assert e.space.embedder.wait_ready(120)
        spare = e.remember("The spare key hangs on a hook by the back door").id
        hits = e.recall("where is the extra key kept", k=5, include_chunks=False)
        assert any(h.id == spare and "vector" in h.via for h in hits)  # meaning joins once loaded
    finally:
        gate.set()
        if search is not None:
            search.join(120)
        e.stop_background()
        e.close()
