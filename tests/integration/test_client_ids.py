"""A write sent again with the id its client made (a device's outbox whose answer was lost) is the same write:
stored once, merged once, answered as the first time; a malformed id is refused."""

from __future__ import annotations

import pytest

from engine.errors import NotFound, UserError
from engine.memory_rules import new_uid


def test_a_repeated_client_id_stores_and_merges_once(eng):
    uid = new_uid("mem")
    first = eng.remember("The spare house key is under the blue flowerpot.", uid=uid, embed="sync")
    again = eng.remember("The spare house key is under the blue flowerpot.", uid=uid, embed="sync")
    assert first.id == again.id == uid and not again.merged
    assert eng.stats().memories == 1

    copy = new_uid("mem")  # a near-duplicate from another device: merged into the first
    merged = eng.remember("The spare house key is under the blue flowerpot!", uid=copy, embed="sync")
    assert merged.merged and merged.id == uid
    importance = eng.get(uid).importance
    repeat = eng.remember("The spare house key is under the blue flowerpot!", uid=copy, embed="sync")
    assert repeat.merged and repeat.id == uid
    assert eng.get(uid).importance == importance and eng.stats().memories == 1  # not stated a third time

    eng.forget(uid)
    with pytest.raises(NotFound):  # sent again after a forget: not brought back
        eng.remember("The spare house key is under the blue flowerpot.", uid=uid, embed="sync")
    assert eng.stats().memories == 0
    for bad in ("mem_short", "doc_" + uid[4:], uid[:-1] + "I", "mem_" + "0" * 15 + "!"):
        with pytest.raises(UserError):
            eng.remember("Something else entirely.", uid=bad)
