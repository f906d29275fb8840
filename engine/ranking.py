"""Ranking: a hybrid relevance from the lexical and semantic signals, then the engine's formula.

    score = 0.6 * similarity + gate * (0.2 * importance + 0.2 * recency)
    recency = 0.5 ** (days since the memory's time or last use / 30)
    gate = 1.5 * BOOST_BAND * (the best similarity of the query)

Relevance first: the gate caps what importance and recency can add at BOOST_BAND of the best hit's
similarity, so a hit more than that far behind in relevance never overtakes a better one because it is
newer, more important or was used (`ranked_score`); among hits of comparable relevance they decide, in
seed 003's proportions. A time the question names ("last May", "recently") scales the relevance used for
order by `time_factor` (engine/timecues.py).

`similarity` is a calibrated relevance in [0, 1] (see `hybrid_similarity`): 1.0 means the memory holds
every informative word of the question and is as close in meaning as a paraphrase; unrelated memories
score near 0 however small the store is. docs/retrieval.md has the measurements behind the constants.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable, Mapping, Set
from typing import TypeVar

K = TypeVar("K", bound=Hashable)  # a candidate's key, e.g. (table, row id)

W_SIMILARITY = 0.6
W_IMPORTANCE = 0.2
W_RECENCY = 0.2
HALF_LIFE_DAYS = 30.0
RRF_K = 60

# Hybrid relevance: the weight of the lexical signal (the semantic one gets the rest).
W_LEXICAL = 0.5
# all-MiniLM-L6-v2 cosine: unrelated sentences sit below COS_NONE, paraphrases reach COS_FULL.
COS_NONE = 0.15
COS_FULL = 0.75
# Cosines of the candidates are min-max scaled for order, but a spread narrower than this is not stretched
# to [0, 1]: in a small store two statements of the same thing (cosines 0.62 and 0.58) are comparably
# relevant, not "best" and "worst".
MIN_COS_SPREAD = 0.3
# A hit's similarity may exceed its own absolute relevance by at most this much (see hybrid_similarity).
ABSOLUTE_MARGIN = 0.1
# Conversation context: a turn inherits this share of its best neighbour's relevance (offset -> weight).
NEIGHBOUR_WEIGHTS = {1: 0.4, 2: 0.25}
# A turn right after a question ("Do you still go hiking?" -> "Yes, every Sunday") inherits this share of the
# question's relevance instead: it often means nothing without it.
ANSWER_WEIGHT = 0.7
# Knowledge graph: a memory linked to an entity named in the question gains up to this much, in order and in
# absolute relevance (modest: the graph is extracted by a language model, and a link says "about that
# entity", not "answers the question"; alone it stays below relevance.ANSWER_FLOOR).
W_GRAPH = 0.15

DAY = 86_400.0


def recency(t: float | None, now: float | None = None) -> float:
    """1.0 now, 0.5 after one half-life; future times count as now."""
    if t is None:
        return 0.0
    days = max(0.0, ((now or time.time()) - t) / DAY)
    return math.pow(0.5, days / HALF_LIFE_DAYS)


def rrf(ranked_lists: list[list], weights: list[float] | None = None, k: int = RRF_K) -> dict:
    """Reciprocal rank fusion scaled so that rank 1 in every list scores 1.0 (kept for comparisons)."""
    weights = weights or [1.0] * len(ranked_lists)
    best = sum(w / (k + 1) for w, lst in zip(weights, ranked_lists, strict=True) if lst) or 1.0
    fused: dict = {}
    for w, lst in zip(weights, ranked_lists, strict=True):
        for rank, key in enumerate(lst, start=1):
            fused[key] = fused.get(key, 0.0) + w / (k + rank)
    return {key: v / best for key, v in fused.items()}


def bm25_idf(n_docs: int, doc_freq: int) -> float:
    """FTS5's own IDF for a term (the weight bm25() gives one occurrence in an average-length row).

    A cached frequency can exceed the row count after deletes (see lexical.DocFreqs): it is clamped."""
    doc_freq = min(max(doc_freq, 0), max(n_docs, 0))
    return max(1e-6, math.log((n_docs - doc_freq + 0.5) / (doc_freq + 0.5)))


def lexical_ratio(bm25: float, idf_sum: float) -> float:
    """BM25 over the most a row of average length holding each query term once would score: the
    IDF-weighted share of the question's words the row holds (above 1 for short or repetitive rows)."""
    return max(0.0, bm25) / idf_sum if idf_sum > 0 else 0.0


