"""A search beside a backlog of rows waiting for their vectors: it leaves the backlog to the background embedder
(it used to embed 512 rows first: 15 s at 100,000 waiting), still finds by words what the vectors cannot yet,
and says how many memories hold its words."""

from __future__ import annotations

import threading
import time

from engine.embeddings import Embedder
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


def held_model() -> tuple[threading.Event, Embedder]:
    """The real model, its load held until the event is set: a slow first start."""
    from engine.onnx_minilm import load_runtime

    gate = threading.Event()

    def held(path, **given):
        gate.wait(90)
        return load_runtime(path, **given)

    return gate, Embedder(runtime=held)


def closed(e, gate: threading.Event, search: threading.Thread | None) -> None:
    gate.set()
    if search is not None:
        search.join(120)
    e.stop_background()
    e.close()


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
    from engine import Engine

    gate, embedder = held_model()
    e = Engine.open(profile_home, actor="desktop", embedder=embedder)
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
        closed(e, gate, search)


def test_a_client_of_the_api_waits_for_the_model_and_gets_the_answer_by_meaning(profile_home):
    """A question through the HTTP API, MCP or the CLI (not the app's search as the user types) waits for the
    model's load instead of answering by words alone: the same answer it gets a second later."""
    from engine import Engine

    gate, embedder = held_model()
    with Engine.open(profile_home) as first:  # stored with its vector, by a process that loaded the model
        spare = first.remember("The spare key hangs on a hook by the back door").id
    e = Engine.open(profile_home, actor="api", embedder=embedder)
    search: threading.Thread | None = None
    try:
        e.start_background()
        assert e.embedding_status()[0] == "loading"
        answer: dict = {}
        search = threading.Thread(target=lambda: answer.update(
            hits=e.recall("where is the extra key kept", k=5, include_chunks=False)))
        search.start()
        search.join(3)
        assert search.is_alive(), "the question was answered before the model it needs had loaded"
        gate.set()
        search.join(120)
        assert not search.is_alive()
        assert any(h.id == spare and "vector" in h.via for h in answer["hits"]), [(h.id, h.via) for h in answer["hits"]]
    finally:
        closed(e, gate, search)


class Counting(Embedder):
    """The bundled model, counting the texts it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0
        self._count = threading.Lock()

    def encode(self, texts, **kw):
        with self._count:
            self.texts += len(texts)
        return super().encode(texts, **kw)


def test_two_embedders_of_one_backlog_take_turns_instead_of_embedding_it_twice(profile_home):
    """The backfill, a recall catching up and an ingest may embed the waiting rows at once: each row is
    embedded once (each used to take the same rows, and every one was embedded twice at half speed)."""
    from engine import Engine

    counting = Counting()
    counting.load()
    eng = Engine.open(profile_home, actor="sdk", embedder=counting)
    try:
        stored_unembedded(eng, 120)
        start = threading.Barrier(2)
        done: list[int] = []

        def embed() -> None:
            start.wait()
            done.append(eng.space.embed_pending())

        threads = [threading.Thread(target=embed) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert eng.space.pending() == 0 and sum(done) == 120
        assert counting.texts == 120
    finally:
        eng.close()


def test_a_search_does_not_wait_long_for_the_batch_the_backfill_is_embedding(eng):
    """A few rows wait, and another thread is embedding them (the backfill, in the middle of its batch): a
    search waits at most a second for a few rows (a note just stored), not at all for a batch of more, then
    answers by words (it used to embed the same rows again, or wait the whole batch: minutes on a server's
    busy machine)."""
    stored_unembedded(eng, 20)
    eng.start_background()
    eng.backfill.paused = True
    try:
        for in_hand, least, most in ((5, 0.9, 10.0), (20, 0.0, 0.9)):
            held = threading.Event()
            release = threading.Event()

            def backfill_batch(n: int = in_hand, held: threading.Event = held,
                               release: threading.Event = release) -> None:  # as the backfill, its batch in hand
                with eng.space._filling:
                    eng.space._in_hand = n
                    held.set()
                    release.wait(30)
                    eng.space._in_hand = 0

            t = threading.Thread(target=backfill_batch)
            t.start()
            held.wait(10)
            t0 = time.perf_counter()
            hits = eng.recall("allotment", k=5, include_chunks=False)
            took = time.perf_counter() - t0
            release.set()
            t.join()
            assert len(hits) == 5 and eng.space.pending() == 20  # found by words, nothing embedded twice
            assert least < took < most, (in_hand, took)
    finally:
        eng.stop_background()


def test_the_first_recall_of_a_process_finds_by_meaning_what_was_stored_before_the_model_loaded(profile_home):
    """A memory stored while the process had no model loaded waits for its vector; the first recall used to
    check for such rows before its own question loaded the model, so it searched the vectors without them and
    found nothing ("the spare key" has one word in common with the question, which in a store of one memory
    weighs nothing): only the second recall found it."""
    from engine import Engine

    with Engine.open(profile_home) as e:
        spare = e.remember("The spare key hangs on a hook by the back door").id
        assert e.space.pending() == 1  # stored before any model was loaded in this process
        hits = e.recall("where is the extra key kept", k=5, include_chunks=False)
        assert [h.id for h in hits] == [spare] and "vector" in hits[0].via
    with Engine.open(profile_home, one_shot=True) as e:  # a CLI command's process, as `personal-llm recall`
        assert e.space.pending() == 0
        hits = e.recall("where is the extra key kept", k=5, include_chunks=False)
        assert [h.id for h in hits] == [spare] and "vector" in hits[0].via


def test_a_one_shot_process_embeds_a_few_waiting_rows_with_its_question_but_leaves_a_backlog(profile_home):
    from engine import Engine

    with Engine.open(profile_home) as e:
        stored_unembedded(e, 10)
    with Engine.open(profile_home, one_shot=True) as e:
        e.recall("allotment", k=5, include_chunks=False)
        assert e.space.pending() == 0
        stored_unembedded_more = 200
        with e.store.write() as con:
            for i in range(stored_unembedded_more):
                text = f"Later note {i} about the greenhouse"
                memory_rows.insert(con, uid=f"mem_late{i:05d}", kind="fact", text=text, chash=content_hash(text),
                                   importance=0.5, now=time.time() - i, event_at=None, project=None,
                                   source="user", meta=None, conversation_id=None, document_id=None, done=True,
                                   dedup_pending=False)
        hits = e.recall("greenhouse", k=5, include_chunks=False)
        assert len(hits) == 5  # found by words
        assert e.space.pending() == stored_unembedded_more  # a backlog is not a CLI command's to embed
