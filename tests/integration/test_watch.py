"""Watched folders on real temporary folders with real files: the store follows creates, edits, renames,
moves, deletes, a folder that goes away, links, empty and unreadable files, within a bounded wait (polled
against a deadline), ingesting nothing twice; a forgotten file never comes back in recall."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from engine import Engine, limits
from engine.store.sqlite.migrations import MIGRATIONS, migrate

WAIT_S = 30.0  # the bound: events arrive within about a second; a loaded CI machine gets room

pytestmark = pytest.mark.sqlite_only("a server watches no folders: its users' documents come by upload")


def until(cond: Callable[[], object], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def docs_by_path(eng: Engine) -> dict[str, str]:
    return {d.path: d.id for d in eng.list_documents() if d.path}


def ingests(eng: Engine) -> Counter[str]:
    """How many times each document was ingested (added or replaced), from the audit log."""
    return Counter(e.target for e in eng.audit_log(limit=10_000) if e.action == "ingest")


def found(eng: Engine, words: str) -> list[str]:
    return [h.text for h in eng.recall(words, k=10, include_unscoped=True)]


def chunk_uids(eng: Engine, doc: str) -> set[str]:
    """The document's chunks that have their vector."""
    return {r[0] for r in eng.con.execute(
        "SELECT c.uid FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.uid = ? "
        "AND c.embedded_hash IS NOT NULL", (doc,))}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def watching(eng: Engine):
    """The engine with its watcher running (stopped at the end)."""
    yield eng
    eng.stop_watching()


def test_the_store_follows_creates_edits_renames_moves_and_deletes(watching: Engine, tmp_path: Path):
    eng = watching
    a, b, elsewhere = tmp_path / "a", tmp_path / "b", tmp_path / "elsewhere"
    for d in (a, b, elsewhere):
        d.mkdir()
    write(a / "first.md", "The lighthouse keeper logs the tide at dawn.")
    eng.watch_add(a, project="work")
    eng.watch_add(b)
    eng.start_watching()
    until(lambda: str(a / "first.md") in docs_by_path(eng), "the rescan at start ingests the existing file")
    until(lambda: eng.watch_status().watching, "the watcher holds the lock")

    new = write(a / "new.md", "The quartermaster counts seventeen barrels of molasses.")
    until(lambda: str(new) in docs_by_path(eng), "a new file is ingested")
    doc = docs_by_path(eng)[str(new)]
    assert eng.get_document(doc).project == "work"
    # the activity log says the folder added it, not the program watching (the "sdk" engine here)
    assert {e.actor for e in eng.audit_log(limit=10_000) if e.action == "ingest" and e.target == doc} == {"watch"}

    write(new, "The quartermaster now counts nine crates of saffron.")
    until(lambda: any("saffron" in t for t in found(eng, "crates of saffron")), "an edited file is re-read")
    assert docs_by_path(eng)[str(new)] == doc  # same document, new content
    assert not any("molasses" in t for t in found(eng, "barrels of molasses"))
    chunks = chunk_uids(eng, doc)

    renamed = a / "renamed.md"
    os.rename(new, renamed)
    until(lambda: str(renamed) in docs_by_path(eng), "a renamed file follows")
    assert docs_by_path(eng)[str(renamed)] == doc and str(new) not in docs_by_path(eng)

    moved = b / "sub" / "moved.md"
    moved.parent.mkdir()
    os.rename(renamed, moved)
    until(lambda: str(moved) in docs_by_path(eng), "a file moved to another watched folder follows")
    assert docs_by_path(eng)[str(moved)] == doc  # the move kept the document, its memory and vectors
    assert chunk_uids(eng, doc) == chunks  # the same chunks and vectors: nothing re-read or re-embedded

    os.remove(moved)
    until(lambda: doc not in docs_by_path(eng).values(), "a deleted file is forgotten")
    assert not any("saffron" in t for t in found(eng, "nine crates of saffron quartermaster"))

    first = docs_by_path(eng)[str(a / "first.md")]
    shutil.move(a / "first.md", elsewhere / "first.md")
    until(lambda: first not in docs_by_path(eng).values(), "a file moved out of the folder is forgotten")
    assert not any("lighthouse" in t for t in found(eng, "lighthouse keeper tide"))

    sub = write(b / "old-notes" / "deep.md", "The orchard's pear trees were grafted in 1998.")
    until(lambda: str(sub) in docs_by_path(eng), "a file in a new subfolder is ingested")
    shutil.rmtree(b / "old-notes")
    until(lambda: str(sub) not in docs_by_path(eng), "a removed subfolder's files are forgotten")

    assert eng.list_documents() == []
    counts = ingests(eng)
    assert counts[doc] == 2 and counts[first] == 1  # added, then replaced once; nothing read twice
    assert all(n == 1 for uid, n in counts.items() if uid != doc)
    assert not found(eng, "lighthouse quartermaster saffron molasses pear orchard")
    assert eng.stats().documents == 0