def dense_strength(cosine: float | None) -> float:
    """Cosine mapped onto [0, 1]: 0 at or below COS_NONE, 1 at or above COS_FULL."""
    if cosine is None:
        return 0.0
    return min(1.0, max(0.0, (cosine - COS_NONE) / (COS_FULL - COS_NONE)))


def min_max(values: Mapping[K, float], min_spread: float = 0.0) -> dict[K, float]:
    """Scale to [0, 1] across the candidates (all equal: all 1.0 when positive, else 0.0). A spread narrower
    than `min_spread` is not stretched to the whole range: the best still scores 1, the others
    1 - (best - v) / min_spread."""
    if not values:
        return {}
    lo, hi = min(values.values()), max(values.values())
    if hi - lo <= 1e-12:
        return {k: (1.0 if hi > 0 else 0.0) for k in values}
    spread = max(hi - lo, min_spread)
    return {k: 1.0 - (hi - v) / spread for k, v in values.items()}


def with_context(scores: Mapping[K, float], neighbours: Mapping[K, Mapping[int, K]],
                 weights: Mapping[int, float] = NEIGHBOUR_WEIGHTS, asks: Set[K] = frozenset()) -> dict[K, float]:
    """Each score plus the best weighted score among its neighbours (offset -> key, offsets +-1, +-2):
    a reply like "Yes, last week!" inherits part of the relevance of the question it answers, and
    ANSWER_WEIGHT of it when the turn before it is a question (`asks`)."""
    out = dict(scores)
    for key, near in neighbours.items():
        best = 0.0
        for off, other in near.items():
            w = weights.get(abs(off), 0.0)
            if off == -1 and other in asks:
                w = max(w, ANSWER_WEIGHT)
            if w and other in scores:
                best = max(best, w * scores[other])
        if best:
            out[key] = out.get(key, 0.0) + best
    return out


def graph_strength(ranked: list) -> dict:
    """{key: strength in (0, 1]} for a graph list nearest first: 1 for the first, 1/2 at rank 5."""
    return {key: 1.0 / (1.0 + 0.2 * r) for r, key in enumerate(ranked)}


def hybrid_similarity(keys: list[K], lex_ratio: Mapping[K, float], cosine: Mapping[K, float], *,
                      neighbours: Mapping[K, Mapping[int, K]] | None = None,
                      graph: Mapping[K, float] | None = None, asks: Set[K] = frozenset(),
                      use_lexical: bool = True, use_dense: bool = True) -> dict[K, float]:
    """Similarity in [0, 1] for each candidate key.

    Order comes from a convex combination of per-query normalised signals (BM25 over the query's best,
    cosine min-max over the candidates), plus conversation context and the knowledge graph's links. Level comes from absolute signals:
    a hit's similarity is the order score scaled by the best absolute relevance of the query, and never
    more than ABSOLUTE_MARGIN above its own absolute relevance (with context), so nothing looks relevant
    only because the store is small.
    """
    if not keys:
        return {}
    w_lex = W_LEXICAL if (use_lexical and use_dense) else (1.0 if use_lexical else 0.0)
    w_den = 1.0 - w_lex
    top_lex = max((lex_ratio.get(k, 0.0) for k in keys), default=0.0)
    l_rel = {k: lex_ratio.get(k, 0.0) / top_lex if top_lex > 0 else 0.0 for k in keys}
    d_rel = min_max({k: cosine[k] for k in keys if k in cosine}, MIN_COS_SPREAD)
    rel = {k: w_lex * l_rel.get(k, 0.0) + w_den * d_rel.get(k, 0.0) for k in keys}
    if graph:
        rel = {k: v + W_GRAPH * graph.get(k, 0.0) for k, v in rel.items()}
    absolute = {k: w_lex * min(1.0, lex_ratio.get(k, 0.0)) + w_den * dense_strength(cosine.get(k)) for k in keys}
    if graph:  # linked to an entity the question names: a hit, though not enough to answer from on its own
        absolute = {k: min(1.0, v + W_GRAPH * graph.get(k, 0.0)) for k, v in absolute.items()}
    if neighbours:
        rel = with_context(rel, neighbours, asks=asks)
        absolute_ctx = with_context(absolute, neighbours, asks=asks)
    else:
        absolute_ctx = absolute
    best_rel = max(rel.values()) or 1.0
    best_abs = max(absolute.values())
    return {k: min(best_abs * rel[k] / best_rel, min(1.0, absolute_ctx[k] + ABSOLUTE_MARGIN)) for k in keys}


