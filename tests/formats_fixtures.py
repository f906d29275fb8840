"""Files of the formats read by OCR, slides and spreadsheets, built by the tests with known text."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any


def text_picture(lines: list[str], *, size: int = 36, width: int = 1100) -> Any:
    """A white RGB picture with these lines in black (Pillow's built-in font), like a scanned page."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=size)
    height = 80 + len(lines) * (size * 2)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((40, 40 + i * size * 2), line, fill="black", font=font)
    return image


def make_png(path: Path, lines: list[str]) -> Path:
    text_picture(lines).save(path)
    return path


def make_scanned_pdf(path: Path, typed: str, scanned: list[str]) -> Path:
    """Page 1 has a text layer (``typed``); page 2 is only a picture of ``scanned`` (no text layer)."""
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    picture = text_picture(scanned)
    w, h = picture.size
    size = (w * 0.5 + 20, h * 0.5 + 20)  # a small page, so that rendering it for OCR stays quick
    c = canvas.Canvas(str(path), pagesize=size)
    c.setTitle(path.name)
    c.setFont("Helvetica", 10)
    c.drawString(10, size[1] - 30, typed)
    c.showPage()
    c.drawImage(ImageReader(picture), 10, 10, width=w * 0.5, height=h * 0.5)
    c.showPage()
    c.save()
    return path


def make_pptx(path: Path) -> Path:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    deck.core_properties.title = "Quarterly review"
    first = deck.slides.add_slide(deck.slide_layouts[1])
    first.shapes.title.text = "Roadmap"
    first.placeholders[1].text = "Ship the lighthouse feature in spring"
    second = deck.slides.add_slide(deck.slide_layouts[5])
    second.shapes.title.text = "Budget"
    table = second.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(6), Inches(2)).table
    for r, row in enumerate([["Team", "Cost"], ["Design", "1200"], ["Research", "3400"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    second.notes_slide.notes_text_frame.text = "Remind everyone that the marmalade budget is frozen."
    deck.save(str(path))
    return path


SHEET_ROWS = [
    ["Name", "City", "Joined"],
    ["Ada", "Zürich", date(2021, 3, 4)],
    ["Grace", "Arlington", date(2019, 7, 1)],
]


def make_xlsx(path: Path) -> Path:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Members"
    for row in SHEET_ROWS:
        sheet.append(row)
    other = book.create_sheet("Inventory")
    other.append(["Item", "Count"])
    for i in range(1, 61):
        other.append([f"widget {i}", i * 3.0])
    other.append(["porcupine quills", 42])
    book.save(str(path))
    return path


def make_ods(path: Path) -> Path:
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    doc = OpenDocumentSpreadsheet()
    table = Table(name="Plants")

    def row(values: list[str], repeat: int = 1) -> TableRow:
        tr = TableRow(numberrowsrepeated=repeat) if repeat > 1 else TableRow()
        for v in values:
            cell = TableCell()
            if v:
                cell.addElement(P(text=v))
            tr.addElement(cell)
        return tr

    table.addElement(row(["Plant", "Water"]))
    table.addElement(row(["Fern", "weekly"]))
    table.addElement(row(["", ""], repeat=1000))  # a run of empty rows, compressed as ODS does
    table.addElement(row(["Cactus", "monthly"]))
    doc.spreadsheet.addElement(table)
    doc.save(str(path))
    return path
