"""Who said a conversation turn, and which speaker a question names (engine.store.sqlite.retrieval)."""

from __future__ import annotations

from engine.terms import named_speakers, speaker, voice


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


def test_a_turn_speaks_of_its_speaker_of_the_listener_or_of_neither():
    assert voice("Lena: I made a risotto tonight.") == "self"
    assert voice("Lena: Mine was better, we agreed.") == "self"
    assert voice("Joe: Im tired, ive run 5 km") == "self"  # as typed in chats
    assert voice("Joe: I'm off") == "self"
    assert voice("Lena: You cook so well, what did you make?") == "you"
    assert voice("Lena: ur dog is so cute u know") == "you"
    assert voice("Lena: You asked, so I answered.") == "self"  # the speaker's own words count first
    assert voice("Lena: Sounds fun!") == "none"
    assert voice("Lena: Iris came over") == "none"  # a word starting with i is not "I"
    assert voice("I made a risotto tonight.") is None  # not a turn
