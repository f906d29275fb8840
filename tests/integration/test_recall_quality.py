"""Recall quality on a small store this test writes: the right memory comes first, conversation context
lifts a terse reply, and a question about something absent is refused (real model, real encrypted file)."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest

from engine import ranking, relevance, store
from engine.recall import QuestionVectors
from tests import backends

FACTS = [
    "My sister Anna lives in Lisbon and works as a marine biologist.",
    "I am allergic to penicillin; the reaction was a rash in 2019.",
    "Our wifi password at the cabin is written on the fridge.",
    "I prefer aisle seats on long flights.",
    "The dentist appointment is every March with Dr. Okafor.",
]


def test_the_right_fact_comes_first(eng):
    for text in FACTS:
        eng.remember(text, embed="sync")
    cases = {
        "Which antibiotic am I allergic to?": FACTS[1],
        "Where does my sister live?": FACTS[0],
        "What seat do I like on a plane?": FACTS[3],
        "When do I see the dentist?": FACTS[4],
    }
    for question, want in cases.items():
        hits = eng.recall(question, k=3, record_access=False)
        assert hits and hits[0].text == want, question
        assert relevance.answerable(hits), question


def test_a_question_asked_again_is_not_encoded_again_and_finds_the_same(eng, monkeypatch):
    """The app searches its list again after every change and clients repeat themselves: a question's vector
    is kept (by its text, for this model), so asking again costs no encoding and gives the same hits, on the
    helper thread's path and on the recall's own."""
    for text in FACTS:
        eng.remember(text, embed="sync")
    encoded: list[str] = []
    encode_one = eng.embedder.encode_one

    def counted(text):
        encoded.append(text)
        return encode_one(text)

    monkeypatch.setattr(eng.embedder, "encode_one", counted)
    question = "Which antibiotic am I allergic to?"
    first = eng.recall(question, k=5, record_access=False)
    again = eng.recall(question, k=5, record_access=False)
    assert encoded == [question]
    assert first[0].text == FACTS[1]
    assert [(h.id, h.similarity, h.cosine, h.score) for h in first] == [(h.id, h.similarity, h.cosine, h.score)
                                                                        for h in again]
    eng.recall("Where does my sister live?", k=5, record_access=False)
    assert encoded == [question, "Where does my sister live?"]  # another question is encoded
    monkeypatch.setattr(eng.embedder, "encode_one_soon", lambda text: None)  # the recall encodes by itself
    eng.recall("What seat do I like on a plane?", k=5, record_access=False)
    eng.recall("What seat do I like on a plane?", k=5, record_access=False)
    assert encoded.count("What seat do I like on a plane?") == 1


def test_kept_question_vectors_are_the_models_own_read_only_and_bounded():
    asked = QuestionVectors()
    model, other = object(), object()
    v = np.arange(4, dtype=np.float32)
    kept = asked.put(model, "q", v)
    v[0] = 9.0  # the caller's array changing does not change what is kept
    assert asked.get(model, "q")[0] == 0.0 and asked.get(other, "q") is None  # another model's: not these
    with pytest.raises(ValueError):
        kept[1] = 5.0
    asked.put(other, "r", v)  # a new model starts afresh
    assert asked.get(model, "q") is None and asked.get(other, "r") is not None
    for i in range(QuestionVectors.MOST + 1):
        asked.put(other, f"q{i}", v)
    assert asked.get(other, "r") is None and asked.get(other, "q0") is None  # the least recently asked go
    assert asked.get(other, f"q{QuestionVectors.MOST}") is not None
    from concurrent.futures import Future

    failed: Future = Future()
    failed.set_exception(RuntimeError("the model went away"))
    asked.keep(other, "lost", failed)
    assert asked.get(other, "lost") is None


def test_a_recall_looks_its_words_up_while_its_question_is_encoded_beside_it(eng, monkeypatch):
    """The question's vector is made on another thread (another core) while the recall's own thread searches
    the words; the hits are those of a recall that encodes the question itself first."""
    import threading

    for text in FACTS:
        eng.remember(text, embed="sync")
    encoders = []
    encode_one = eng.embedder.encode_one

    def recorded(text):
        encoders.append(threading.current_thread())
        return encode_one(text)

    monkeypatch.setattr(eng.embedder, "encode_one", recorded)
    question = "Which antibiotic am I allergic to?"
    beside = eng.recall(question, k=5, record_access=False)
    assert encoders and threading.current_thread() not in encoders
    assert beside[0].text == FACTS[1]
    monkeypatch.setattr(eng.embedder, "encode_one_soon", lambda text: None)
    eng.retrieval.asked = QuestionVectors()  # not the vector kept from the first recall: encoded again, here
    itself = eng.recall(question, k=5, record_access=False)
    assert encoders[-1] is threading.current_thread()
    assert [(h.id, h.similarity, h.cosine, h.via) for h in beside] == [(h.id, h.similarity, h.cosine, h.via)
                                                                       for h in itself]


def test_nothing_relevant_is_refused(eng):
    for text in FACTS:
        eng.remember(text, embed="sync")
    for question in ("What is the capital of Mongolia's airport code?", "How do I compile a Rust crate for ARM?"):
        hits = eng.recall(question, k=5, record_access=False)
        assert not relevance.answerable(hits), (question, [(h.text, h.similarity) for h in hits])
        assert all(h.similarity >= relevance.MIN_HIT_RELEVANCE for h in hits)


def test_conversation_context_lifts_a_terse_reply(eng):
    t0 = datetime(2024, 5, 8, 13, 56)
    talk = [
        ("Sam", "Did you end up adopting that grey kitten from the shelter?"),
        ("Lee", "Yes! Brought her home on Saturday, she already owns the sofa."),
        ("Sam", "Ha, lovely. How is the new job going?"),
        ("Lee", "Busy, but the team is kind."),
    ]
    ids = [eng.remember(f"{who}: {text}", kind="episodic", project="chat", at=t0 + timedelta(minutes=i),
                        embed="sync").id for i, (who, text) in enumerate(talk)]
    for i in range(12):  # unrelated turns of another day
        eng.remember(f"Lee: note {i} about groceries and the weather", kind="episodic", project="chat",
                     at=t0 + timedelta(days=3, minutes=i), embed="sync")
    hits = eng.recall("Did Lee adopt the kitten?", k=3, project="chat", record_access=False)
    top = [h.id for h in hits]
    assert ids[0] in top and ids[1] in top  # the reply says "Yes!" and "her", not "kitten"


def test_project_scope_and_no_leak(eng):
    eng.remember("The launch code name is Bluebird.", project="work", embed="sync")
    eng.remember("Bluebird is the name of my neighbour's cat.", project="home", embed="sync")
    hits = eng.recall("What is Bluebird?", project="work", record_access=False)
    assert [h.project for h in hits] == ["work"]


def test_graph_signal_joins_recall_only_when_the_graph_has_edges(eng, monkeypatch):
    a = eng.remember("Alice works at Acme.", embed="sync")
    b = eng.remember("Acme is based in Berlin.", embed="sync")
    eng.remember("The cabin wifi password is on the fridge.", embed="sync")
    calls = []
    monkeypatch.setattr(type(eng.graph), "graph_keys", lambda self, q, hops=2, project=None: calls.append(q) or [])
    question = "In which city is Alice's employer?"
    hits = eng.recall(question, record_access=False)
    assert calls == [] and all("graph" not in h.via for h in hits)  # no edges: the graph is not consulted
    monkeypatch.undo()
    rows = dict(backends.rows(eng, "SELECT uid, id FROM memories"))
    with eng.store.write() as con:  # what extraction would write (tests/integration/test_graph.py does it for real)
        for name in ("Alice", "Acme", "Berlin"):
            backends.execute(con, "INSERT INTO nodes(name, norm_name, created_at) VALUES (?, ?, 0)", (name, name.lower()))
        node = dict(con.execute("SELECT norm_name, id FROM nodes").fetchall())
        for src, rel, dst, mem in (("alice", "works at", "acme", a.id), ("acme", "is based in", "berlin", b.id)):
            backends.execute(con, "INSERT INTO edges(src, rel, dst, memory_id, created_at) VALUES (?, ?, ?, ?, 0)",
                             (node[src], rel, node[dst], rows[mem]))
    assert eng.graph_keys(question) == [("m", rows[a.id]), ("m", rows[b.id])]
    via = {h.id: h.via for h in eng.recall(question, record_access=False)}
    assert "graph" in via[a.id] and "graph" in via[b.id]
    assert eng.recall(question, project="elsewhere", record_access=False) == []  # filters still apply


def _talk(eng, turns, project="chat", start=datetime(2024, 1, 6, 18, 0)):
    """Store "Speaker: text" turns one minute apart (a new day every 10 turns); their ids in order."""
    return [eng.remember(f"{who}: {text}", kind="episodic", project=project,
                         at=start + timedelta(days=i // 10, minutes=i), embed="sync").id
            for i, (who, text) in enumerate(turns)]


def test_a_question_naming_a_speaker_prefers_their_turns(eng):
    ids = _talk(eng, [
        ("Ravi", "I live in a flat right in the city centre, next to the station."),
        ("Noor", "We moved out to a quiet suburb last year, a house with a garden."),
        ("Ravi", "The city is loud but I can walk everywhere."),
        ("Noor", "The suburb is calm and the kids can play outside."),
    ])
    for name, mine, theirs in (("Noor", ids[1], ids[0]), ("Ravi", ids[0], ids[1])):
        top = [h.id for h in eng.recall(f"Where does {name} live, in the city or a suburb?", k=4, project="chat")]
        assert top.index(mine) < top.index(theirs), name


def test_what_a_speaker_says_of_themselves_comes_before_what_they_ask_the_other(eng):
    """A question about Lena is answered by what she tells of herself, not by her questions about the other's
    cooking, though those hold more of the question's words."""
    for project, turns, question in (
        ("dinner", [("Lena", "You cook so well, what did you cook for dinner tonight?"),
                    ("Lena", "I made a mushroom risotto tonight, my first one."),
                    ("Omar", "I burned the rice again.")], "What did Lena cook for dinner?"),
        ("books", [("Mia", "You read so many crime novels, which novel do you read next?"),
                   ("Mia", "My shelf is full of thrillers, I finish one a week on the train."),
                   ("Tom", "I finished a history book yesterday.")], "What novels does Mia read?"),
    ):
        ids = _talk(eng, turns, project=project)
        top = [h.id for h in eng.recall(question, k=3, project=project)]
        assert top[:2] == [ids[1], ids[0]], project


