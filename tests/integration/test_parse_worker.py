"""Documents read in helper processes (engine/parse_worker.py): what a process that stays open does."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine import parse_worker
from engine.ocr import OcrCancelled, OcrOptions
from engine.parse_worker import Readers
from engine.parsers import DocumentError, parse_file
from tests.fixtures_docs import make_docx, make_pdf

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = ("pypdf", "pypdfium2", "docx", "pptx", "openpyxl", "odf", "lxml", "trafilatura", "PIL")


def _files(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "docs"
    folder.mkdir()
    make_pdf(folder / "orchard.pdf", ["The orchard has forty apple trees planted in 1998.",
                                      "The pear trees were grafted by the neighbour."], title="Orchard")
    make_docx(folder / "plan.docx")
    (folder / "page.html").write_text("<html><head><title>Tides</title></head><body><h1>Tides</h1>"
                                      "<p>The spring tide reaches the third step of the harbour wall.</p>"
                                      "</body></html>", encoding="utf-8")
    (folder / "note.md").write_text("# Bees\n\nThe bees swarmed on the second of May.\n", encoding="utf-8")
    return {p.suffix: p for p in folder.iterdir()}


def _stub(tmp_path: Path, body: str) -> list[str]:
    """A helper command running this instead of the real helper: a process that misbehaves for real."""
    script = tmp_path / "stub_helper.py"
    script.write_text(f"import struct, sys, pickle, time\n{body}\n", encoding="utf-8")
    return [sys.executable, str(script)]


READY = ("out = sys.stdout.buffer\n"
         "def send(m):\n"
         "    d = pickle.dumps(m); out.write(struct.pack('<I', len(d)) + d); out.flush()\n"
         "send(('ready',))\n"
         "sys.stdin.buffer.read(4)\n")


def test_a_process_that_stays_open_reads_documents_without_importing_their_libraries(tmp_path: Path):
    """The same chunks as a read in place, and none of the readers' libraries in the process (a fresh one:
    this test process has imported them long ago)."""
    files = sorted(_files(tmp_path).values())
    script = r"""
import json, sys
from pathlib import Path
from engine import Engine
eng = Engine.open(Path(sys.argv[1]), actor="sdk")
eng.documents.readers.use_helpers(sys.argv[2] == "1")
results = eng.ingest([Path(p) for p in sys.argv[4:]])
texts = sorted(t for (t,) in eng.con.execute("SELECT text FROM chunks"))
libraries = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[3].split(",")))
print(json.dumps({"status": [r.status for r in results], "texts": texts, "libraries": libraries,
                  "started": eng.documents.readers.started}))
