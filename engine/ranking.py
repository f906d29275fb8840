"""Ranking: reciprocal rank fusion of the lexical and semantic lists, then the engine's formula.

    score = 0.6 * similarity + 0.2 * importance + 0.2 * recency
    recency = 0.5 ** (days since the memory's time or last use / 30)

`similarity` is the fused relevance scaled to [0, 1]: 1.0 means first in every list that was searched.
"""

from __future__ import annotations

import math
import time

W_SIMILARITY = 0.6
W_IMPORTANCE = 0.2
W_RECENCY = 0.2
HALF_LIFE_DAYS = 30.0
RRF_K = 60

DAY = 86_400.0


def recency(t: float | None, now: float | None = None) -> float:
    """1.0 now, 0.5 after one half-life; future times count as now."""
    if t is None:
        return 0.0
    days = max(0.0, ((now or time.time()) - t) / DAY)
    return math.pow(0.5, days / HALF_LIFE_DAYS)


def rrf(ranked_lists: list[list[int]], weights: list[float] | None = None, k: int = RRF_K) -> dict[int, float]:
    """Reciprocal rank fusion scaled so that rank 1 in every list scores 1.0."""
    weights = weights or [1.0] * len(ranked_lists)
    best = sum(w / (k + 1) for w, lst in zip(weights, ranked_lists, strict=True) if lst) or 1.0
    fused: dict[int, float] = {}
    for w, lst in zip(weights, ranked_lists, strict=True):
        for rank, key in enumerate(lst, start=1):
            fused[key] = fused.get(key, 0.0) + w / (k + rank)
    return {key: v / best for key, v in fused.items()}


def final_score(similarity: float, importance: float, recency_value: float) -> float:
    return W_SIMILARITY * similarity + W_IMPORTANCE * importance + W_RECENCY * recency_value


def boosted_importance(importance: float, step: float = 0.05) -> float:
    """Importance grows with use, approaching 1 but never passing it."""
    return min(1.0, importance + step * (1.0 - importance))
