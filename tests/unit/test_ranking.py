"""Pure ranking functions: normalisation, the hybrid similarity, conversation context, the floor."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from engine import ranking, relevance


def test_recency_halves_each_half_life():
    now = 1_000_000_000.0
    assert ranking.recency(now, now) == 1.0
    assert ranking.recency(now - 30 * ranking.DAY, now) == pytest.approx(0.5)
    assert ranking.recency(now + ranking.DAY, now) == 1.0
    assert ranking.recency(None, now) == 0.0


def test_final_score_is_the_specified_formula():
    assert ranking.final_score(1.0, 0.5, 0.25) == pytest.approx(0.6 + 0.1 + 0.05)


def test_bm25_idf_matches_fts5_and_never_goes_negative():
    assert ranking.bm25_idf(100, 1) == pytest.approx(math.log(99.5 / 1.5))
    assert ranking.bm25_idf(100, 90) == 1e-6  # a word in most rows carries no weight
    # a cached frequency from before deletes can exceed today's row count: no math domain error
    assert ranking.bm25_idf(10, 15) == 1e-6
    assert ranking.bm25_idf(0, 3) == 1e-6


def test_lexical_ratio_and_dense_strength_are_absolute():
    assert ranking.lexical_ratio(3.0, 6.0) == 0.5
    assert ranking.lexical_ratio(3.0, 0.0) == 0.0
    assert ranking.dense_strength(None) == 0.0
    assert ranking.dense_strength(ranking.COS_NONE - 0.1) == 0.0
    assert ranking.dense_strength(ranking.COS_FULL + 0.1) == 1.0
    mid = (ranking.COS_NONE + ranking.COS_FULL) / 2
    assert ranking.dense_strength(mid) == pytest.approx(0.5)


def test_min_max():
    assert ranking.min_max({}) == {}
    assert ranking.min_max({"a": 2.0, "b": 4.0, "c": 3.0}) == {"a": 0.0, "b": 1.0, "c": 0.5}
    assert ranking.min_max({"a": 0.3, "b": 0.3}) == {"a": 1.0, "b": 1.0}


def test_context_adds_the_best_weighted_neighbour():
    scores = {"q": 1.0, "a": 0.1, "far": 0.0}
    near = {"a": {-1: "q"}, "far": {-2: "q"}, "q": {1: "a", 2: "far"}}
    out = ranking.with_context(scores, near)
    assert out["a"] == pytest.approx(0.1 + ranking.NEIGHBOUR_WEIGHTS[1])
    assert out["far"] == pytest.approx(ranking.NEIGHBOUR_WEIGHTS[2])
    assert out["q"] == pytest.approx(1.0 + ranking.NEIGHBOUR_WEIGHTS[1] * 0.1)


def test_an_answer_inherits_more_of_the_question_it_follows():
    scores = {"q": 1.0, "a": 0.1, "next": 0.1}
    near = {"a": {-1: "q"}, "q": {1: "a"}, "next": {-1: "a"}}
    out = ranking.with_context(scores, near, asks={"q"})
    assert out["a"] == pytest.approx(0.1 + ranking.ANSWER_WEIGHT)
    assert ranking.ANSWER_WEIGHT > ranking.NEIGHBOUR_WEIGHTS[1]
    # only the turn right after the question; the question itself gains as before
    assert out["q"] == pytest.approx(1.0 + ranking.NEIGHBOUR_WEIGHTS[1] * 0.1)
    assert out["next"] == pytest.approx(0.1 + ranking.NEIGHBOUR_WEIGHTS[1] * 0.1)


def test_rrf_scales_rank_one_everywhere_to_one():
    fused = ranking.rrf([["a", "b"], ["a", "c"]])
    assert fused["a"] == pytest.approx(1.0)
    assert fused["b"] < 1.0 and fused["c"] < 1.0


def test_hybrid_similarity_orders_by_both_signals():
    keys = ["both", "words", "meaning", "none"]
    lex = {"both": 1.0, "words": 0.9}
    cos = {"both": 0.7, "words": 0.2, "meaning": 0.65, "none": 0.05}
    sims = ranking.hybrid_similarity(keys, lex, cos)
    assert max(sims, key=sims.get) == "both"
    assert sims["both"] == pytest.approx(1.0 * ranking.W_LEXICAL + ranking.dense_strength(0.7) * (1 - ranking.W_LEXICAL))
    assert sims["none"] <= ranking.ABSOLUTE_MARGIN
    assert all(0.0 <= s <= 1.0 for s in sims.values())


def test_hybrid_similarity_does_not_inflate_junk_in_a_small_store():
    """Nothing relevant: min-max would make the best of the junk look perfect; the similarity stays low."""
    keys = ["a", "b", "c"]
    sims = ranking.hybrid_similarity(keys, {}, {"a": 0.12, "b": 0.05, "c": 0.02})
    assert max(sims.values()) < relevance.MIN_HIT_RELEVANCE


def test_hybrid_similarity_lexical_only_uses_full_weight():
    sims = ranking.hybrid_similarity(["a", "b"], {"a": 1.2, "b": 0.3}, {}, use_dense=False)
    assert sims["a"] == pytest.approx(1.0)
    assert sims["b"] == pytest.approx(0.3 / 1.2)  # its share of the best, times the best (1.0)


def test_hybrid_similarity_context_lifts_a_reply():
    keys = ["question", "reply", "other"]
    lex = {"question": 1.0, "other": 0.5}
    cos = {"question": 0.6, "reply": 0.2, "other": 0.3}
    plain = ranking.hybrid_similarity(keys, lex, cos)
    ctx = ranking.hybrid_similarity(keys, lex, cos, neighbours={"reply": {-1: "question"}, "question": {1: "reply"}})
    assert ctx["reply"] > plain["reply"]


@dataclass
class _H:
    similarity: float


def test_floor():
    assert relevance.top_relevance([]) == 0.0
    assert not relevance.answerable([])
    assert relevance.top_relevance([_H(0.2), _H(0.7)]) == 0.7
    assert relevance.answerable([_H(relevance.ANSWER_FLOOR)])
    assert not relevance.answerable([_H(relevance.ANSWER_FLOOR - 0.01)])
    assert relevance.MIN_HIT_RELEVANCE > ranking.ABSOLUTE_MARGIN
    assert relevance.MIN_HIT_RELEVANCE < relevance.ANSWER_FLOOR


def test_graph_links_reorder_but_do_not_raise_the_level():
    keys = ["a", "b"]
    lex = {"a": 0.6, "b": 0.55}
    cos = {"a": 0.5, "b": 0.5}
    plain = ranking.hybrid_similarity(keys, lex, cos)
    linked = ranking.hybrid_similarity(keys, lex, cos, graph=ranking.graph_strength(["b"]))
    assert plain["a"] > plain["b"] and linked["b"] > linked["a"]
    assert max(linked.values()) <= max(plain.values()) + ranking.W_GRAPH + 1e-9
    alone = ranking.hybrid_similarity(["g"], {}, {"g": 0.1}, graph={"g": 1.0})  # linked, nothing else
    assert relevance.MIN_HIT_RELEVANCE <= alone["g"] < relevance.ANSWER_FLOOR
    assert ranking.graph_strength(["x", "y"]) == {"x": 1.0, "y": pytest.approx(1 / 1.2)}
