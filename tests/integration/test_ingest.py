"""Ingesting real files of every supported type into a real encrypted store, and everything around it:
idempotence, replacement, moves, failures that change nothing, forgetting, crashes, cancellation,
progress and awkward folders."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import engine.ingest as ingest_mod
from engine import Engine
from engine.embeddings import NoEmbedder
from engine.ingest import IngestProgress
from tests.backends import execute, indexed_count, one, rows, vector_count
from tests.fixtures_docs import MARKDOWN, make_all, make_bad

ROOT = Path(__file__).resolve().parents[2]


def counts(eng: Engine) -> dict[str, int]:
    """Every table a document leaves traces in, pending rows included."""
    return {
        "documents": one(eng, "SELECT count(*) FROM documents"),
        "chunks": one(eng, "SELECT count(*) FROM chunks"),
        "fts": indexed_count(eng, "chunks"),
        "vectors": vector_count(eng, "chunks"),
        "memories": one(eng, "SELECT count(*) FROM memories"),
        "edges": one(eng, "SELECT count(*) FROM edges"),
    }


def chunk_hits(eng: Engine, query: str, doc_id: str | None = None):
    return [h for h in eng.recall(query, k=20, record_access=False)
            if h.kind == "chunk" and (doc_id is None or h.document_id == doc_id)]


def prose(topic: str, n: int) -> str:
    """n distinct paragraphs, each long enough to be a chunk of its own when they are many."""
    return "\n\n".join(
        f"Paragraph {i} about {topic}: the committee met on day {i} to review item {i * 7} of the plan. "
        + "They discussed the schedule, the suppliers and the weather forecast for the coming weeks. " * 6
        for i in range(n)
    )


def test_every_type_is_recalled_with_its_locator_and_reingest_changes_nothing(eng: Engine, tmp_path: Path):
    good = make_all(tmp_path / "docs")
    seen: list[IngestProgress] = []
    results = eng.ingest([tmp_path / "docs"], project="home", progress=seen.append)

    assert [Path(r.path).name for r in results] == sorted(good)  # folder order is stable
    assert {r.status for r in results} == {"added"}, [r.error for r in results]
    assert all(r.document_id and r.document_id.startswith("doc_") and r.chunks > 0 for r in results)
    by_name = {Path(r.path).name: r for r in results}
    for name, (path, expected) in good.items():
        hits = [h for h in chunk_hits(eng, expected.fact, by_name[name].document_id) if expected.fact in h.text]
        assert hits, f"{name}: fact not recalled"
        hit = hits[0]
        assert expected.locator_part in (hit.locator or ""), (name, hit.locator)
        assert hit.document_path == str(path)
        assert hit.document_title == (expected.title or hit.document_title)
        assert "vector" in hit.via and "fts" in hit.via
    pdf = [h for h in chunk_hits(eng, "blue heron nests by the old mill") if "heron" in h.text][0]
    assert pdf.locator == "page 2"

    # progress: monotonic, file by file, ending with everything done
    assert seen[0].stage == "scanning" and seen[0].files_total == len(good)
    assert seen[-1].stage == "done" and seen[-1].files_done == seen[-1].files_total == len(good)
    assert seen[-1].bytes_done == seen[-1].bytes_total == sum(p.stat().st_size for p, _ in good.values())
    for a, b in zip(seen, seen[1:], strict=False):
        assert b.files_done >= a.files_done and b.bytes_done >= a.bytes_done
        if a.current_file == b.current_file and b.stage == "embedding" and a.stage == "embedding":
            assert b.chunks_done >= a.chunks_done
    assert {p.current_file for p in seen if p.stage == "parsing"} == {str(p) for p, _ in good.values()}
    assert any(p.stage == "embedding" and p.chunks_done for p in seen)

    # documents are listed, the ingest is an episodic memory naming the file (not its path)
    docs = eng.list_documents(project="home")
    assert len(docs) == len(good) and eng.list_documents(project="work") == []
    report = eng.get_document(by_name["report.pdf"].document_id)
    assert report.title == "Field Report" and report.mime == "application/pdf" and report.path == str(
        good["report.pdf"][0]) and report.chunks == by_name["report.pdf"].chunks and report.project == "home"
    episodic = eng.list_memories(kind="episodic", activity=True, limit=100)
    assert all(m.embedded and m.source == "activity" for m in episodic)  # embedded together, after the files
    events = [m.text for m in episodic]
    assert f"Ingested report.pdf ({report.chunks} chunks)" in events and len(events) == len(good)
    stats = eng.stats()
    assert stats.documents == len(good) and stats.chunks == sum(r.chunks for r in results)

    before = counts(eng)
    again = eng.ingest([tmp_path / "docs"])
    assert {r.status for r in again} == {"unchanged"}
    assert [(r.document_id, r.chunks) for r in again] == [(r.document_id, r.chunks) for r in results]
    assert counts(eng) == before


def test_an_edited_file_replaces_its_old_chunks_and_keeps_unchanged_vectors(
        eng: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "garden.md"
    old_fact = "The shed key hangs on the blue hook behind the kitchen door."
    body = prose("the garden", 8)
    path.write_text(f"# Garden\n\n{old_fact}\n\n{body}\n", encoding="utf-8")
    first = eng.ingest([path])[0]
    assert first.status == "added" and first.chunks >= 3
    assert any(old_fact in h.text for h in chunk_hits(eng, "where does the shed key hang", first.document_id))

    embedded: list[str] = []
    real_encode = eng.embedder.encode
    monkeypatch.setattr(eng.embedder, "encode", lambda texts, **kw: (embedded.extend(texts), real_encode(texts, **kw))[1])
    new_fact = "The shed key is now kept in the red tin on the windowsill."
    path.write_text(f"# Garden\n\n{new_fact}\n\n{body}\n", encoding="utf-8")
    second = eng.ingest([path])[0]
    assert second.status == "replaced" and second.document_id == first.document_id
    # only the chunk(s) around the edit were embedded again
    assert 1 <= sum(t != f"Updated garden.md ({second.chunks} chunks)" for t in embedded) < second.chunks

    for query in (old_fact, "blue hook behind the kitchen door", "where does the shed key hang"):
        assert not any("blue hook" in h.text for h in chunk_hits(eng, query))
    assert any(new_fact in h.text for h in chunk_hits(eng, "where is the shed key kept", first.document_id))
    c = counts(eng)
    assert c["documents"] == 1 and c["chunks"] == c["fts"] == c["vectors"] == second.chunks
    events = [m.text for m in eng.list_memories(kind="episodic", activity=True)]
    assert events == [f"Updated garden.md ({second.chunks} chunks)"]  # the first ingest's memory went with its chunks


def test_bad_files_fail_readably_change_nothing_and_do_not_stop_the_others(eng: Engine, tmp_path: Path):
    bad = make_bad(tmp_path / "bad")
    good = tmp_path / "fine.txt"
    good.write_text("The fine fact: the ferry leaves at seven.", encoding="utf-8")
    big = tmp_path / "big.md"
    big.write_text(prose("size", 40), encoding="utf-8")
    eng.remember("Something unrelated.")
    before = counts(eng)
    paths = [bad["corrupt_pdf"], bad["encrypted_pdf"], bad["binary_txt"], good, bad["empty"], bad["unknown"],
             bad["corrupt_docx"], tmp_path / "missing.md"]
    results = eng.ingest(paths)
    assert [r.status for r in results] == ["failed"] * 3 + ["added"] + ["failed"] * 4
    errors = {Path(r.path).name: r.error for r in results}
    assert "damaged or not a valid PDF" in errors["report.pdf"]
    assert "encrypted" in errors["locked.pdf"]
    assert "binary" in errors["photo.txt"]
    assert errors["empty.md"] == "empty.md is empty"
    assert "archive.xyz: .xyz files aren't supported" in errors["archive.xyz"]
    assert "doesn't exist" in errors["missing.md"]
    assert all("Traceback" not in e and len(e) < 400 for e in errors.values() if e)

    after = counts(eng)
    one = results[3].chunks
    # the files that could not be read are listed with the reason (nothing of them is searchable); those
    # refused before reading (empty, of no supported type, missing) leave nothing
    unreadable = [bad["corrupt_pdf"], bad["encrypted_pdf"], bad["binary_txt"], bad["corrupt_docx"]]
    assert after == {**before, "documents": 1 + len(unreadable), "chunks": one, "fts": one, "vectors": one,
                     "memories": before["memories"] + 1}
    assert [d.path for d in eng.list_documents()] == [str(good)]
    failed = {d.path: d for d in eng.list_documents(failed=True)}
    assert set(failed) == {str(p) for p in unreadable}
    assert all(failed[r.path].id == r.document_id and failed[r.path].error == r.error and failed[r.path].chunks == 0
               for r in results if r.path in failed)
    assert eng.stats().documents_failed == len(unreadable)
    # the same damaged file again: still one entry; fixed, it is ingested in its place
    again = eng.ingest([bad["binary_txt"]])[0]
    assert again.status == "failed" and again.document_id == failed[str(bad["binary_txt"])].id
    bad["binary_txt"].write_text("The photo shows the harbour at dawn.", encoding="utf-8")
    fixed = eng.ingest([bad["binary_txt"]])[0]
    assert fixed.status == "added" and fixed.document_id == again.document_id
    assert {d.path for d in eng.list_documents(failed=True)} == {str(p) for p in unreadable} - {str(bad["binary_txt"])}
    assert eng.forget(bad_id := failed[str(bad["corrupt_pdf"])].id).removed is not None
    assert bad_id not in {d.id for d in eng.list_documents(failed=True)}
    eng.forget(fixed.document_id)
    for p in unreadable[1:]:
        if str(p) != str(bad["binary_txt"]):
            eng.forget(failed[str(p)].id)
    after = counts(eng)
    assert after["documents"] == 1 and after["chunks"] == one

    too_big = eng.ingest([big], max_mb=0.001)[0]
    assert too_big.status == "failed" and "too big" in (too_big.error or "") and too_big.error.endswith("the limit is 1 KB")
    assert counts(eng) == after


def test_forgetting_a_document_removes_every_trace(eng: Engine, tmp_path: Path):
    path = tmp_path / "handbook.md"
    path.write_text(MARKDOWN, encoding="utf-8")
    r = eng.ingest([path])[0]
    baseline = eng.remember("The Markdown note I wrote myself.").id
    # a knowledge-graph edge derived from one of the document's chunks
    chunk_id = one(eng, "SELECT id FROM chunks ORDER BY id LIMIT 1")
    with eng.mutation() as (con, _):
        a = execute(con, "INSERT INTO nodes(name, norm_name, created_at) VALUES ('Frob', 'frob', 0) RETURNING id")
        b = execute(con, "INSERT INTO nodes(name, norm_name, created_at) VALUES ('Linux', 'linux', 0) RETURNING id")
        execute(con, "INSERT INTO edges(src, rel, dst, chunk_id, created_at) VALUES (?, 'runs_on', ?, ?, 0)",
                (a.fetchone()[0], b.fetchone()[0], chunk_id))
    assert chunk_hits(eng, "where does the frob config file live on Linux")
    assert eng.list_memories(kind="episodic", activity=True)

    gone = eng.forget(r.document_id)
    assert gone.type == "document" and gone.removed["chunks"] == r.chunks and gone.removed["edges"] == 1
    c = counts(eng)
    assert c == {"documents": 0, "chunks": 0, "fts": 0, "vectors": 0, "memories": 1, "edges": 0}
    assert one(eng, "SELECT count(*) FROM nodes") == 0
    assert eng.list_memories(kind="episodic", activity=True) == [] and eng.get(baseline)
    for query in ("frob config file Linux", "Markdown fact", "Ingested handbook.md"):
        assert all(h.id == baseline for h in eng.recall(query)), query
    assert eng.stats().documents == 0 and eng.list_documents() == []


def test_a_moved_file_keeps_its_document_and_a_copy_is_a_second_document(
        eng: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    old = tmp_path / "a" / "notes.txt"
    old.parent.mkdir()
    old.write_text("The moving fact: the piano goes to the north room.", encoding="utf-8")
    first = eng.ingest([old])[0]
    new = tmp_path / "b" / "renamed.txt"
    new.parent.mkdir()
    shutil.move(old, new)
    monkeypatch.setattr(eng.embedder, "encode", lambda *a, **k: pytest.fail("a move must not re-embed"))
    moved = eng.ingest([new])[0]
    assert (moved.status, moved.document_id, moved.chunks) == ("unchanged", first.document_id, first.chunks)
    assert eng.get_document(first.document_id).path == str(new)
    assert eng.get_document(first.document_id).title == "renamed.txt"  # it was titled by its file name
    monkeypatch.undo()
    assert chunk_hits(eng, "moving fact piano north room")[0].document_path == str(new)

    copy = tmp_path / "copy.txt"
    shutil.copy(new, copy)
    second = eng.ingest([copy])[0]
    assert second.status == "added" and second.document_id != first.document_id
    assert len(eng.list_documents()) == 2


CRASHER = textwrap.dedent("""
    import os, signal, sys

    import numpy as np

    import engine.ingest
    from engine import Engine

    engine.ingest.EMBED_BATCH_SIZE = 2
    eng = Engine.open(sys.argv[1])
    calls = []

    def encode(texts, batch_size=64):
        calls.append(len(texts))
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        rng = np.random.default_rng(len(calls))
        v = rng.normal(size=(len(texts), 384)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    eng.embedder.encode = encode
    eng.ingest([sys.argv[2]])
""")


def crash_mid_ingest(home: Path, path: Path) -> None:
    """Ingest in another process that is SIGKILLed after two embedding batches were stored."""
    p = subprocess.run([sys.executable, "-c", CRASHER, str(home), str(path)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == -9, p.stderr


@pytest.mark.parametrize("finish", ["reingest", "resume"])
def test_a_crash_mid_ingest_shows_nothing_and_the_next_run_completes_it(
        finish: str, profile_home: Path, embedder, tmp_path: Path):
    path = tmp_path / "big.md"
    path.write_text("# Minutes\n\nThe crash fact: the lantern festival moved to the eastern pier.\n\n"
                    + prose("the festival", 10), encoding="utf-8")
    crash_mid_ingest(profile_home, path)
    with Engine.open(profile_home, embedder=embedder) as eng:
        pending = eng.con.execute("SELECT id, status, chunk_count FROM documents").fetchall()
        assert len(pending) == 1 and pending[0][1] == "pending" and pending[0][2] >= 6
        embedded = eng.con.execute(
            "SELECT id, embedded_hash FROM chunks WHERE embedded_hash IS NOT NULL ORDER BY id").fetchall()
        assert len(embedded) == 4  # two batches of two made it before the kill
        kept = eng.con.execute("SELECT rowid, embedding FROM vec_chunks ORDER BY rowid").fetchall()
        # nothing is visible: no document, no chunk in recall (by words or meaning), no ingest memory
        assert eng.list_documents() == [] and eng.stats().documents == 0 and eng.stats().chunks == 0
        assert chunk_hits(eng, "lantern festival eastern pier") == []
        assert eng.list_memories() == []

        if finish == "reingest":
            r = eng.ingest([path])[0]
            assert r.status == "added" and r.chunks == pending[0][2]
        else:
            [r] = eng.resume_pending_documents()
            assert r.status == "added" and r.path == str(path)
        assert eng.con.execute("SELECT count(*) FROM documents").fetchone()[0] == 1
        assert eng.con.execute("SELECT count(*) FROM chunks WHERE embedded_hash IS NULL").fetchone()[0] == 0
        # the batches stored before the crash were kept, not embedded again
        assert eng.con.execute(f"SELECT rowid, embedding FROM vec_chunks WHERE rowid IN "
                               f"({','.join(str(k[0]) for k in kept)}) ORDER BY rowid").fetchall() == kept
        assert any("eastern pier" in h.text for h in chunk_hits(eng, "where did the lantern festival move"))
        assert eng.ingest([path])[0].status == "unchanged"
        assert [m.text for m in eng.list_memories(kind="episodic", activity=True)] == [f"Ingested big.md ({r.chunks} chunks)"]


def test_an_interrupted_process_leaves_a_pending_document_that_resume_finishes(
        eng: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An exception that is not the file's fault (here Ctrl-C inside the model) propagates; the rows stay
    pending, invisible, and are finished later."""
    path = tmp_path / "notes.md"
    path.write_text("The interrupt fact: the violin is in the attic.\n\n" + prose("music", 3), encoding="utf-8")

    def interrupted(texts, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(eng.embedder, "encode", interrupted)
    with pytest.raises(KeyboardInterrupt):
        eng.ingest([path])
    monkeypatch.undo()
    assert eng.list_documents() == [] and chunk_hits(eng, "violin attic") == []
    [r] = eng.resume_pending_documents()
    assert r.status == "added" and any("violin" in h.text for h in chunk_hits(eng, "where is the violin"))


def test_an_error_while_embedding_fails_that_batch_only(eng: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ingest_mod, "EMBED_BATCH_SIZE", 1)  # one file per batch
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("The first file talks about owls.", encoding="utf-8")
    b.write_text("The second file talks about otters.", encoding="utf-8")
    real = eng.embedder.encode

    def flaky(texts, **kw):
        if any("owls" in t for t in texts):
            raise RuntimeError("model exploded")
        return real(texts, **kw)

    monkeypatch.setattr(eng.embedder, "encode", flaky)
    ra, rb = eng.ingest([a, b])
    assert ra.status == "failed" and ra.error == "a.txt could not be added (RuntimeError); nothing was changed"
    assert rb.status == "added"
    c = counts(eng)
    assert c["documents"] == 1 and c["chunks"] == c["vectors"] == c["fts"] == rb.chunks


def test_cancelling_keeps_finished_files_and_rolls_back_the_current_one(
        eng: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ingest_mod, "EMBED_BATCH_SIZE", 2)
    folder = tmp_path / "docs"
    folder.mkdir()
    files = []
    for i, topic in enumerate(("apples", "boats", "clocks")):
        files.append(folder / f"{i}-{topic}.md")
        files[-1].write_text(prose(topic, 6), encoding="utf-8")
    cancel = threading.Event()
    seen: list[IngestProgress] = []

    def progress(p: IngestProgress) -> None:
        seen.append(p)
        if p.current_file == str(files[1]) and p.stage == "embedding" and p.chunks_done >= 2:
            cancel.set()  # mid-file: two chunks of the second file already have vectors

    results = eng.ingest([folder], progress=progress, cancel=cancel)
    assert [r.status for r in results] == ["added", "failed", "failed"]
    assert [r.error for r in results[1:]] == ["cancelled", "cancelled"]
    assert seen[-1].stage == "done" and seen[-1].files_done == seen[-1].files_total == 3
    c = counts(eng)
    assert c["documents"] == 1 and c["chunks"] == c["fts"] == c["vectors"] == results[0].chunks
    assert [d.path for d in eng.list_documents()] == [str(files[0])]
    assert chunk_hits(eng, "boats committee") == []
    again = eng.ingest([folder])
    assert [r.status for r in again] == ["unchanged", "added", "added"]


def test_folders_skip_hidden_and_tool_dirs_and_report_loops_pipes_and_broken_links(eng: Engine, tmp_path: Path):
    root = tmp_path / "tree"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("The alpha fact: apricots ripen in July.", encoding="utf-8")
    (root / "sub" / "b.txt").write_text("The beta fact: beetroot likes cold soil.", encoding="utf-8")
    (root / "sub" / "same-as-a.md").symlink_to(root / "a.md")  # one file, two names: ingested once
    for hidden in (".hidden/c.md", "node_modules/d.md", ".git/e.txt", "__pycache__/f.txt", ".venv/g.md", ".h.md"):
        (root / hidden).parent.mkdir(exist_ok=True)
        (root / hidden).write_text("Hidden text must never be ingested.", encoding="utf-8")
    (root / "picture.xyz").write_bytes(b"\x00\x01")
    (root / "loop").symlink_to(root)  # a folder that contains itself
    (root / "gone.md").symlink_to(tmp_path / "nowhere.md")  # a broken link
    os.mkfifo(root / "pipe.txt")  # reading it would block forever
    results = eng.ingest([root])
    got = {str(Path(r.path).relative_to(root)): (r.status, r.error) for r in results}
    assert list(got) == ["a.md", "gone.md", "loop", "pipe.txt", "sub/b.txt"]
    assert got["a.md"][0] == got["sub/b.txt"][0] == "added"
    assert "doesn't exist" in got["gone.md"][1]
    assert "symbolic link loop" in got["loop"][1]
    assert "not a regular file" in got["pipe.txt"][1]
    assert chunk_hits(eng, "Hidden text must never be ingested") == []
    assert len(eng.list_documents()) == 2


def test_text_uploads_are_documents_keyed_by_title_and_content(eng: Engine):
    r = eng.ingest_text("The uploaded fact: the boat is called Marigold.", "Boat notes", project="sea")
    assert r.status == "added" and r.path is None and r.chunks == 1
    assert eng.ingest_text("The uploaded fact: the boat is called Marigold.", "Boat notes").status == "unchanged"
    other = eng.ingest_text("The uploaded fact: the boat is called Marigold.", "Other title")
    assert other.status == "added" and other.document_id != r.document_id
    hit = chunk_hits(eng, "what is the boat called", r.document_id)[0]
    assert hit.document_title == "Boat notes" and hit.document_path is None and hit.project == "sea"
    empty = eng.ingest_text("   ", "Nothing")
    assert empty.status == "failed" and "empty" in (empty.error or "")


def test_an_empty_file_is_refused_alike_through_every_door(eng: Engine, tmp_path: Path):
    """Named, pasted or uploaded, an empty file fails saying so, and is not kept as a failed document (one
    named on disk never was: a program may be about to write it; an upload was, and `documents --failed`
    listed it)."""
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    results = [eng.ingest([path])[0], eng.ingest_upload(b"", "empty.txt"), eng.ingest_text("  ", "Nothing")]
    assert [(r.status, "empty" in (r.error or "")) for r in results] == [("failed", True)] * 3
    assert eng.list_documents(failed=True) == [] and eng.list_documents() == []


def test_without_an_embedding_model_documents_are_ready_at_once_and_found_by_words(
        profile_home: Path, embedder, tmp_path: Path):
    path = tmp_path / "plain.txt"
    path.write_text("The lexical fact: the gate code is 2468.", encoding="utf-8")
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        r = eng.ingest([path])[0]
        assert r.status == "added" and eng.list_documents()[0].id == r.document_id
        hits = chunk_hits(eng, "gate code")
        assert hits and hits[0].via == ["fts"]
    with Engine.open(profile_home, embedder=embedder) as eng:  # the backfill embeds the chunks later
        assert eng.embed_pending() >= 1
        assert "vector" in chunk_hits(eng, "what is the code for the gate")[0].via


def test_a_passage_a_document_repeats_is_one_hit(eng: Engine, tmp_path: Path):
    notice = ("Aldermoor harbour notice: the ferry leaves at seven from pier four and tickets are sold on "
              "board; the kiosk by the gate sells maps, tide tables and umbrellas. ") * 12
    path = tmp_path / "notices.md"
    path.write_text("\n\n".join(f"# Notice {i}\n\n{notice}" for i in range(6)), encoding="utf-8")
    doc = eng.ingest([path])[0]
    assert doc.status == "added" and doc.chunks >= 6
    texts = [r[0] for r in rows(eng, "SELECT text FROM chunks")]
    assert len(set(texts)) < len(texts)  # the file's passages repeat
    chunks = [h for h in eng.recall("When does the ferry to Aldermoor leave?", k=10) if h.id.startswith("chk_")]
    assert chunks and len({" ".join(h.text.split()) for h in chunks}) == len(chunks)
    copy = tmp_path / "notices copy.md"
    copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    other = eng.ingest([copy])[0]
    sources = {h.document_id for h in eng.recall("When does the ferry to Aldermoor leave?", k=10)
               if h.id.startswith("chk_")}
    assert sources == {doc.document_id, other.document_id}  # two files: two sources


def test_an_unchanged_file_ingested_again_with_a_project_goes_into_it(eng: Engine, tmp_path: Path):
    path = tmp_path / "budget.md"
    path.write_text("The roof repair budget is 4,200 euros, approved in March.", encoding="utf-8")
    first = eng.ingest([path])[0]
    assert first.status == "added"
    question = "How much is the roof repair budget?"
    assert not [h for h in eng.recall(question, project="work") if h.id.startswith("chk_")]
    again = eng.ingest([path], project="work")[0]
    assert again.status == "unchanged" and again.document_id == first.document_id
    hits = [h for h in eng.recall(question, project="work") if h.id.startswith("chk_")]
    assert hits and hits[0].document_id == first.document_id
    assert [d.id for d in eng.list_documents(project="work")] == [first.document_id]
    event = eng.list_memories(activity=True, project="work")
    assert len(event) == 1 and "budget.md" in event[0].text
    assert eng.ingest([path])[0].status == "unchanged"  # no project given: it stays in work
    assert [d.id for d in eng.list_documents(project="work")] == [first.document_id]
    upload = eng.ingest_upload(path.read_bytes(), "budget.md", project="home")
    assert upload.status == "added"  # an upload is a document of its own (no path)
    assert eng.ingest_upload(path.read_bytes(), "budget.md", project="office").status == "unchanged"
    assert {d.project for d in eng.list_documents()} == {"work", "office"}


def test_a_document_another_engine_is_indexing_is_left_to_it(eng: Engine, profile_home: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch):
    """The app or `serve` starting (its resume) while a CLI ingest indexes: the other engine's pending
    document is neither resumed nor named as interrupted; it is once its engine is gone."""
    path = tmp_path / "slow.md"
    path.write_text("The slow fact: the kayak hangs in the garage.\n\n" + prose("boats", 6), encoding="utf-8")
    embedding, release = threading.Event(), threading.Event()
    encode = eng.embedder.encode

    def slow(texts, **kw):
        embedding.set()
        assert release.wait(120)
        return encode(texts, **kw)

    monkeypatch.setattr(eng.embedder, "encode", slow)
    worker = threading.Thread(target=lambda: eng.ingest([path]))
    worker.start()
    try:
        assert embedding.wait(120)
        with Engine.open(profile_home, embedder=NoEmbedder()) as other:  # another program, as it starts
            assert other.resume_pending_documents() == []
            assert other.stats().documents_interrupted == 0
    finally:
        release.set()
        worker.join(120)
    assert [d.title for d in eng.list_documents()] == ["slow.md"]