def test_links_hidden_empty_unreadable_and_oversized_files_are_skipped(watching: Engine, tmp_path: Path):
    eng = watching
    eng.ctx.settings.max_file_mb = 0.01  # a 10 KB cap for this test
    folder, outside = tmp_path / "notes", tmp_path / "outside"
    good = write(folder / "good.md", "The greenhouse key hangs behind the calendar.")
    write(outside / "secret.md", "The safe's combination is 31-17-4.")
    write(folder / ".hidden.md", "hidden words: aubergine")
    write(folder / ".git" / "notes.md", "vcs words: aubergine")
    write(folder / "node_modules" / "readme.md", "tool words: aubergine")
    write(folder / "credentials.txt", "token = aubergine")
    (folder / "link-out.md").symlink_to(outside / "secret.md")
    (folder / "dir-out").symlink_to(outside, target_is_directory=True)
    (folder / "loop").symlink_to(folder, target_is_directory=True)
    (folder / "inner").mkdir()
    (folder / "inner" / "loop-up").symlink_to(folder / "inner", target_is_directory=True)
    empty = folder / "empty.md"
    empty.touch()
    write(folder / "big.txt", "large " * 4000)
    locked = write(folder / "locked.md", "The locked diary mentions the heron by the pond.")
    locked.chmod(0)
    can_lock = not os.access(locked, os.R_OK)  # root reads anything: then the file is simply read
    held = write(folder / "held.md", "Another program holds a lock on this file about the canoe.")
    holder = open(held, "rb")  # noqa: SIM115 - held across the scan
    fcntl.flock(holder, fcntl.LOCK_EX)  # a lock another program holds does not stop (or stall) the scan

    eng.watch_add(folder)
    try:
        [report] = eng.watch_scan()
    finally:
        holder.close()
    readable = {str(good), str(held)} | (set() if can_lock else {str(locked)})
    assert set(docs_by_path(eng)) == readable
    assert report.added == len(readable) and report.skipped == 2  # the empty file and the big one
    [status] = eng.watch_status().folders
    assert status.files == len(readable) and status.skipped == 2
    if can_lock:
        assert any(e.path.endswith("locked.md") and "can't be read" in e.error for e in status.errors)
    assert not found(eng, "combination safe aubergine")

    eng.start_watching()
    until(lambda: eng.watch.watching, "the watcher starts")
    write(empty, "The empty file now says: the kayak paddles are in the shed.")
    locked.chmod(0o600)
    os.utime(locked)
    until(lambda: {str(empty), str(locked)} <= set(docs_by_path(eng)),
          "a file that gets content, and one that becomes readable, are ingested")
    until(lambda: not eng.watch_status().folders[0].errors, "their errors clear")
    assert set(docs_by_path(eng)) == {str(good), str(held), str(empty), str(locked)}
    (outside / "more.md").write_text("Outside words: aubergine.", encoding="utf-8")  # seen through dir-out
    write(folder / "after.md", "A marker written after the outside file.")
    until(lambda: str(folder / "after.md") in docs_by_path(eng), "the marker is ingested")
    assert not any(p.startswith(str(outside)) or "dir-out" in p for p in docs_by_path(eng))
    assert not found(eng, "aubergine outside words")


