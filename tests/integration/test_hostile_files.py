"""Hostile files the tests build: zip bombs of each container format, deep XML, entity bombs, a 49 MB
single line, a file name that is not UTF-8, a document that keeps crashing the indexer. Each is refused
(or given up) with a message that says why, within bounded memory and time, and the good files next to
them are ingested into an intact store with nothing left pending.

Memory is measured in a fresh subprocess (its own peak RSS, ``VmHWM`` in /proc/self/status), so the
test's own imports and the shared embedding model do not count. (Not ``getrusage``'s ``ru_maxrss``: on
Linux it keeps the high-water mark of the process that spawned the child, so inside a long pytest run
it reports the test runner's size.) The cap: 400 MiB peak for parsing and chunking
every hostile file (the interpreter with the parsers and tokenizer loaded is ~80 MiB; the 49 MB line is
~230 MiB because its text is held three times while it is decoded and cleaned). Before these limits the
same files took 1.1-5 GB and minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from engine import Engine, limits
from tests import backends
from tests.backends import one
from tests.hostile_files import (
    MIB,
    base_document,
    bomb_body,
    deep_body,
    entity_body,
    long_line,
    many_members,
    many_paragraphs_body,
    replace_part,
)

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS = (".docx", ".odt", ".epub")
RSS_CAP_MIB = 400
TIME_CAP_S = 30


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """name -> path of every hostile file (built once for the module)."""
    d = tmp_path_factory.mktemp("hostile")
    out: dict[str, Path] = {}
    for ext in CONTAINERS:
        base = base_document(ext, d / f"base{ext}")
        k = ext[1:]
        out[f"bomb-{k}"] = replace_part(base, d / f"bomb{ext}", None, bomb_body(ext, 512 * MIB))  # ~1000:1
        # a header that lies: declares 1 MiB, inflates to 64 MiB (zipfile stops at the declared size; the CRC fails)
        out[f"liar-{k}"] = replace_part(base, d / f"liar{ext}", None, bomb_body(ext, 64 * MIB), declared=MIB)
        out[f"ratio-{k}"] = replace_part(base, d / f"ratio{ext}", None, many_paragraphs_body(ext, 30_000))
        out[f"deep-{k}"] = replace_part(base, d / f"deep{ext}", None, deep_body(ext, 1000))
        out[f"entities-{k}"] = replace_part(base, d / f"entities{ext}", None, entity_body(ext))
        out[f"members-{k}"] = many_members(base, d / f"members{ext}", limits.MAX_ARCHIVE_MEMBERS + 1)
    out["line-words"] = long_line(d / "line-words.txt", 49 * MIB, words=True)
    out["line-token"] = long_line(d / "line-token.txt", 49 * MIB, words=False)
    out["dense-words"] = long_line(d / "dense-words.txt", 25 * MIB, words=True)  # under the text cap, over the chunk cap
    return out


EXPECTED = {
    "bomb": "would unpack to",
    "liar": "is damaged",
    "ratio": "compressed",
    "deep": "nested more than 256 levels deep",
    "entities": "declares XML entities",
    "members": "files inside",
    "line": "million characters of text",
    "dense": "passages to index",
}


def test_the_bombs_are_small_files(hostile: dict[str, Path]):
    for name, path in hostile.items():
        if name.startswith("bomb"):
            with zipfile.ZipFile(path) as z:
                inflated = sum(i.file_size for i in z.infolist())
            assert path.stat().st_size < 2 * MIB and inflated > 500 * MIB, name


def test_every_hostile_file_is_refused_in_bounded_memory_and_time(hostile: dict[str, Path]):
    script = textwrap.dedent("""
        import json, resource, sys, time
        from pathlib import Path
        from engine.ingest import _chunks
        from engine.parsers import DocumentError, parse_file
        out = {}
        for name, path in json.loads(sys.argv[1]).items():
            t0 = time.perf_counter()
            try:
                doc = parse_file(Path(path), max_bytes=50 * 2**20)
                _chunks(doc, Path(path).name)
                error = None
            except DocumentError as e:
                error = str(e)
            out[name] = {"error": error, "seconds": time.perf_counter() - t0}
        try:  # this process's own peak (ru_maxrss would include the spawning test runner's, see above)
            hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
            out["_rss_mib"] = int(hwm.split()[1]) / 1024
        except (OSError, IndexError):
            out["_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(out))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", script, json.dumps({k: str(v) for k, v in hostile.items()})],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)
    rss = out.pop("_rss_mib")
    print(f"peak RSS {rss:.0f} MiB, {time.perf_counter() - t0:.1f} s for {len(out)} files; "
          + ", ".join(f"{k} {v['seconds']:.2f}s" for k, v in out.items()))
    assert rss < RSS_CAP_MIB
    for name, r in out.items():
        assert r["error"] is not None, f"{name} was accepted"
        assert EXPECTED[name.split("-")[0]] in r["error"], (name, r["error"])
        assert r["seconds"] < TIME_CAP_S, name


