"""Scanned pages and pictures read by OCR, slides and spreadsheets: files the tests build with known text,
parsed and ingested into a real store and found by recall with their locators."""

from __future__ import annotations

import struct
import threading
import zipfile
import zlib
from pathlib import Path

import pytest

from engine import Engine
from engine.ingest import IngestProgress
from engine.parsers import DocumentError, OcrOptions, UnsupportedDocument, parse_file
from tests.formats_fixtures import make_ods, make_png, make_pptx, make_scanned_pdf, make_xlsx

MB = 1024 * 1024
HERON = ["The grey heron migrates in October", "Invoice number 4471"]


def chunk_hit(eng: Engine, query: str, title: str):
    hits = [h for h in eng.recall(query, k=8) if h.kind == "chunk" and h.document_title == title]
    assert hits, f"no chunk of {title} for {query!r}"
    return hits[0]


def test_ocr_of_a_scanned_pdf_page_and_a_png_found_by_recall_with_page(eng: Engine, tmp_path: Path):
    pdf = make_scanned_pdf(tmp_path / "scan.pdf", "A typed cover letter about the bird survey.", HERON)
    png = make_png(tmp_path / "receipt.png", ["Lighthouse keeper salary", "paid on Tuesday"])
    seen: list[IngestProgress] = []
    results = eng.ingest([pdf, png], progress=seen.append)
    assert [r.status for r in results] == ["added", "added"], results
    hit = chunk_hit(eng, "when does the heron migrate", "scan.pdf")
    assert "heron migrates in October" in hit.text and hit.locator == "page 2 · OCR"
    cover = chunk_hit(eng, "typed cover letter bird survey", "scan.pdf")
    assert cover.locator == "page 1"  # the page with a text layer is not read by OCR
    receipt = chunk_hit(eng, "lighthouse keeper salary", "receipt.png")
    assert "paid on Tuesday" in receipt.text and receipt.locator == "page 1 · OCR"
    docs = {d.title: d for d in eng.list_documents()}
    assert docs["scan.pdf"].ocr_pages == [2] and docs["receipt.png"].ocr_pages == [1]
    assert docs["receipt.png"].mime == "image/png"
    ocr_steps = [(p.current_file, p.pages_done, p.pages_total) for p in seen if p.pages_total]
    assert (str(pdf), 1, 1) in ocr_steps and (str(png), 1, 1) in ocr_steps


def test_ocr_can_be_turned_off_and_cancelled(eng: Engine, tmp_path: Path):
    png = make_png(tmp_path / "note.png", ["Quince jam recipe"])
    scan = make_scanned_pdf(tmp_path / "scan.pdf", "", HERON)
    with pytest.raises(UnsupportedDocument, match=r"OCR\) is turned off: turn it on with `personal-llm config set"):
        parse_file(png, max_bytes=MB, ocr=OcrOptions(enabled=False))
    with pytest.raises(UnsupportedDocument, match=r"^scan\.pdf has no text layer \(scanned\?\) and reading scanned"):
        parse_file(scan, max_bytes=MB, ocr=OcrOptions(enabled=False))
    settings = eng.settings.model_copy(deep=True)
    settings.ocr.enabled = False
    eng.apply_settings(settings)
    [r] = eng.ingest([png])
    assert r.status == "failed" and "turned off" in (r.error or "")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "note.md").write_text("# Jam\n\nQuince jam needs lemon.\n", encoding="utf-8")
    make_png(folder / "photo.png", ["Quince jam recipe"])
    assert [Path(r.path or "").name for r in eng.ingest([folder])] == ["note.md"]  # pictures passed over
    settings.ocr.enabled = True
    eng.apply_settings(settings)
    cancel = threading.Event()
    documents = eng.con.execute("SELECT count(*) FROM documents").fetchone()[0]
    results = eng.ingest([scan, png], cancel=cancel, progress=lambda p: cancel.set() if p.stage == "parsing" else None)
    assert [r.error for r in results] == ["cancelled", "cancelled"]  # stopped before the first page was read
    assert eng.con.execute("SELECT count(*) FROM documents").fetchone()[0] == documents


