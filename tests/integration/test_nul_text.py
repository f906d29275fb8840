"""A NUL character inside a memory's text (a pasted binary fragment, a client's stray "\\u0000") is never
content: the text is kept without it, the same on a desktop profile and on a server (PostgreSQL cannot store
one in text at all: the write failed there with the database's error)."""

from __future__ import annotations

import pytest

from engine.errors import UserError


def test_a_nul_inside_a_memory_is_dropped_and_the_rest_kept(eng):
    m = eng.remember("The gate code is 4\x0017\x00 until June.", embed="sync")
    assert eng.get(m.id).text == "The gate code is 417 until June."
    assert [h.id for h in eng.recall("gate code", k=3)][:1] == [m.id]
    eng.update(m.id, text="The gate code is\x00 5120 from July.")
    assert eng.get(m.id).text == "The gate code is 5120 from July."
    with pytest.raises(UserError, match="empty"):
        eng.remember("\x00\x00 \x00")