def test_a_folder_of_hostile_files_ingests_its_good_files_and_leaves_nothing_pending(
        eng: Engine, hostile: dict[str, Path], tmp_path: Path):
    folder = tmp_path / "inbox"
    folder.mkdir()
    for name in ("bomb-docx", "bomb-odt", "bomb-epub", "deep-odt", "ratio-docx", "line-words"):
        os.link(hostile[name], folder / f"{name}{hostile[name].suffix}")
    (folder / "a-good.md").write_text("The good fact: the spare key is under the blue flowerpot.", encoding="utf-8")
    base_document(".docx", folder / "b-good.docx")
    bad_name = os.fsdecode(b"caf\xe9-latin1-name.txt")  # not UTF-8: a surrogate escape in Python
    (folder / bad_name).write_text("A file whose name was written by an old Windows tool.", encoding="utf-8")
    (folder / "z-good.txt").write_text("The last good fact: the boiler was serviced in May.", encoding="utf-8")

    t0 = time.perf_counter()
    results = eng.ingest([folder])
    assert time.perf_counter() - t0 < 60
    by_name = {Path(r.path).name: r for r in results}
    assert {n for n, r in by_name.items() if r.status == "added"} == {"a-good.md", "b-good.docx", "z-good.txt"}
    bad = by_name["caf\\xe9-latin1-name.txt"]
    assert bad.status == "failed" and "not valid UTF-8" in (bad.error or "")
    json.dumps([r.model_dump() for r in results]).encode("utf-8")  # every result can be sent as JSON
    for r in results:
        if r.status == "failed":
            assert r.error and "internal" not in r.error
    assert one(eng, "SELECT count(*) FROM documents WHERE status = 'pending'") == 0
    if not backends.on_postgres(eng):
        assert one(eng, "PRAGMA integrity_check") == "ok"
    assert any("blue flowerpot" in h.text for h in eng.recall("where is the spare key", k=5))
    assert eng.ingest([folder])[0].status == "unchanged"  # and a re-run goes through the same way


def test_an_uploaded_bomb_is_refused_too(eng: Engine, hostile: dict[str, Path]):
    r = eng.ingest_upload(hostile["bomb-odt"].read_bytes(), "report.odt")
    assert r.status == "failed" and "would unpack to" in (r.error or "")


class _Crash(BaseException):
    """Stands for the process being killed while it embeds (not an error the ingest can catch)."""


def test_a_pending_document_that_keeps_crashing_the_indexer_is_given_up_with_its_reason(
        eng: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "cursed.md"
    path.write_text("The cursed fact: this file always stops the indexer.\n\n" + "More words here. " * 200,
                    encoding="utf-8")

    def crash(texts, **kw):
        raise _Crash

    monkeypatch.setattr(eng.embedder, "encode", crash)
    with pytest.raises(_Crash):
        eng.ingest([path])  # attempt 1
    for _ in range(limits.MAX_RESUME_ATTEMPTS - 1):  # attempts 2 and 3, each the background's resume at start
        with pytest.raises(_Crash):
            eng.resume_pending_documents()
    [r] = eng.resume_pending_documents()  # the next start gives up instead of trying again
    assert r.status == "failed" and "interrupted 3 times" in (r.error or "")
    assert eng.resume_pending_documents() == []  # and later starts leave it alone
    [doc] = eng.list_documents(failed=True)
    assert doc.path == str(path) and doc.chunks == 0 and "interrupted 3 times" in (doc.error or "")
    assert eng.list_documents() == []
    assert one(eng, "SELECT count(*) FROM chunks") == 0  # its chunks are gone
    assert any("could not be ingested" in n for n in eng.stats().notes)

    monkeypatch.undo()  # the user adds it again, with a working model: it is retried and succeeds
    [again] = eng.ingest([path])
    assert again.status == "added" and again.document_id == doc.id
    assert eng.list_documents(failed=True) == [] and not any("could not" in n for n in eng.stats().notes)


def test_a_pending_document_over_the_chunk_limit_is_given_up_not_resumed(
        eng: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A store written before the limit may hold a huge pending document; it is not resumed."""
    path = tmp_path / "huge.md"
    path.write_text("Some text. " * 500, encoding="utf-8")

    def crash(texts, **kw):
        raise _Crash

    monkeypatch.setattr(eng.embedder, "encode", crash)
    with pytest.raises(_Crash):
        eng.ingest([path])
    monkeypatch.undo()
    with eng.store.write() as con:
        backends.execute(con, "UPDATE documents SET chunk_count = ?", (limits.MAX_CHUNKS + 1,))
    [r] = eng.resume_pending_documents()
    assert r.status == "failed" and "passages to index" in (r.error or "")
    assert one(eng, "SELECT count(*) FROM chunks") == 0