def test_a_folder_that_goes_away_keeps_its_documents_and_is_caught_up_when_back(watching: Engine,
                                                                                 tmp_path: Path):
    eng = watching
    stick, unplugged = tmp_path / "stick", tmp_path / "unplugged"
    one = write(stick / "one.md", "The tent pegs are in the red bag.")
    write(stick / "two.md", "The camping stove needs a new gas canister.")
    eng.watch_add(stick)
    eng.start_watching()
    until(lambda: len(docs_by_path(eng)) == 2, "the folder is indexed")
    before = ingests(eng)

    os.rename(stick, unplugged)  # the mount point goes away
    until(lambda: not eng.watch_status().folders[0].available, "the folder is marked unavailable")
    assert len(docs_by_path(eng)) == 2  # nothing forgotten
    assert any("tent pegs" in t for t in found(eng, "tent pegs red bag"))

    (unplugged / "two.md").unlink()  # changed while away
    write(unplugged / "three.md", "The sleeping bags dry on the line.")
    os.rename(unplugged, stick)  # plugged in again
    until(lambda: eng.watch_status().folders[0].available, "the folder is back")
    until(lambda: set(docs_by_path(eng)) == {str(one), str(stick / "three.md")}, "the changes are caught up")
    after = ingests(eng)
    assert after[docs_by_path(eng)[str(one)]] == before[docs_by_path(eng)[str(one)]]  # not read again


class _Crash(BaseException):
    """Stands for the process being killed in the middle of a scan."""


def test_a_scan_cut_short_by_a_crash_is_finished_by_the_next(eng: Engine, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch):
    import engine.watch as watch_module

    folder = tmp_path / "many"
    for i in range(5):
        write(folder / f"note{i}.md", f"Note number {i} is about the {['owl', 'fox', 'elk', 'yak', 'emu'][i]}.")
    eng.watch_add(folder)
    monkeypatch.setattr(watch_module, "BATCH_FILES", 2)
    real_ingest = eng.documents.ingest
    calls = []

    def crashing(paths, **kw):
        calls.append(paths)
        if len(calls) == 2:
            raise _Crash
        return real_ingest(paths, **kw)

    monkeypatch.setattr(eng.documents, "ingest", crashing)
    with pytest.raises(_Crash):
        eng.watch_scan()
    assert len(docs_by_path(eng)) == 2
    assert eng.watch_status().folders[0].scan_interrupted
    monkeypatch.setattr(eng.documents, "ingest", real_ingest)
    [report] = eng.watch_scan()  # the next start
    assert report.added == 3 and report.unchanged == 2
    assert len(docs_by_path(eng)) == 5 and not eng.watch_status().folders[0].scan_interrupted
    assert all(n == 1 for n in ingests(eng).values())


def test_a_failed_document_is_retried_only_when_its_file_changes(eng: Engine, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch):
    folder = tmp_path / "docs"
    path = write(folder / "report.md", "The budget report for the harbour project.")
    eng.watch_add(folder, project="harbour")

    def broken(texts, **kw):
        raise _Crash

    monkeypatch.setattr(eng.embedder, "encode", broken)
    with pytest.raises(_Crash):
        eng.watch_scan()  # the first attempt, killed while embedding
    for _ in range(limits.MAX_RESUME_ATTEMPTS - 1):  # the next starts resume it and are killed too
        with pytest.raises(_Crash):
            eng.resume_pending_documents()
    monkeypatch.undo()
    [given_up] = eng.resume_pending_documents()
    assert given_up.status == "failed"
    [doc] = eng.list_documents(failed=True)
    assert eng.con.execute("SELECT status FROM documents").fetchone()[0] == "failed"
    assert eng.stats().documents_failed == 1 and eng.resume_pending_documents() == []

    [report] = eng.watch_scan()  # same file: not tried again
    assert report.added == 0 and eng.list_documents(failed=True) == [doc]
    os.utime(path, (time.time() + 5, time.time() + 5))  # touched, same content: still not retried
    [report] = eng.watch_scan()
    assert report.failed == 1 and eng.list_documents(failed=True)[0].id == doc.id
    [status] = eng.watch_status().folders
    assert status.failed == 1 and status.files == 0

    write(path, "The budget report for the harbour project, revised: the pier costs 2 million.")
    [report] = eng.watch_scan()  # the file changed: tried again, and it works now
    assert report.replaced + report.added == 1
    assert eng.list_documents(failed=True) == [] and docs_by_path(eng)[str(path)] == doc.id
    assert eng.stats().documents_failed == 0 and eng.watch_status().folders[0].files == 1


