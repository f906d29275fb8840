"""Who said a conversation turn, and which speaker a question names (engine.store.sqlite.retrieval)."""

from __future__ import annotations

from engine.terms import named_speakers, speaker


def test_a_turn_names_its_speaker():
    assert speaker("Emi: I love skiing") == "emi"
    assert speaker("elise: hey!") == "elise"
    assert speaker("Mary Ann: we moved") == "mary ann"
    for text in ("I love skiing", "12:30 is lunch", "https://example.org", "Note to self : nothing", ""):
        assert speaker(text) is None, text


def test_a_question_names_a_speaker_even_spelt_otherwise():
    people = {"akib", "muhhamed"}
    assert named_speakers("Where does Akib live?", people) == {"akib"}
    assert named_speakers("When did Akim check the servers?", people) == {"akib"}
    assert named_speakers("Does Mohammed like games?", people) == {"muhhamed"}
    assert named_speakers("Does Muhammad like games?", people) == {"muhhamed"}
    assert named_speakers("What do Akib and Muhhamed share?", people) == people
    # lower case words and other names are not names of the speakers
    assert named_speakers("does a kite fly?", {"kate"}) == set()
    assert named_speakers("Where does Maria work?", people) == set()
