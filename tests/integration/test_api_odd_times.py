"""A time at the edge of what the store holds (late on 31 December 9999 in a time zone east of UTC) is a 422
on the field that was sent, with words, not a 400 quoting a number of seconds the client never sent."""

from __future__ import annotations

from tests.integration.test_api import Live
from tests.integration.test_api import live as live  # noqa: F401 (a fixture)


def test_a_time_past_the_stores_range_is_a_422_on_its_field(live: Live):  # noqa: F811
    r = live.client.post("/memory/remember", json={"text": "The last concert", "at": "9999-12-31T23:59:59+14:00"})
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "at"] and "supported range" in error["msg"]
    r = live.client.get("/memory/recall", params={"q": "concert", "since": "9999-12-31T23:59:59-14:00"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["query", "since"]
    assert "253402" not in r.text
    ok = live.client.post("/memory/remember", json={"text": "The first concert", "at": "2024-05-01T20:00:00+02:00"})
    assert ok.status_code == 200, ok.text