def test_turns_in_a_language_without_these_pronouns_keep_their_relevance(eng):
    """The voice of a turn is read only where some turn speaks in the first person: a conversation in another
    language is ranked as before."""
    german = _talk(eng, [("Lena", "Du kochst so gut, was hast du heute gekocht?"),
                         ("Omar", "Heute gab es ein Pilzrisotto, mein erstes."),
                         ("Lena", "Klingt lecker!")], project="de")
    english = _talk(eng, [("Lena", "You cook so well, what did you cook tonight?"),
                          ("Omar", "I made a mushroom risotto, my first one."),
                          ("Lena", "Sounds good!")], project="en")
    with eng.store.read() as con:
        def factors(ids):
            rids = [store.memories.by_uid(con, uid).id for uid in ids]
            found = eng.retrieval._speaker_factors(con, "What was cooked?", rids, {})
            return [found.get(r, 1.0) for r in rids]

        assert factors(german) == [1.0, 1.0, 1.0]
        assert factors(english) == [ranking.VOICE_FACTORS["you"], 1.0, ranking.VOICE_FACTORS["none"]]


def test_a_misspelled_speaker_name_still_names_the_speaker(eng):
    ids = _talk(eng, [
        ("Akib", "My home is in a small town by the river, far from any big city."),
        ("Muhhamed", "I live in a big city, on the ninth floor of a tower."),
        ("Akib", "Do you like it there?"),
        ("Muhhamed", "Yes, though the traffic is terrible."),
    ])
    for spelt in ("Mohammed", "Muhammad"):
        top = [h.id for h in eng.recall(f"Does {spelt} live in a big city or a small town?", k=4, project="chat")]
        assert top.index(ids[1]) < top.index(ids[0]), spelt
    top = [h.id for h in eng.recall("Does Akim live in a big city or a small town?", k=4, project="chat")]
    assert top.index(ids[0]) < top.index(ids[1])


