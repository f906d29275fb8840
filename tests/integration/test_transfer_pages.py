"""A store read out a page at a time with its vectors (`transfer.page`, what a pull reads) and merged batch by
batch into another (`transfer.merge`, what a push's batches do), on both backends: everything arrives once,
the vectors as they were, and merging again adds nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engine import Engine
from engine import store as rows
from engine.errors import UserError
from engine.transfer import RecordsRefused, SpaceDiffers


@pytest.fixture
def other(tmp_path: Path, embedder) -> Iterator[Engine]:
    """A fresh local profile to merge into."""
    e = Engine.open(tmp_path / "other-profile", embedder=embedder)
    yield e
    e.close()


def _vectors(eng: Engine, table: str, uids: list[str]) -> dict[str, np.ndarray]:
    with eng.store.read() as con:
        return {u: v for u, (v, _) in rows.transfer.vectors_of(con, table, uids).items()}


def test_pages_merged_batch_by_batch_arrive_once_with_their_vectors(eng: Engine, other: Engine):
    uids = [eng.remember(f"The {thing} is kept in drawer {n} of the oak desk.", kind=kind).id
            for n, (thing, kind) in enumerate([("stapler", "fact"), ("passport", "fact"), ("torch", "episodic"),
                                               ("spare fuse", "procedural"), ("receipt", "fact")])]
    doc = eng.ingest_text("Boiler manual.\n\nThe pressure should read 1.5 bar when the boiler is cold.\n\n"
                          "Bleed the radiators every autumn.", "boiler.txt")
    eng.embed_pending()
    eng.space.ensure()
    space = eng.transfer.vector_space()
    assert space is not None and eng.transfer.counts()["memory"] == 5

    after, pages = None, 0
    while True:
        page, after = eng.transfer.page(after, 3)
        pages += 1
        report = other.transfer.merge(page, space=space, action="pull")
        assert report.vectors == sum(1 for r in page if r["type"] in ("memory", "chunk"))
        if after is None:
            break
    assert pages >= 3  # records of one kind across pages, kinds split between pages

    assert {m.id for m in other.list_memories(limit=50)} == set(uids)
    assert [d.id for d in other.list_documents()] == [doc.document_id]
    mine, theirs = _vectors(eng, "memories", uids), _vectors(other, "memories", uids)
    assert set(theirs) == set(uids) and all(np.array_equal(mine[u], theirs[u]) for u in uids)
    assert other.space.pending() == 0  # nothing waits to be embedded again
    hits = other.recall("where is the passport kept", k=3)
    assert hits and hits[0].id == uids[1]

    page, _ = eng.transfer.page(None, 100)
    again = other.transfer.merge(page, space=space, action="pull")
    assert again.added == {} and again.vectors == 0

    with pytest.raises(SpaceDiffers, match="cannot be compared"):
        other.transfer.merge(page, space=["sentence-transformers", "another-model", 384, "v1"])
    with pytest.raises(RecordsRefused, match=r"records\[0\] \(memory\): text"):
        other.transfer.merge([{**next(r for r in page if r["type"] == "memory"), "text": ""}], space=space)
    with pytest.raises(UserError, match="not a page of records"):
        eng.transfer.page("memory:x", 3)
