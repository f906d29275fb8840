"""Generate real documents of every supported type (and some broken ones) for parser tests.

Each good document hides one distinctive fact at a known place; ``GOOD_DOCUMENTS`` says which fact
and which locator the chunk holding it must carry.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Expected:
    fact: str  # text that must appear verbatim in one chunk
    locator_part: str  # text that the chunk's locator must contain
    title: str | None = None  # the parsed title, when the format carries one


FILLER = (
    "This paragraph is filler text about ordinary things, written so the document has some body. "
    "It mentions weather, trains, and the price of bread, none of which matter here. "
)


def make_pdf(path: Path, pages: list[str], title: str | None = None) -> Path:
    """A PDF with one text paragraph per page (reportlab)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    if title:
        c.setTitle(title)
    for text in pages:
        y = 800
        obj = c.beginText(50, y)
        obj.setFont("Helvetica", 11)
        line: list[str] = []
        for word in text.split():
            if len(" ".join([*line, word])) > 80:
                obj.textLine(" ".join(line))
                line = []
            line.append(word)
        if line:
            obj.textLine(" ".join(line))
        c.drawText(obj)
        c.showPage()
    c.save()
    return path


def make_image_only_pdf(path: Path) -> Path:
    """A PDF whose only page content is a drawing: no text layer, like a scan."""
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=(300, 300))  # small: OCR renders and reads it quickly
    c.rect(50, 50, 200, 200, fill=1)
    c.showPage()
    c.save()
    return path


def make_encrypted_pdf(path: Path, password: str = "secret") -> Path:
    import pypdf

    plain = make_pdf(path.with_name("plain-" + path.name), ["Top secret text on the only page."])
    writer = pypdf.PdfWriter(clone_from=plain)
    writer.encrypt(user_password=password, owner_password=password + "-owner", algorithm="AES-128")
    with open(path, "wb") as f:
        writer.write(f)
    plain.unlink()
    return path


def make_docx(path: Path) -> Path:
    import docx

    d = docx.Document()
    d.core_properties.title = "Household plan"
    d.add_heading("Overview", level=1)
    d.add_paragraph("The plan covers the whole year. " + FILLER)
    d.add_heading("Budget", level=2)
    d.add_paragraph("The DOCX fact: the annual budget for the garden is 4200 euros.")
    table = d.add_table(rows=3, cols=2)
    for row, (a, b) in zip(table.rows, [("Item", "Cost"), ("Seeds", "35 euros"), ("Greenhouse", "900 euros")],
                           strict=True):
        row.cells[0].text, row.cells[1].text = a, b
    d.add_heading("Schedule", level=1)
    d.add_paragraph("Planting starts in April. " + FILLER)
    d.save(str(path))
    return path


def make_epub(path: Path) -> Path:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("test-book-1")
    book.set_title("The Sea Stories")
    book.set_language("en")
    book.add_author("A. Writer")
    chapters = [
        ("ch1.xhtml", "The Harbour", "<p>Boats rest in the harbour. " + FILLER + "</p>"),
        ("ch2.xhtml", "The Lighthouse",
         "<p>The EPUB fact: the lighthouse keeper is named Orla Finch.</p><p>" + FILLER + "</p>"),
    ]
    items = []
    for name, title, body in chapters:
        ch = epub.EpubHtml(title=title, file_name=name, lang="en")
        ch.content = f"<html><body><h1>{title}</h1>{body}</body></html>"
        book.add_item(ch)
        items.append(ch)
    book.toc = [epub.Link(c.file_name, c.title, c.file_name.split(".")[0]) for c in items]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *items]
    epub.write_epub(str(path), book)
    return path


def make_odt(path: Path) -> Path:
    from odf.opendocument import OpenDocumentText
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import H, P

    doc = OpenDocumentText()
    doc.text.addElement(H(outlinelevel=1, text="Warehouse"))
    doc.text.addElement(P(text="The warehouse is on the river. " + FILLER))
    doc.text.addElement(H(outlinelevel=2, text="Inventory"))
    doc.text.addElement(P(text="The ODT fact: shelf 12 holds exactly 77 copper kettles."))
    table = Table(name="Stock")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    for a, b in [("Product", "Count"), ("Ladles", "14")]:
        row = TableRow()
        for value in (a, b):
            cell = TableCell()
            cell.addElement(P(text=value))
            row.addElement(cell)
        table.addElement(row)
    doc.text.addElement(table)
    doc.save(str(path))
    return path


HTML_PAGE = """<!DOCTYPE html>
<html><head><title>Install Guide</title>
<style>body { color: red; } .STYLE_SECRET {}</style>
<script>var SCRIPT_SECRET = "do not index";</script></head>
<body>
<nav><a href="/">Home</a> | <a href="/docs">Docs</a> | NAV_SECRET</nav>
<main>
<h1>Guide</h1>
<p>This guide explains how to install the tool on every platform we support. {filler}</p>
<h2>Setup</h2>
<p>Before installing, make sure there is enough disk space. {filler}</p>
<h3>Linux</h3>
<p>The HTML fact: on Linux the installer needs the package libfrobnicate 3.2 first.</p>
<p>{filler}</p>
<h3>Windows</h3>
<p>On Windows, run the installer as an administrator. {filler}</p>
</main>
<footer>Copyright 2025 FOOTER_SECRET</footer>
</body></html>
""".replace("{filler}", FILLER)

