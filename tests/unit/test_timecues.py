"""Times named in questions (engine.timecues) and how they, importance and recency order hits (engine.ranking)."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from engine import ranking, timecues

# A fixed "now": Wednesday 2026-06-17, 15:00 local time.
NOW = time.mktime(datetime(2026, 6, 17, 15, 0).timetuple())


def day(y: int, m: int, d: int, h: int = 12) -> float:
    return time.mktime(datetime(y, m, d, h).timetuple())


@pytest.mark.parametrize(("question", "inside", "outside"), [
    ("What did I do yesterday?", day(2026, 6, 16), day(2026, 6, 17)),
    ("What did I buy today?", day(2026, 6, 17, 9), day(2026, 6, 16)),
    ("Where did we eat last May?", day(2026, 5, 20), day(2025, 5, 20)),
    ("Who did I meet in March?", day(2026, 3, 3), day(2026, 4, 3)),
    ("Which trips did I take in 2023?", day(2023, 8, 1), day(2024, 1, 2)),
    ("What did Kevin do on 23.01.2024?", day(2024, 1, 23), day(2024, 1, 24)),
    ("Where was she on 16/01/2024?", day(2024, 1, 16), day(2024, 1, 2)),
    ("Where was she on 01/16/2024?", day(2024, 1, 16), day(2024, 1, 2)),
    ("What happened two weeks ago?", day(2026, 6, 3), day(2026, 5, 1)),
    ("what did the vet say 3 days ago", day(2026, 6, 14), day(2026, 6, 1)),
    ("What did I plan last week?", day(2026, 6, 10), day(2026, 6, 16)),
    ("What did I read last month?", day(2026, 5, 31), day(2026, 6, 2)),
    ("Anything from last year about taxes?", day(2025, 11, 1), day(2026, 1, 5)),
    ("What did Anna say on 4 July 2025?", day(2025, 7, 4), day(2025, 7, 5, 13)),
    ("What happened on March 3rd, 2024?", day(2024, 3, 3), day(2024, 3, 4, 13)),
    ("What was due on 2024-02-29?", day(2024, 2, 29), day(2024, 3, 1, 13)),
    ("What did I cook last Monday?", day(2026, 6, 15), day(2026, 6, 8)),
    ("Which films did I watch in the past 3 months?", day(2026, 4, 1), day(2026, 2, 1)),
    ("What happened this week?", day(2026, 6, 15), day(2026, 6, 13)),
])
def test_a_named_time_is_a_window(question: str, inside: float, outside: float):
    c = timecues.cue(question, NOW)
    assert c is not None and c.window, question
    assert timecues.fit(inside, c) == 1.0, question
    assert timecues.fit(outside, c) < 1.0, question


@pytest.mark.parametrize("question", [
    "Who is my dentist?", "Where does Alice live?", "May I bring my dog to the office?",
    "How do I reset the router?", "Did Mark march in the parade?", "What is Jan's phone number?",
    "What's the capital of Mongolia's airport code?",
])
def test_no_time_no_cue(question: str):
    assert timecues.cue(question, NOW) is None


def test_a_numeric_date_that_could_be_either_way_is_only_its_year():
    c = timecues.cue("What happened on 05/06/2024?", NOW)
    assert c is not None and c.phrase == "2024"


def test_recent_and_first_prefer_an_end_of_the_timeline():
    assert timecues.cue("What did I paint recently?", NOW).prefer == "newest"
    assert timecues.cue("What is my latest job?", NOW).prefer == "newest"
    assert timecues.cue("When was the first time I went climbing?", NOW).prefer == "oldest"
    fits = timecues.order_fit({"a": 100.0, "b": 200.0, "c": None}, timecues.cue("latest news", NOW))
    assert fits == {"a": 0.0, "b": 1.0, "c": 0.0}


def test_fit_falls_off_outside_the_window():
    c = timecues.cue("what happened yesterday", NOW)
    near, far = timecues.fit(day(2026, 6, 14), c), timecues.fit(day(2026, 1, 1), c)
    assert 0 < far < near < 1
    assert timecues.fit(None, c) == 0.0


def test_a_clearly_less_relevant_hit_never_outranks_a_more_relevant_one():
    top = 0.8
    # the best possible boosts (importance 1, recency 1) against none at all
    strong = ranking.ranked_score(0.8, 0.0, 0.0, top)
    for weaker in (0.7, 0.6, 0.3):  # more than BOOST_BAND * top behind
        assert ranking.ranked_score(weaker, 1.0, 1.0, top) < strong
    # within the band, importance and recency decide
    assert ranking.ranked_score(0.78, 0.9, 1.0, top) > ranking.ranked_score(0.8, 0.3, 0.0, top)
    # the band scales with the query: at a weak top hit it is as narrow in proportion
    assert ranking.ranked_score(0.25, 1.0, 1.0, 0.3) < ranking.ranked_score(0.3, 0.0, 0.0, 0.3)


def test_the_gate_keeps_seed_003s_proportions():
    top = 1.0
    g = ranking.boost_gate(top)
    s = ranking.ranked_score(0.5, 0.4, 0.7, top)
    assert s == pytest.approx(0.6 * 0.5 + g * (0.2 * 0.4 + 0.2 * 0.7))
    assert 0.4 * g == pytest.approx(0.6 * ranking.BOOST_BAND * top)


def test_a_time_fit_reorders_but_no_cue_changes_nothing():
    assert ranking.ranked_score(0.7, 0.5, 0.2, 0.8, None) == ranking.ranked_score(0.7, 0.5, 0.2, 0.8)
    assert ranking.ranked_score(0.6, 0.5, 0.0, 0.8, 1.0) > ranking.ranked_score(0.7, 0.5, 0.0, 0.8, 0.0)
    # all candidates equally (un)fit: the order is that of relevance
    assert ranking.ranked_score(0.7, 0.5, 0.0, 0.8, 0.0) > ranking.ranked_score(0.6, 0.5, 0.0, 0.8, 0.0)


def test_citations_in_an_answer():
    from engine.ask import cited

    assert cited("Alice lives in Lisbon [1]. She moved in 2021 [3][4].") == {1, 3, 4}
    assert cited("See [2, 5] and [6-8].") == {2, 5, 6, 7, 8}
    assert cited("It cost 120 euros in 2023.") == set()