def test_one_watcher_per_profile(eng: Engine, embedder, profile_home: Path, tmp_path: Path):
    folder = tmp_path / "shared"
    write(folder / "a.md", "The shared folder holds the ferry timetable.")
    eng.watch_add(folder)
    other = Engine.open(profile_home, embedder=embedder)
    try:
        eng.start_watching()
        until(lambda: eng.watch.watching, "the first engine watches")
        other.start_watching()
        assert other.watch_status().watching and not other.watch.watching  # it waits for the lock
        eng.stop_watching()
        until(lambda: other.watch.watching, "the second one takes over once the first stops")
        until(lambda: len(docs_by_path(other)) == 1, "and indexes")
        assert all(n == 1 for n in ingests(other).values())
    finally:
        other.close()


def test_adding_folders_refuses_what_cannot_be_watched(eng: Engine, tmp_path: Path, profile_home: Path):
    from engine import NotFound, UserError

    (tmp_path / "docs" / "inner").mkdir(parents=True)
    eng.watch_add(tmp_path / "docs", include=["*.md"], exclude=["drafts"])
    with pytest.raises(UserError, match="inside"):
        eng.watch_add(tmp_path / "docs" / "inner")
    with pytest.raises(UserError, match="profile"):
        eng.watch_add(profile_home)
    with pytest.raises(UserError, match="not a folder"):
        eng.watch_add(tmp_path / "missing")
    with pytest.raises(UserError, match="whole disk"):
        eng.watch_add("/")
    with pytest.raises(NotFound):
        eng.watch_remove(tmp_path / "elsewhere")
    [f] = eng.watch_status().folders
    assert f.include == ["*.md"] and f.exclude == ["drafts"]

    write(tmp_path / "docs" / "keep.md", "Kept: the bike lock code.")
    write(tmp_path / "docs" / "skip.txt", "Not included: a text file.")
    write(tmp_path / "docs" / "drafts" / "draft.md", "Excluded: a draft.")
    eng.watch_scan()
    assert set(docs_by_path(eng)) == {str(tmp_path / "docs" / "keep.md")}
    eng.watch_add(tmp_path / "docs", include=["*.md", "*.txt"], exclude=["drafts", "keep.*"])  # patterns change
    eng.watch_scan()
    assert set(docs_by_path(eng)) == {str(tmp_path / "docs" / "skip.txt")}  # excluded now: forgotten

    paused = eng.watch_pause(tmp_path / "docs")
    assert paused.paused and eng.watch_scan() == []
    assert not eng.watch_pause(tmp_path / "docs", False).paused
    removed = eng.watch_remove(tmp_path / "docs")
    assert removed.kept == 1 and len(eng.list_documents()) == 1  # documents stay unless forgotten
    eng.watch_add(tmp_path / "docs")
    assert eng.watch_remove(tmp_path / "docs", forget=True).forgotten == 1 and eng.list_documents() == []