def test_hostile_pictures_are_refused_before_decoding(tmp_path: Path):
    from PIL import Image

    big = tmp_path / "big.png"
    Image.new("1", (8_000, 6_000)).save(big)  # 48 megapixels in a few kilobytes
    assert big.stat().st_size < MB
    with pytest.raises(DocumentError, match=r"^big\.png is 8,000 x 6,000 pixels, more than the limit of 40 million"):
        parse_file(big, max_bytes=MB)
    bomb = tmp_path / "bomb.png"  # a header declaring 100,000 x 100,000 pixels, and nothing else
    ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    bomb.write_bytes(b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr
                     + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr)) + b"\x00\x00\x00\x00IEND\xaeB`\x82")
    with pytest.raises(DocumentError, match=r"^bomb\.png declares a picture of more than 40 million pixels"):
        parse_file(bomb, max_bytes=MB)
    fake = tmp_path / "fake.png"
    fake.write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n")  # PostScript named .png
    with pytest.raises(DocumentError, match=r"^fake\.png is damaged or not a valid PNG image file$"):
        parse_file(fake, max_bytes=MB)


def test_slides_with_notes_found_by_recall_with_slide_locators(eng: Engine, tmp_path: Path):
    deck = make_pptx(tmp_path / "review.pptx")
    doc = parse_file(deck, max_bytes=MB)
    assert doc.title == "Quarterly review"
    assert [s.heading_path for s in doc.sections] == [
        ["slide 1", "Roadmap"], ["slide 2", "Budget"], ["slide 2", "Budget", "speaker notes"]]
    assert "Team: Research; Cost: 3400" in doc.sections[1].text  # a table reads as rows, not a cell soup
    eng.ingest([deck])
    notes = chunk_hit(eng, "marmalade budget frozen", "Quarterly review")
    assert notes.locator == "slide 2 › Budget › speaker notes"
    roadmap = chunk_hit(eng, "lighthouse feature spring", "Quarterly review")
    assert roadmap.locator == "slide 1 › Roadmap"


def test_spreadsheets_as_readable_rows_with_sheet_and_row_locators(eng: Engine, tmp_path: Path):
    book = make_xlsx(tmp_path / "club.xlsx")
    doc = parse_file(book, max_bytes=MB)
    members = doc.sections[0]
    assert members.heading_path == ["Members", "rows 2–3"]
    assert members.text.split("\n") == ["Name: Ada; City: Zürich; Joined: 2021-03-04",
                                        "Name: Grace; City: Arlington; Joined: 2019-07-01"]
    inventory = [s for s in doc.sections if s.heading_path[0] == "Inventory"]
    assert [s.heading_path[1] for s in inventory][0] == "rows 2–41" and len(inventory) == 2
    assert inventory[0].text.split("\n")[2] == "Item: widget 3; Count: 9"  # 9.0 reads as people write it
    plants = make_ods(tmp_path / "plants.ods")
    ods = parse_file(plants, max_bytes=MB)
    assert [(s.heading_path, s.text) for s in ods.sections] == [
        (["Plants", "rows 2–1003"], "Plant: Fern; Water: weekly\nPlant: Cactus; Water: monthly")]
    eng.ingest([book, plants])
    quills = chunk_hit(eng, "porcupine quills count", "club.xlsx")
    assert quills.locator == "Inventory › rows 42–62" and "Item: porcupine quills; Count: 42" in quills.text
    ada = chunk_hit(eng, "Which member lives in Zürich?", "club.xlsx")
    assert ada.locator == "Members › rows 2–3"
    cactus = chunk_hit(eng, "how often to water the cactus", "plants.ods")
    assert cactus.locator == "Plants › rows 2–1003"


def test_spreadsheet_containers_keep_the_zip_and_cell_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import engine.limits as limits

    book = make_xlsx(tmp_path / "club.xlsx")
    monkeypatch.setattr(limits, "MAX_SHEET_CELLS", 50)
    with pytest.raises(DocumentError, match=r"^club\.xlsx has more than 50 cells; not read"):
        parse_file(book, max_bytes=MB)
    bomb = tmp_path / "bomb.ods"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.spreadsheet")
        z.writestr("content.xml", '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><x>&a;</x>')
    with pytest.raises(DocumentError, match="declares XML entities"):
        parse_file(bomb, max_bytes=MB)


def test_cli_turns_ocr_off(tmp_path: Path):
    from tests.integration.test_cli import ok_json, run

    assert ok_json("config", "set", "ocr.enabled", "false") == {"ocr.enabled": False}
    png = make_png(tmp_path / "note.png", ["Quince jam recipe"])
    p = run("ingest", str(png), "--json")
    assert "reading text from pictures (OCR) is turned off" in p.stdout and "Traceback" not in p.stderr
    p = run("config", "set", "ocr.enabled", "maybe")
    assert p.returncode != 0 and "use true or false" in p.stderr
    assert "ocr.enabled = false" in run("config", "get").stdout
