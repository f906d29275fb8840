"""The relevance floor: is the best retrieval good enough to answer from?

Recall's `similarity` is a calibrated, absolute relevance in [0, 1] (see ranking.similarity): it does not
depend on how many other memories there are, so one threshold means the same thing in a store of ten
memories and one of a hundred thousand. Ask uses `answerable()`: below the floor it says the answer is
not in memory without calling a language model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class _Scored(Protocol):
    similarity: float


# Calibrated on the LoCoMo dev file (3 conversations, 497 questions) with
#   .venv/bin/python bench/eval_locomo.py DATA/locomo-dev.json
# which prints the top-hit relevance distribution of answerable (categories 1-4) and unanswerable
# (category 5) questions. The two are nearly the same there (medians 0.64 vs 0.61): LoCoMo's category 5
# questions are adversarial paraphrases about the other speaker, whose words and meaning are in memory, so
# no threshold on relevance separates them (the best balanced cut, ~0.61, refuses 43% of the answerable
# questions). The floor is therefore set where it refuses at most 2% of answerable questions (0.344 on the
# dev file after the common-term pruning of docs/retrieval.md; it refuses 1.8% of answerable and 4.5% of
# category 5 there). What it does reliably: refuse questions about things absent from memory (their top
# relevance is at most ranking.ABSOLUTE_MARGIN + a weak partial match; see
# tests/integration/test_recall_quality.py).
ANSWER_FLOOR = 0.34

# Recall drops hits below this relevance: they match neither by meaning nor by any informative word
# (an unrelated memory scores at most ranking.ABSOLUTE_MARGIN = 0.10).
MIN_HIT_RELEVANCE = 0.12


def top_relevance(hits: Sequence[_Scored]) -> float:
    """The calibrated relevance of the best hit (0.0 when there is none)."""
    return max((float(h.similarity) for h in hits), default=0.0)


def answerable(hits: Sequence[_Scored], floor: float = ANSWER_FLOOR) -> bool:
    """True when the best hit is relevant enough to answer from; False means "not in memory"."""
    return top_relevance(hits) >= floor