def test_the_migration_gives_given_up_documents_the_failed_status(tmp_path: Path):
    import sqlcipher3

    con = sqlcipher3.connect(str(tmp_path / "old.db"), isolation_level=None)
    con.execute("PRAGMA key = \"x'" + "ab" * 32 + "'\"")
    con.execute("PRAGMA foreign_keys = ON")
    for step in MIGRATIONS[:3]:
        con.execute("BEGIN")
        step(con)
        con.execute("COMMIT")
    con.execute("PRAGMA user_version = 3")
    for i, (status, meta) in enumerate([("ready", "{}"), ("pending", json.dumps({"failed": "interrupted"})),
                                        ("pending", json.dumps({"attempts": 1}))]):
        con.execute("INSERT INTO documents(uid, path, title, mime, content_hash, status, created_at, updated_at, "
                    "meta) VALUES (?, ?, 't', 'text/plain', 'h', ?, 0, 0, ?)", (f"doc_{i}", f"/x/{i}", status, meta))
    con.execute("INSERT INTO chunks(uid, document_id, position, text, content_hash) VALUES ('chk_0', 1, 0, "
                "'kept text', 'h')")
    assert migrate(con) == len(MIGRATIONS) - 3
    assert con.execute("SELECT uid, status FROM documents ORDER BY id").fetchall() == [
        ("doc_0", "ready"), ("doc_1", "failed"), ("doc_2", "pending")]
    assert con.execute("SELECT count(*) FROM chunks").fetchone()[0] == 1  # nothing cascaded away
    # the documents' tallies (m007) start from the statuses the migrations left
    assert dict(con.execute("SELECT name, n FROM tallies WHERE name LIKE 'd:%'").fetchall()) == {
        "d:ready": 1, "d:failed": 1, "d:pending": 1}
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with pytest.raises(sqlcipher3.IntegrityError):
        con.execute("UPDATE documents SET status = 'bogus' WHERE id = 1")
    con.close()


def test_watched_folders_from_every_door(eng: Engine, tmp_path: Path):
    """HTTP (GET /watch, GET /documents?failed=true, a watched folder allowed for POST /ingest) and the CLI."""
    import httpx
    import uvicorn

    from engine.api import bind_socket, create_app

    folder = tmp_path / "library"
    note = write(folder / "note.md", "The library card number is 4417.")
    eng.watch_add(folder, project="books")
    token = eng.api_token()
    sock = bind_socket(0)
    server = uvicorn.Server(uvicorn.Config(create_app(eng, token, []), access_log=False, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    until(lambda: server.started, "the server starts")
    try:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
            r = client.post("/ingest", json={"paths": [str(note)]})  # a watched folder is an allowed one
            assert r.status_code == 200 and r.json()[0]["status"] == "added", r.text
            body = client.get("/watch").json()
            assert body["watching"] is False
            [f] = body["folders"]
            assert f["path"] == str(folder) and f["project"] == "books" and f["files"] == 1
            assert client.post("/watch", json={}).status_code == 405  # read-only
            assert [d["path"] for d in client.get("/documents").json()] == [str(note)]
            assert client.get("/documents", params={"failed": "true"}).json() == []
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()


def test_the_watch_commands(profile_home: Path, tmp_path: Path):
    """`personal-llm watch add|run --once|list|remove` and `documents`, as a user runs them (pause and resume
    are the engine's, tested above)."""
    import subprocess
    import sys

    cli = shutil.which("personal-llm", path=str(Path(sys.executable).parent)) or "personal-llm"

    def run(*args: str):
        p = subprocess.run([cli, *args, "--json"], capture_output=True, text=True, timeout=300, env=os.environ)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    folder = tmp_path / "recipes"
    note = write(folder / "bread.md", "Sourdough: feed the starter the night before baking.")
    added = run("watch", "add", str(folder), "--project", "kitchen", "--include", "*.md", "--exclude", "old")
    assert added["path"] == str(folder) and added["project"] == "kitchen" and added["include"] == ["*.md"]
    [report] = run("watch", "run", "--once")
    assert report["added"] == 1
    listed = run("watch", "list")
    assert listed["watching"] is False and listed["folders"][0]["files"] == 1  # no watcher runs now
    [doc] = run("documents")
    assert doc["path"] == str(note) and doc["project"] == "kitchen"
    p = subprocess.run([cli, "watch", "remove", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "not a watched folder" in p.stderr and "Traceback" not in p.stderr