MARKDOWN = f"""# Handbook

Welcome to the handbook. {FILLER}

## Setup

Start here. {FILLER}

### Linux

The Markdown fact: on Linux the config file lives in ~/.config/frob/frob.toml.

```bash
# a comment, not a heading
frob --init
```

### macOS

On macOS use Homebrew. {FILLER}

## Usage

Run it. {FILLER}
"""

CP1252_TEXT = (
    "Le café de Zoë est très apprécié. L’été dernier, nous y avons mangé une crème brûlée.\n\n"
    "The cp1252 fact: the naïve façade was painted “ochre” in 1999 — it’s still there.\n"
)

PYTHON_SOURCE = '''"""Tax helpers."""

import math

RATE = 0.2


def compute_tax(amount: float) -> float:
    """The Python fact: tax is computed with the flat rate of twenty percent."""
    return math.floor(amount * RATE)


class Ledger:
    def __init__(self) -> None:
        self.rows = []
'''


def make_all(root: Path) -> dict[str, tuple[Path, Expected]]:
    """Write one good document of every type into ``root``; name -> (path, what to expect)."""
    root.mkdir(parents=True, exist_ok=True)
    out: dict[str, tuple[Path, Expected]] = {}

    def add(name: str, expected: Expected, write: Callable[[Path], object]) -> None:
        path = root / name
        write(path)
        out[name] = (path, expected)

    add("report.pdf", Expected("The PDF fact: the blue heron nests by the old mill.", "page 2", "Field Report"),
        lambda p: make_pdf(p, [
            "Page one talks about the river. " + FILLER,
            "The PDF fact: the blue heron nests by the old mill. " + FILLER,
            "Page three is the appendix. " + FILLER,
        ], title="Field Report"))
    add("plan.docx", Expected("The DOCX fact: the annual budget for the garden is 4200 euros.", "Budget",
                              "Household plan"), make_docx)
    add("docx-table.docx", Expected("Item: Greenhouse; Cost: 900 euros", "Budget"), make_docx)
    add("book.epub", Expected("The EPUB fact: the lighthouse keeper is named Orla Finch.", "The Lighthouse",
                              "The Sea Stories"), make_epub)
    add("store.odt", Expected("The ODT fact: shelf 12 holds exactly 77 copper kettles.", "Inventory"), make_odt)
    add("guide.html", Expected("The HTML fact: on Linux the installer needs the package libfrobnicate 3.2 first.",
                               "Setup › Linux", "Install Guide"),
        lambda p: p.write_text(HTML_PAGE, encoding="utf-8"))
    add("handbook.md", Expected("The Markdown fact: on Linux the config file lives in ~/.config/frob/frob.toml.",
                                "Setup › Linux", "Handbook"),
        lambda p: p.write_text(MARKDOWN, encoding="utf-8"))
    add("notes.txt", Expected("The UTF-8 fact: the spare key is under the third flowerpot.", "lines 1–"),
        lambda p: p.write_text("Notes for the house sitter.\n\nThe UTF-8 fact: the spare key is under the "
                               "third flowerpot.\n\nWater the plants on Sunday 🌱.\n", encoding="utf-8"))
    add("legacy.txt", Expected("The cp1252 fact: the naïve façade was painted “ochre” in 1999 — it’s still there.",
                               "lines 1–"),
        lambda p: p.write_bytes(CP1252_TEXT.encode("cp1252")))
    add("pets.csv", Expected("name: Bob; city: Lisbon; pet: iguana", "lines 2–4"),
        lambda p: p.write_text("name,city,pet\nAlice,Porto,cat\nBob,Lisbon,iguana\nCara,Faro,dog\n", encoding="utf-8"))
    add("config.json", Expected("codename: Bluebird", "project"),
        lambda p: p.write_text(json.dumps({"owner": "Dana", "project": {"codename": "Bluebird", "tags": ["a", "b"]}}),
                               encoding="utf-8"))
    add("events.jsonl", Expected("event: launch; where: Kourou", "lines 1–2"),
        lambda p: p.write_text('{"event": "boot", "where": "lab"}\n{"event": "launch", "where": "Kourou"}\n',
                               encoding="utf-8"))
    add("tax.py", Expected("The Python fact: tax is computed with the flat rate of twenty percent.",
                           "def compute_tax"), lambda p: p.write_text(PYTHON_SOURCE, encoding="utf-8"))
    return out


def make_bad(root: Path) -> dict[str, Path]:
    """Broken or unreadable files, by the error they should cause."""
    root.mkdir(parents=True, exist_ok=True)
    bad = {
        "corrupt_pdf": root / "report.pdf",
        "encrypted_pdf": root / "locked.pdf",
        "scanned_pdf": root / "scan.pdf",
        "binary_txt": root / "photo.txt",
        "empty": root / "empty.md",
        "unknown": root / "archive.xyz",
        "corrupt_docx": root / "broken.docx",
        "bad_json": root / "broken.json",
    }
    bad["corrupt_pdf"].write_bytes(b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\ngarbage\x00\xff" * 3)
    make_encrypted_pdf(bad["encrypted_pdf"])
    make_image_only_pdf(bad["scanned_pdf"])
    bad["binary_txt"].write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 8)
    bad["empty"].write_bytes(b"")
    bad["unknown"].write_bytes(b"PK\x03\x04 some archive")
    with zipfile.ZipFile(bad["corrupt_docx"], "w") as z:
        z.writestr("hello.txt", "this zip is not a Word document")
    bad["bad_json"].write_text('{"a": 1,\n "b": }', encoding="utf-8")
    return bad
