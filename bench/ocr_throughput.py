"""OCR throughput: scanned pages per second through `Engine.ingest`, against the bare OCR engine on the
same pages in the same run; how many of the words come back; what the OCR and office packages cost on disk.

    python bench/ocr_throughput.py [--pages 6] [--lines 24] [--no-size]

It renders `--pages` letter-size pages of prose as pictures (Pillow's built-in font at about 11 pt on a
200 dpi page, like a flatbed scan) into a PDF with no text layer, then
1. reads each page with the bare engine: PDFium renders it at the engine's resolution and RapidOCR reads
   it (`engine.ocr.read_image`), timed per page (the baseline);
2. ingests the PDF into a fresh encrypted store (a temp profile) through `Engine.ingest`, timed end to
   end: hashing, rendering, OCR, chunking, writing rows and FTS, embedding, committing;
and prints both rates (pages/s), their ratio, and the share of the words on the pages found in the text
read back from the store. The model is loaded (and warmed on one page) before either is timed.

The install size is the sum of the files each added distribution installed (its RECORD), per package.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cleanup, prepare_home  # noqa: E402

WORDS = (
    "garden river budget meeting project report invoice harbour lighthouse kitchen village station winter "
    "summer letter council market bridge engine library school doctor hospital museum forest mountain island "
    "orchard weather harvest festival railway journey ledger contract supplier warehouse schedule committee "
    "the of and to in is that for it as was with be by on not this are or from at which but have an they "
    "were their has would when if more no out so said what up about into than them can only other new some"
).split()

OCR_PACKAGES = ("rapidocr-onnxruntime", "onnxruntime", "opencv-python", "pypdfium2", "shapely", "pyclipper",
                "flatbuffers", "protobuf")
OFFICE_PACKAGES = ("python-pptx", "openpyxl", "et-xmlfile", "xlsxwriter")


def page_lines(rng: random.Random, lines: int) -> list[str]:
    out = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(7, 11))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(10, 9999)))
        text = " ".join(words)
        out.append(text[0].upper() + text[1:] + ".")
    return out


def make_scan(path: Path, pages: int, lines: int, seed: int = 11) -> list[list[str]]:
    from PIL import Image, ImageDraw, ImageFont
    from reportlab.lib.pagesizes import letter
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    rng = random.Random(seed)
    font = ImageFont.load_default(size=30)
    c = canvas.Canvas(str(path), pagesize=letter)
    texts = []
    for _ in range(pages):
        text = page_lines(rng, lines)
        image = Image.new("L", (1700, 2200), 255)
        draw = ImageDraw.Draw(image)
        for i, line in enumerate(text):
            draw.text((150, 160 + i * 78), line, fill=0, font=font)
        c.drawImage(ImageReader(image), 0, 0, width=letter[0], height=letter[1])
        c.showPage()
        texts.append(text)
    c.save()
    return texts


def bare_rate(path: Path, pages: int) -> tuple[float, list[float]]:
    import numpy as np
    import pypdfium2 as pdfium

    from engine import limits
    from engine.ocr import read_image

    times = []
    pdf = pdfium.PdfDocument(str(path))
    try:
        for i in range(pages):
            start = time.perf_counter()
            page = pdf[i]
            bitmap = page.render(scale=limits.render_scale(*page.get_size()))
            read_image(np.asarray(bitmap.to_pil().convert("RGB")))
            page.close()
            times.append(time.perf_counter() - start)
    finally:
        pdf.close()
    return pages / sum(times), times


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def installed_mb(names: tuple[str, ...]) -> dict[str, float]:
    sizes = {}
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        total = 0
        for f in dist.files or []:
            p = Path(str(dist.locate_file(f)))
            if p.is_file():
                total += p.stat().st_size
        sizes[name] = total / 1e6
    return sizes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=6)
    ap.add_argument("--lines", type=int, default=24)
    ap.add_argument("--no-size", action="store_true", help="skip the install-size report")
    args = ap.parse_args()

    home, _ready, tmp = prepare_home(None, "ocr")
    try:
        from engine import Engine
        from engine.ocr import read_image

        work = Path(tempfile.mkdtemp(prefix="pllm-ocr-", dir=tmp))
        scan = work / "scan.pdf"
        texts = make_scan(scan, args.pages, args.lines)
        warm = work / "warm.pdf"
        make_scan(warm, 1, args.lines, seed=3)
        bare_rate(warm, 1)  # loads and warms the OCR model
        import numpy as np

        read_image(np.zeros((64, 64, 3), dtype=np.uint8))

        raw_rate, raw_times = bare_rate(scan, args.pages)
        with Engine.open(home) as eng:
            eng.embedder.load()
            eng.ingest([warm])  # the embedding model warmed too
            start = time.perf_counter()
            [result] = eng.ingest([scan])
            elapsed = time.perf_counter() - start
            assert result.status == "added", result
            stored = " ".join(r[0] for r in eng.con.execute(
                "SELECT c.text FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.path = ?",
                (str(scan),)).fetchall())
            pages_ocr = eng.get_document(result.document_id).ocr_pages
        engine_rate = args.pages / elapsed
        expected = [w for t in texts for line in t for w in words(line)]
        found = set(words(stored))
        recovered = sum(w in found for w in expected) / len(expected)
        print(f"pages: {args.pages} ({args.lines} lines each), read by OCR: {len(pages_ocr)}")
        print(f"bare OCR (render + read): {raw_rate:.2f} pages/s  (per page {min(raw_times):.2f}-{max(raw_times):.2f} s)")
        print(f"Engine.ingest end to end: {engine_rate:.2f} pages/s  ({elapsed:.1f} s)")
        print(f"ratio engine / bare: {engine_rate / raw_rate:.2f}")
        print(f"words recovered: {recovered:.1%} of {len(expected)}")
        if not args.no_size:
            for label, names in (("OCR", OCR_PACKAGES), ("slides and sheets", OFFICE_PACKAGES)):
                sizes = installed_mb(names)
                parts = ", ".join(f"{n} {mb:.1f}" for n, mb in sorted(sizes.items(), key=lambda x: -x[1]))
                print(f"install size, {label}: {sum(sizes.values()):.1f} MB ({parts})")
    finally:
        cleanup(tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
