"""Parse real generated files of every supported type, chunk them, and find each hidden fact."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from engine.chunking import chunk_document, make_token_counter
from engine.errors import UserError
from engine.parsers import (
    SUPPORTED_EXTENSIONS,
    DocumentError,
    UnsupportedDocument,
    content_hash,
    parse_file,
    parse_text,
)
from tests.fixtures_docs import HTML_PAGE, make_all, make_bad, make_encrypted_pdf

MB = 1024 * 1024


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return make_all(tmp_path_factory.mktemp("good"))


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    return make_bad(tmp_path_factory.mktemp("bad"))


@pytest.fixture(scope="module")
def count():
    return make_token_counter()


def parse_and_chunk(path: Path, count):
    doc = parse_file(path, max_bytes=10 * MB)
    return doc, chunk_document(doc, count_tokens=count)


GOOD_NAMES = [
    "report.pdf", "plan.docx", "docx-table.docx", "book.epub", "store.odt", "guide.html", "handbook.md",
    "notes.txt", "legacy.txt", "pets.csv", "config.json", "events.jsonl", "tax.py",
]


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_fact_is_found_with_its_locator(good, count, name):
    path, expected = good[name]
    doc, chunks = parse_and_chunk(path, count)
    hits = [ch for ch in chunks if expected.fact in ch.text]
    assert hits, [ch.text for ch in chunks]
    assert any(expected.locator_part in ch.locator for ch in hits), [ch.locator for ch in hits]
    if expected.title:
        assert doc.title == expected.title
    assert doc.mime
    assert [ch.position for ch in chunks] == list(range(len(chunks)))


def test_every_fixture_type_is_supported(good):
    assert {p.suffix for p, _ in good.values()} <= SUPPORTED_EXTENSIONS


def test_pdf_pages(good, count):
    doc, chunks = parse_and_chunk(good["report.pdf"][0], count)
    assert [s.page for s in doc.sections] == [1, 2, 3]
    (hit,) = [ch for ch in chunks if "blue heron" in ch.text]
    assert hit.page == 2 and hit.locator == "page 2"
    assert doc.mime == "application/pdf"


def test_pdf_with_empty_user_password_opens(tmp_path):
    path = make_encrypted_pdf(tmp_path / "open.pdf", password="")
    doc = parse_file(path, max_bytes=MB)
    assert "Top secret text" in doc.sections[0].text


def test_docx_headings_and_tables(good):
    doc = parse_file(good["plan.docx"][0], max_bytes=MB)
    paths = [s.heading_path for s in doc.sections]
    assert paths == [["Overview"], ["Overview", "Budget"], ["Schedule"]]
    budget = doc.sections[1].text
    assert "Item: Seeds; Cost: 35 euros" in budget and "Item: Greenhouse; Cost: 900 euros" in budget


def test_html_drops_navigation_scripts_and_styles(good, count):
    doc, chunks = parse_and_chunk(good["guide.html"][0], count)
    everything = "\n".join(ch.text for ch in chunks)
    for secret in ("SCRIPT_SECRET", "STYLE_SECRET", "NAV_SECRET", "FOOTER_SECRET"):
        assert secret not in everything
    assert ["Setup", "Windows"] in [s.heading_path for s in doc.sections]


def test_short_html_page_keeps_its_headings(tmp_path, count):
    path = tmp_path / "tiny.htm"
    path.write_text("<html><body><h1>Notes</h1><p>Intro.</p><h2>Budget</h2><p>Spend 12 euros.</p>"
                    "<script>x()</script></body></html>", encoding="utf-8")
    doc, chunks = parse_and_chunk(path, count)
    (hit,) = [ch for ch in chunks if "Spend 12 euros." in ch.text]
    assert hit.locator == "Budget"
    assert "x()" not in " ".join(ch.text for ch in chunks)


def test_html_in_a_legacy_encoding(tmp_path):
    path = tmp_path / "old.html"
    path.write_bytes(HTML_PAGE.replace("Before installing", "Café’s façade: before installing").encode("cp1252"))
    doc = parse_file(path, max_bytes=MB)
    assert any("Café’s façade" in s.text for s in doc.sections)


def test_markdown_heading_paths_and_code_fences(good):
    doc = parse_file(good["handbook.md"][0], max_bytes=MB)
    by_path = {tuple(s.heading_path): s.text for s in doc.sections}
    assert doc.title == "Handbook"  # the lone H1 is the title, not a level of every path
    assert set(by_path) == {(), ("Setup",), ("Setup", "Linux"), ("Setup", "macOS"), ("Usage",)}
    assert "# a comment, not a heading" in by_path[("Setup", "Linux")]


def test_epub_chapters(good):
    doc = parse_file(good["book.epub"][0], max_bytes=MB)
    assert [s.heading_path for s in doc.sections] == [["The Harbour"], ["The Lighthouse"]]


def test_odt_headings_and_table(good):
    doc = parse_file(good["store.odt"][0], max_bytes=MB)
    assert [s.heading_path for s in doc.sections] == [["Warehouse"], ["Warehouse", "Inventory"]]
    assert "Product: Ladles; Count: 14" in doc.sections[1].text


def test_cp1252_text_is_decoded(good):
    doc = parse_file(good["legacy.txt"][0], max_bytes=MB)
    text = doc.sections[0].text
    assert "Le café de Zoë" in text and "L’été dernier" in text and "“ochre”" in text


def test_utf16_with_bom(tmp_path):
    path = tmp_path / "wide.txt"
    path.write_bytes("Ünïcode in UTF-16: 東京.".encode("utf-16"))
    assert parse_file(path, max_bytes=MB).sections[0].text == "Ünïcode in UTF-16: 東京."


def test_python_sections_per_definition(good):
    doc = parse_file(good["tax.py"][0], max_bytes=MB)
    assert [s.heading_path for s in doc.sections] == [[], ["def compute_tax"], ["class Ledger"]]
    assert doc.sections[1].first_line == 8


def test_json_sections_per_top_level_key(good):
    doc = parse_file(good["config.json"][0], max_bytes=MB)
    assert [(s.heading_path, s.text) for s in doc.sections] == [
        (["owner"], "Dana"), (["project"], "codename: Bluebird\ntags: a, b"),
    ]


def test_parse_text_is_markdown():
    doc = parse_text("Intro.\r\n\r\n# Trip\n\n## Day 1\n\nWe saw the sea.\n\n# Home\n\nTired.", title="Holiday")
    assert doc.title == "Holiday" and doc.mime == "text/markdown"
    assert [(s.heading_path, s.text) for s in doc.sections] == [
        ([], "Intro."), (["Trip", "Day 1"], "We saw the sea."), (["Home"], "Tired."),
    ]
    with pytest.raises(DocumentError, match="empty"):
        parse_text(" \n\n ", title="Blank")


def test_content_hash(good):
    path = good["report.pdf"][0]
    assert content_hash(path) == hashlib.sha256(path.read_bytes()).hexdigest()


# --- errors people can act on ----------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "error", "message"), [
    ("corrupt_pdf", DocumentError, r"^report\.pdf is damaged or not a valid PDF file$"),
    ("encrypted_pdf", UnsupportedDocument, r"^locked\.pdf is encrypted: remove the password and try again$"),
    ("scanned_pdf", UnsupportedDocument, r"^scan\.pdf has no text layer \(scanned\?\)"),
    ("binary_txt", UnsupportedDocument, r"^photo\.txt looks like a binary file, not text$"),
    ("empty", DocumentError, r"^empty\.md is empty$"),
    ("unknown", UnsupportedDocument, r"^archive\.xyz: \.xyz files aren't supported\. Supported types: .*\.pdf"),
    ("corrupt_docx", DocumentError, r"^broken\.docx is damaged or not a valid Word \(\.docx\) file$"),
    ("bad_json", DocumentError, r"^broken\.json is not valid JSON \(line 2, column 7\)$"),
])
def test_bad_files_raise_readable_errors(bad, kind, error, message):
    with pytest.raises(error, match=message) as info:
        parse_file(bad[kind], max_bytes=10 * MB)
    assert isinstance(info.value, UserError)


def test_size_limit_names_megabytes(tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("word " * 3 * MB, encoding="utf-8")
    with pytest.raises(DocumentError, match=r"^big\.txt is too big \(15 MB\); the limit is 10 MB$"):
        parse_file(path, max_bytes=10 * MB)


def test_missing_file(tmp_path):
    with pytest.raises(DocumentError, match="doesn't exist"):
        parse_file(tmp_path / "gone.txt", max_bytes=MB)


def test_binary_without_nul_bytes_is_refused(tmp_path):
    path = tmp_path / "noise.log"
    path.write_bytes(bytes(b for b in range(1, 32) if b not in (9, 10, 13)) * 200)
    with pytest.raises(UnsupportedDocument, match="binary"):
        parse_file(path, max_bytes=MB)


def test_a_placeholder_title_in_a_files_properties_gives_way_to_its_name(tmp_path):
    from tests.fixtures_docs import make_pdf

    for given, expected in (("untitled", "trip-notes.pdf"), ("Untitled Document", "trip-notes.pdf"),
                            ("Harbour trip notes", "Harbour trip notes")):
        path = make_pdf(tmp_path / "trip-notes.pdf", ["The ferry leaves the harbour at seven."], title=given)
        assert parse_file(path, max_bytes=10_000_000).title == expected


def test_a_log_written_for_a_terminal_is_text_without_its_colour_codes(tmp_path):
    lines = [f"2024-05-01 10:{i:02d} \x1b[32mINFO\x1b[0m backup {i} done \x1b]8;;http://x\x07link\x1b]8;;\x07\n"
             for i in range(60)]
    path = tmp_path / "backup.log"
    path.write_text("".join(lines) + "2024-05-01 11:00 \x1b[1;31mERROR\x1b[0m disk full on /srv\n", encoding="utf-8")
    parsed = parse_file(path, max_bytes=10_000_000)
    text = "\n".join(s.text for s in parsed.sections)
    assert "\x1b" not in text and "[32m" not in text and "[0m" not in text
    assert "ERROR disk full on /srv" in text and "INFO backup 7 done" in text
    binary = tmp_path / "really.log"
    binary.write_bytes(bytes(range(1, 32)) * 300)
    with pytest.raises(UnsupportedDocument, match="binary"):
        parse_file(binary, max_bytes=10_000_000)


def test_a_markdown_note_that_is_only_its_heading_is_its_text(tmp_path):
    path = tmp_path / "shop.md"
    path.write_text("# Shopping: milk, eggs and bread\n", encoding="utf-8")
    parsed = parse_file(path, max_bytes=10_000_000)
    assert parsed.title == "Shopping: milk, eggs and bread"
    assert [s.text for s in parsed.sections] == ["Shopping: milk, eggs and bread"]
    empty = tmp_path / "empty-heading.md"
    empty.write_text("#\n\n   \n", encoding="utf-8")
    with pytest.raises(DocumentError):
        parse_file(empty, max_bytes=10_000_000)


def _pdf_with_inflating_stream(inflated: int) -> bytes:
    """A one-page PDF whose content stream is a line of text then `inflated` bytes of spaces, compressed with
    Flate (about 1,000 : 1): a small file whose one stream is a decompression bomb."""
    import zlib

    comp = zlib.compressobj(9)
    block = b" " * (1 << 20)
    stream = comp.compress(b"BT /F1 12 Tf 72 720 Td (Hello) Tj ET\n")
    stream += b"".join(comp.compress(block) for _ in range(inflated // len(block))) + comp.flush()
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1) + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_a_pdf_refused_by_the_decompression_limit_is_not_called_damaged(tmp_path: Path):
    small = tmp_path / "small.pdf"
    small.write_bytes(_pdf_with_inflating_stream(1 << 20))
    assert parse_file(small, max_bytes=50 << 20).sections[0].text.strip() == "Hello"  # the same file, not a bomb
    bomb = tmp_path / "bomb.pdf"
    bomb.write_bytes(_pdf_with_inflating_stream(200 << 20))
    assert bomb.stat().st_size < 300_000
    with pytest.raises(UserError) as refused:
        parse_file(bomb, max_bytes=50 << 20)
    message = str(refused.value)
    assert "damaged" not in message and "75 MB, the limit for one part" in message and "decompression bomb" in message