def test_the_name_one_speaker_calls_the_other_names_that_speaker(eng):
    """Elise calls Emi "Kate": a question about Kate is about Emi's turns, not Elise's turns saying "Kate"."""
    ids = _talk(eng, [
        ("elise", "Hey Kate! How are you doing today?"),
        ("Emi", "Good! I spent the morning skiing, it's my favourite sport."),
        ("elise", "That sounds amazing Kate, you are so sporty."),
        ("Emi", "I also took a cooking class, I love making pasta."),
        ("elise", "What do you like to do on weekends Kate?"),
        ("Emi", "Hiking with my cousins, every weekend I can."),
        ("elise", "Thank you Kate, you always have good tips."),
        ("elise", "Any favourite hobby of yours I should try, Kate?"),
        ("elise", "I mostly paint and read on weekends."),
        ("Emi", "Painting sounds relaxing."),
    ])
    top = [h.id for h in eng.recall("What are Kate's hobbies?", k=4, project="chat")]
    emi = {ids[1], ids[3], ids[5], ids[9]}
    assert top[0] in emi or top[1] in emi, top
    assert ids[0] not in top and ids[6] not in top, top  # "Hey Kate!", "Thank you Kate": addressed, not about her


def test_a_question_naming_a_day_finds_what_was_said_that_day(eng):
    """Only the day ties the answer to the question: neither its words nor its meaning would make it a
    candidate among 80 chattier turns of other days."""
    start = datetime(2024, 1, 2, 19, 0)
    for i in range(80):
        eng.remember(f"Kevin: What did you do today? Anything fun planned for the weekend, number {i}?",
                     kind="episodic", project="chat", at=start + timedelta(days=i % 20, minutes=i), embed="sync")
    answer = eng.remember("Kevin: A long run along the river before work, 10 km.", kind="episodic",
                          project="chat", at=datetime(2024, 1, 23, 8, 0), embed="sync").id
    top = [h.id for h in eng.recall("What did Kevin do on 23.01.2024?", k=10, project="chat")]
    assert answer in top


def test_an_answer_turn_is_found_through_its_question(eng):
    """"Yes, every Sunday" says nothing about hiking; the question before it does."""
    turns = []
    for i in range(12):  # Sam's other questions and Lee's other answers, on other days
        turns += [("Sam", f"Did you watch the match on channel {i} last night?"),
                  ("Lee", f"No, I was out walking the dog around block {i}.")]
    turns += [("Sam", "Do you still go hiking in the mountains?"), ("Lee", "Yes, every Sunday with my brother.")]
    ids = _talk(eng, turns)
    top = [h.id for h in eng.recall("Who goes hiking every week?", k=3, project="chat")]
    assert top[0] == ids[-1], top
    hits = eng.recall("How often does someone go hiking?", k=3, project="chat")
    reply = next(h for h in hits if h.id == ids[-1])
    assert relevance.answerable([reply])  # relevant enough to answer from, through its question