eng.close()
"""
    out = {}
    for on in ("1", "0"):
        proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / f"home{on}"), on, ",".join(LIBRARIES),
                               *map(str, files)],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[on] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["1"]["status"] == out["0"]["status"] == ["added"] * 4
    assert out["1"]["texts"] == out["0"]["texts"] and any("forty apple trees" in t for t in out["1"]["texts"])
    assert out["1"]["libraries"] == [] and out["1"]["started"] == 1  # one helper read the PDF, DOCX and HTML
    assert {"pypdf", "docx"} <= set(out["0"]["libraries"]) and out["0"]["started"] == 0


def test_a_helper_answers_a_damaged_file_as_a_read_in_place_does_and_reads_the_next(tmp_path: Path):
    bad = tmp_path / "broken.pdf"
    bad.write_bytes(b"%PDF-1.7\n" + b"\x00garbage" * 500)
    good = _files(tmp_path)[".pdf"]
    with pytest.raises(DocumentError) as in_place:
        parse_file(bad, max_bytes=10**8)
    readers = Readers()
    readers.use_helpers()
    try:
        with pytest.raises(DocumentError) as helped:
            readers.parse(bad, max_bytes=10**8, ocr=OcrOptions())
        assert type(helped.value) is type(in_place.value) and str(helped.value) == str(in_place.value)
        assert readers.parse(good, max_bytes=10**8, ocr=OcrOptions()) == parse_file(good, max_bytes=10**8)
        assert readers.started == 1 and readers.helpers() == 1
    finally:
        readers.close()
    assert readers.helpers() == 0


def test_a_helper_that_dies_mid_file_fails_that_file_and_the_next_gets_a_new_one(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch):
    pdf = _files(tmp_path)[".pdf"]
    real = parse_worker.helper_command()
    monkeypatch.setattr(parse_worker, "helper_command", lambda: _stub(tmp_path, READY + "sys.exit(3)"))
    readers = Readers()
    readers.use_helpers()
    try:
        with pytest.raises(DocumentError, match="orchard.pdf could not be read: its reader stopped"):
            readers.parse(pdf, max_bytes=10**8, ocr=OcrOptions())
        assert readers.helpers() == 0
        monkeypatch.setattr(parse_worker, "helper_command", lambda: real)
        assert readers.parse(pdf, max_bytes=10**8, ocr=OcrOptions()).title == "Orchard"
        assert readers.started == 2
    finally:
        readers.close()


def test_a_helper_that_cannot_start_leaves_files_read_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture):
    pdf = _files(tmp_path)[".pdf"]
    for command in ([str(tmp_path / "no-such-program")], _stub(tmp_path, "sys.exit(1)"), None):
        monkeypatch.setattr(parse_worker, "helper_command", lambda c=command: c)
        readers = Readers()
        readers.use_helpers()
        caplog.clear()
        with caplog.at_level("WARNING", logger="engine.parse_worker"):
            assert readers.parse(pdf, max_bytes=10**8, ocr=OcrOptions()).title == "Orchard"
            assert readers.parse(pdf, max_bytes=10**8, ocr=OcrOptions()).title == "Orchard"
        assert len(caplog.records) == 1 and "reading in this process" in caplog.records[0].getMessage()
        readers.close()


def test_cancelling_stops_the_helper_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A file whose reading never ends (the stub never answers): cancel stops it within a poll."""
    pdf = _files(tmp_path)[".pdf"]
    monkeypatch.setattr(parse_worker, "helper_command", lambda: _stub(tmp_path, READY + "time.sleep(600)"))
    readers = Readers()
    readers.use_helpers()
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    t0 = time.monotonic()
    with pytest.raises(OcrCancelled):
        readers.parse(pdf, max_bytes=10**8, ocr=OcrOptions(cancel=cancel))
    assert time.monotonic() - t0 < 3
    assert readers.helpers() == 0
    readers.close()


def test_an_idle_helper_exits_and_the_next_file_starts_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(parse_worker, "IDLE_SECONDS", 0.6)
    pdf = _files(tmp_path)[".pdf"]
    readers = Readers()
    readers.use_helpers()
    try:
        readers.parse(pdf, max_bytes=10**8, ocr=OcrOptions())
        assert readers.helpers() == 1
        deadline = time.monotonic() + 5
        while readers.helpers() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert readers.helpers() == 0
        assert readers.parse(pdf, max_bytes=10**8, ocr=OcrOptions()).title == "Orchard"
        assert readers.started == 2
    finally:
        readers.close()


def test_plain_text_kinds_are_read_in_place(tmp_path: Path):
    note = _files(tmp_path)[".md"]
    readers = Readers()
    readers.use_helpers()
    assert readers.parse(note, max_bytes=10**8, ocr=OcrOptions()) == parse_file(note, max_bytes=10**8)
    assert readers.started == 0
    readers.close()


def test_the_engine_reads_in_helpers_once_its_background_starts_and_stops_them_when_it_closes(eng, tmp_path: Path):
    files = sorted(_files(tmp_path).values())
    eng.start_background()
    results = eng.ingest(files)
    assert [r.status for r in results] == ["added"] * 4
    assert eng.documents.readers.started == 1 and eng.documents.readers.helpers() == 1
    eng.close()
    assert eng.documents.readers.helpers() == 0
