"""What the command line says about counts reads as English: one of a thing is singular."""

from __future__ import annotations

import pytest

from engine.cli.base import counted


@pytest.mark.parametrize(("n", "plural", "said"), [
    (1, "chunks", "1 chunk"), (2, "chunks", "2 chunks"), (0, "chunks", "0 chunks"),
    (1, "memories", "1 memory"), (3, "memories", "3 memories"),
    (1, "audit entries", "1 audit entry"), (1, "fact checks", "1 fact check"), (1, "graph edges", "1 graph edge"),
    (1, "conversations", "1 conversation"), (1, "derived", "1 derived"),
])
def test_a_count_of_one_is_singular(n: int, plural: str, said: str):
    assert counted(n, plural) == said
