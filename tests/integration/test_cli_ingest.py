"""`personal-llm ingest` as a user runs it: JSON results, exit codes, limits, then forget end to end."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.fixtures_docs import MARKDOWN, make_bad
from tests.integration.test_cli import CLI, run


def ingest_json(*args: str) -> tuple[int, list[dict]]:
    p = run("ingest", *args, "--json")
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout)


def test_ingest_reports_every_file_and_exits_1_when_any_failed(profile_home: Path, tmp_path: Path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "handbook.md").write_text(MARKDOWN, encoding="utf-8")
    (docs / "notes.txt").write_text("The CLI fact: the canoe is stored under the porch.", encoding="utf-8")
    bad = make_bad(docs / "bad")
    code, results = ingest_json(str(docs), "--project", "house")
    assert code == 1
    assert all(r.keys() == {"path", "document_id", "chunks", "status", "error"} for r in results)
    by_name = {Path(r["path"]).name: r for r in results}
    assert by_name["handbook.md"]["status"] == by_name["notes.txt"]["status"] == "added"
    assert by_name["handbook.md"]["document_id"].startswith("doc_") and by_name["handbook.md"]["chunks"] > 1
    assert by_name["report.pdf"]["status"] == "failed" and "not a valid PDF" in by_name["report.pdf"]["error"]
    assert by_name["empty.md"] == {"path": str(bad["empty"]), "document_id": None, "chunks": 0,
                                   "status": "failed", "error": "empty.md is empty"}
    assert "archive.xyz" not in by_name  # unsupported types inside folders are not candidates

    # unchanged files and a file over --max-mb, in human form: a table, exit 1 for the one that failed
    big = tmp_path / "big.txt"
    big.write_text("A line of a large file.\n" * 5000, encoding="utf-8")
    p = run("ingest", str(docs / "handbook.md"), str(docs / "notes.txt"), str(big), "--max-mb", "0.05")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "unchanged" in p.stdout and "too big" in p.stdout and "{" not in p.stdout
    assert "2 unchanged, 1 failed" in p.stdout

    code, again = ingest_json(str(docs / "handbook.md"), str(docs / "notes.txt"))
    assert code == 0 and [r["status"] for r in again] == ["unchanged", "unchanged"]
    p = run("ingest", str(docs / "notes.txt"), "--max-mb", "0")
    assert p.returncode == 1 and p.stderr.startswith("error: --max-mb must be a positive")

    stats = json.loads(run("stats", "--json").stdout)
    assert stats["documents"] == 2 and stats["chunks"] == by_name["handbook.md"]["chunks"] + 1

    # forget a document by id: its chunks, vectors, FTS rows and ingest memory leave recall
    doc_id = by_name["notes.txt"]["document_id"]
    gone = json.loads(run("forget", doc_id, "--json").stdout)
    assert gone["type"] == "document" and gone["removed"]["chunks"] == 1 and gone["removed"]["memories"] == 1
    hits = json.loads(run("recall", "where is the canoe stored", "--json").stdout)
    assert all("canoe" not in h["text"] and "notes.txt" not in h["text"] for h in hits)
    assert any(h["kind"] == "chunk" and h["document_id"] == by_name["handbook.md"]["document_id"]
               and h["locator"] for h in json.loads(run("recall", "frob config file on Linux", "--json").stdout))
    stats = json.loads(run("stats", "--json").stdout)
    assert stats["documents"] == 1 and stats["chunks"] == by_name["handbook.md"]["chunks"]
    # in human form on an 80-column terminal, where a passage is from reads whole under its text
    shown = run("recall", "frob config file on Linux", env={**os.environ, "COLUMNS": "80"}).stdout
    assert "Handbook · Setup › Linux" in shown, shown
    assert run("forget", doc_id).returncode == 1
    code, back = ingest_json(str(docs / "notes.txt"))  # in human form: "1 chunk", not "1 chunks"
    shown = run("forget", back[0]["document_id"]).stdout
    assert "(1 chunk" in shown and "1 chunks" not in shown, shown


def test_an_obsidian_import_shows_its_progress_on_a_terminal(profile_home: Path, tmp_path: Path):
    import pty
    import select

    vault = tmp_path / "vault"
    (vault / ".obsidian").mkdir(parents=True)
    words = "garden budget trip kitchen invoice doctor school birthday train museum river bread".split()
    body = "\n\n".join(" ".join(words[(i * 7 + j) % len(words)] for j in range(60)) + f" note {i}." for i in range(400))
    (vault / "Long note.md").write_text("# Long note\n\n" + body, encoding="utf-8")
    master, slave = pty.openpty()
    p = subprocess.Popen([CLI, "import", "obsidian", str(vault)], stdin=slave, stdout=slave, stderr=slave,
                         env={**os.environ, "COLUMNS": "120"})
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait(60) == 0
    shown = out.decode("utf-8", "replace")
    assert "indexing Long note.md" in shown and "chunks)" in shown, shown[-2000:]  # as `ingest` shows it
    assert "Imported 1 note and attachments" in shown


def _pending_documents(home: Path) -> int:
    from engine import Engine
    from engine.embeddings import NoEmbedder

    with Engine.open(home, embedder=NoEmbedder()) as eng:
        return int(eng.con.execute("SELECT count(*) FROM documents WHERE status = 'pending'").fetchone()[0])


def test_a_killed_ingest_is_named_by_stats_and_finished_by_the_next_ingest(profile_home: Path, tmp_path: Path):
    """kill -9 of `personal-llm ingest` while it indexes: `stats` names the documents it left half-indexed
    (every door reads the same stats), and the next `personal-llm ingest` finishes them."""
    import signal
    import time

    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(6):
        paragraphs = [f"Paragraph {i} of report {n}: the quarterly figures for region {i % 7} rose again."
                      for i in range(400)]
        (docs / f"report-{n}.md").write_text(f"# Report {n}\n\n" + "\n\n".join(paragraphs), encoding="utf-8")
    (docs / "report-3.md").write_text("# The boat\n\nThe dinghy is moored at the north jetty, ring 14.\n\n"
                                      + (docs / "report-3.md").read_text(encoding="utf-8"), encoding="utf-8")
    assert run("stats").returncode == 0  # the store exists before the ingest starts
    proc = subprocess.Popen([CLI, "ingest", str(docs)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while _pending_documents(profile_home) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "the ingest ended before it could be killed"
            time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    left = _pending_documents(profile_home)
    assert left >= 2

    stats = json.loads(run("stats", "--json").stdout)
    assert stats["documents_interrupted"] == left
    assert any(f"{left} documents were left half-indexed" in n and "personal-llm ingest" in n for n in stats["notes"])

    (tmp_path / "later.txt").write_text("The spare key is under the blue pot.", encoding="utf-8")
    p = run("ingest", str(tmp_path / "later.txt"), "--json")
    assert p.returncode == 0, p.stderr
    assert f"note: finished {left} documents an interrupted ingest had left half-indexed" in p.stderr
    assert _pending_documents(profile_home) == 0
    stats = json.loads(run("stats", "--json").stdout)
    assert stats["documents_interrupted"] == 0 and not any("half-indexed" in n for n in stats["notes"])
    run("ingest", str(docs))  # the files it never reached
    hits = json.loads(run("recall", "where is the dinghy moored", "--json").stdout)
    assert "north jetty" in hits[0]["text"]