def final_score(similarity: float, importance: float, recency_value: float) -> float:
    """Seed 003's formula without the gate (kept for comparisons: bench/recall_drift.py)."""
    return W_SIMILARITY * similarity + W_IMPORTANCE * importance + W_RECENCY * recency_value


# The relevance of one of the app's own events ("Ingested X") to a question about activity at its time: enough
# to answer from (above relevance.ANSWER_FLOOR), below a memory that also matches the question's words.
ACTIVITY_RELEVANCE = 0.5
# Importance and recency together may move a hit by at most this share of the query's best similarity.
BOOST_BAND = 0.1
# A time named in the question: a memory whose time does not fit it keeps (1 - TIME_WEIGHT) of its relevance
# for order (its similarity, the absolute relevance shown and used by the answer floor, is unchanged).
TIME_WEIGHT = 0.3
# A question naming one speaker of a conversation: another speaker's turn keeps (1 - SPEAKER_WEIGHT) of its
# relevance for order.
SPEAKER_WEIGHT = 0.3
# What a conversation turn says of its speaker (terms.voice): a turn in the first person keeps its relevance for
# order, one that speaks of neither speaker keeps VOICE_FACTORS["none"] of it and one that speaks only of the
# person it talks to ("Your plan sounds great!", "How was your day?") VOICE_FACTORS["you"]. What people tell of
# themselves is what questions about them ask for: on the dev sets 83% (REALTALK) and 93% (LoCoMo) of the
# evidence turns of a question naming one speaker are in that speaker's first person, against 62% and 66% of
# their turns; 2-5% speak only of "you", against 15% and 22%.
VOICE_FACTORS = {"self": 1.0, "none": 0.95, "you": 0.75}


def boost_gate(top_similarity: float) -> float:
    """The factor on (0.2 importance + 0.2 recency): their most (0.4 * gate) is worth BOOST_BAND * top of
    similarity (0.6 * BOOST_BAND * top)."""
    return W_SIMILARITY * BOOST_BAND * max(0.0, top_similarity) / (W_IMPORTANCE + W_RECENCY)


def ranked_score(similarity: float, importance: float, recency_value: float, top_similarity: float,
                 time_fit: float | None = None) -> float:
    """The score hits are ordered by: relevance (scaled by the time fit when the question names a time)
    plus importance and recency under the gate. If a's similarity exceeds b's by more than BOOST_BAND * top
    (with equal time fit), a ranks first whatever their importance, recency or use."""
    rel = similarity * time_factor(time_fit)
    return W_SIMILARITY * rel + boost_gate(top_similarity) * (W_IMPORTANCE * importance + W_RECENCY * recency_value)


def time_factor(time_fit: float | None) -> float:
    """1.0 without a time cue; else between 1 - TIME_WEIGHT (does not fit) and 1 (fits)."""
    return 1.0 if time_fit is None else 1.0 - TIME_WEIGHT + TIME_WEIGHT * min(1.0, max(0.0, time_fit))


# Each time a memory is used (opened, edited, copied, cited in an answer, or reported used by a client; never
# merely for appearing in a result list), its importance moves this share of the way to 1.
ACCESS_BOOST = 0.05


def boosted_importance(importance: float, step: float = ACCESS_BOOST) -> float:
    """Importance grows with use, approaching 1 but never passing it."""
    return min(1.0, importance + step * (1.0 - importance))
