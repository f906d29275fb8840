"""GET /memories pages through a store of more than 1,000 memories: every memory exactly once, newest first,
the page size bounded, and a made-up `after` refused with a 400 that says why. Real store, real server."""

from __future__ import annotations

from engine.memories import Remembered
from tests.integration.test_api import Live
from tests.integration.test_api import live as live  # noqa: F401 (a fixture)


def test_more_than_1000_memories_page_through_the_listing(live: Live):  # noqa: F811
    items = [Remembered(f"Field note {i}: the heron count at pond {i % 37} was {i * 7 % 101}.", kind="episodic")
             for i in range(1203)]
    for start in range(0, len(items), 600):
        live.eng.remember_many(items[start:start + 600], embed="none")
    seen: list[dict] = []
    after, pages = None, 0
    while True:
        r = live.client.get("/memories", params={"limit": 1000, **({"after": after} if after else {})})
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page["memories"]) <= 1000
        seen += page["memories"]
        pages += 1
        after = page["next"]
        if after is None:
            break
        assert pages < 5, "the listing does not end"
    assert pages == 2
    ids = [m["id"] for m in seen]
    assert len(ids) == len(set(ids)) == 1203
    stamps = [m["created_at"] for m in seen]
    assert stamps == sorted(stamps, reverse=True)
    assert live.client.get("/memories", params={"limit": 1001}).status_code == 422
    bad = live.client.get("/memories", params={"after": "mem_zzzzzzzzzzzzzzzz"})
    assert bad.status_code == 400 and "not a place in the list" in bad.json()["detail"]
