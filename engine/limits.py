"""Limits on what one document may cost to read, so a small hostile file cannot exhaust memory or time.

The file-size limit (``settings.max_file_mb``) counts bytes on disk; these count what the bytes turn into:

- **Zip containers** (DOCX, ODT, EPUB): at most :data:`MAX_ARCHIVE_MEMBERS` members and
  :data:`MAX_ARCHIVE_INFLATED` bytes once inflated, at most :data:`MAX_MARKUP_MEMBER` for one XML/HTML part,
  and no member over 1 MiB that inflates more than :data:`MAX_COMPRESSION_RATIO` times its compressed size.
  The sizes the archive declares are checked first (nothing is inflated); then every member is inflated
  as a stream, in blocks, counting the bytes that really come out (a header that lies is caught there)
  and checking each XML part's nesting depth (:data:`MAX_XML_DEPTH`) and that it declares no entities
  (the "billion laughs" expansion). Only then does the format's parser read the file.
- **Pictures** (image files, and the images of scanned PDF pages read by OCR): a picture may have at most
  :data:`MAX_IMAGE_PIXELS` pixels and take at most :data:`MAX_IMAGE_BYTES` once decoded (pixels x channels
  x bytes per channel), both read from its header (a PDF image's dictionary) before any pixel is decoded: a
  "decompression bomb" declares a huge canvas in a few bytes, and a 16-bit picture with an alpha channel
  takes eight bytes a pixel; an image file may hold at most :data:`MAX_IMAGE_FRAMES` frames (pages of a
  TIFF); a PDF page is rendered for OCR at :data:`OCR_DPI` but never to more than :data:`MAX_RENDER_PIXELS`
  pixels (a hostile page size only lowers the resolution); at most :data:`MAX_OCR_PAGES` pages of one
  document are read by OCR.
- **Spreadsheets** (XLSX, ODS): at most :data:`MAX_SHEET_CELLS` cells are read (empty ones count too:
  a sheet can declare a million empty rows in a few bytes).
- **Text**: at most :data:`MAX_DOCUMENT_CHARS` characters of text per document, and at most
  :data:`MAX_CHUNKS` chunks.

- **Requests** (the HTTP API and MCP alike): a question or query of at most :data:`MAX_QUERY_CHARS`
  characters, at most :data:`MAX_HITS` results a recall; a project name of at most
  :data:`MAX_PROJECT_CHARS` characters (the engine refuses longer ones at every door).
Each refusal of a document is a :class:`~engine.parsers.DocumentError` whose message says which limit and by how much.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from xml.parsers import expat

from .errors import UserError

MIB = 1024 * 1024
MAX_QUERY_CHARS = 10_000
MAX_HITS = 100
MAX_PROJECT_CHARS = 200

MAX_ARCHIVE_MEMBERS = 10_000
MAX_ARCHIVE_INFLATED = 256 * MIB
MAX_MARKUP_MEMBER = 32 * MIB
MAX_COMPRESSION_RATIO = 100
RATIO_CHECKED_ABOVE = 1 * MIB
MAX_XML_DEPTH = 256
MAX_DOCUMENT_CHARS = 30_000_000
MAX_CHUNKS = 25_000
MAX_IMAGE_PIXELS = 40_000_000
MAX_IMAGE_BYTES = 128 * MIB
"""Decoded size of one picture: a 40 MP RGB photo (120 MB) passes, a 40 MP 16-bit RGBA PNG (320 MB) does not."""
MAX_IMAGE_FRAMES = 200
MAX_RENDER_PIXELS = 12_000_000
OCR_DPI = 200
MAX_OCR_PAGES = 1_000
MAX_SHEET_CELLS = 2_000_000
MAX_RESUME_ATTEMPTS = 3
"""A pending document whose embedding was interrupted this many times is marked failed, not resumed again."""

_BLOCK = MIB
_MARKUP_SUFFIXES = (".xml", ".rels", ".xhtml", ".html", ".htm", ".opf", ".ncx", ".svg", ".smil")


class LimitExceeded(UserError):
    """A document is bigger, once unpacked or parsed, than one document may be. Message for people."""


def _mib(n: int) -> str:
    text = f"{n / MIB:,.2f}".rstrip("0").rstrip(".")
    return f"{text} MiB"


def check_archive(path: Path, kind: str) -> None:
    """Refuse a zip container that would inflate beyond the limits (see the module doc).

    Raises :class:`LimitExceeded` for a bomb, ``zipfile.BadZipFile`` for a damaged archive (the caller
    words that), and :class:`UnsupportedArchive` for an encrypted one.
    """
    name = path.name
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        if len(infos) > MAX_ARCHIVE_MEMBERS:
            raise LimitExceeded(f"{name} holds {len(infos):,} files inside; a {kind} file may hold at most "
                                f"{MAX_ARCHIVE_MEMBERS:,}. Not read.")
        declared = sum(i.file_size for i in infos)
        if declared > MAX_ARCHIVE_INFLATED:
            raise LimitExceeded(f"{name} would unpack to {_mib(declared)}, more than the limit of "
                                f"{_mib(MAX_ARCHIVE_INFLATED)}. Not read (it may be a zip bomb).")
        for info in infos:
            _check_member(name, info)
        total = 0
        for info in infos:
            if info.is_dir():
                continue
            if info.flag_bits & 0x1:
                raise EncryptedArchive(f"{name} is encrypted: remove the password and try again")
            guard = _XmlGuard(name) if info.filename.lower().endswith(_MARKUP_SUFFIXES) else None
            out = 0
            with z.open(info) as f:
                while block := f.read(_BLOCK):
                    out += len(block)
                    total += len(block)
                    if out > max(info.file_size, 0) or total > MAX_ARCHIVE_INFLATED:
                        raise LimitExceeded(f"{name} unpacks to more than it declares; not read (it may be a "
                                            "zip bomb).")
                    if guard is not None:
                        guard.feed(block)
            if guard is not None:
                guard.close()


def _check_member(name: str, info: zipfile.ZipInfo) -> None:
    size, packed = info.file_size, max(info.compress_size, 1)
    if info.filename.lower().endswith(_MARKUP_SUFFIXES) and size > MAX_MARKUP_MEMBER:
        raise LimitExceeded(f"{name}: its part {info.filename!r} would unpack to {_mib(size)}, more than the limit "
                            f"of {_mib(MAX_MARKUP_MEMBER)} for one part. Not read.")
    if size > RATIO_CHECKED_ABOVE and size > MAX_COMPRESSION_RATIO * packed:
        raise LimitExceeded(f"{name}: its part {info.filename!r} is compressed {size // packed:,} to 1 (more than "
                            f"{MAX_COMPRESSION_RATIO} to 1); not read (it may be a zip bomb).")


class EncryptedArchive(UserError):
    """A member of the archive is encrypted."""


class _XmlGuard:
    """Streams one XML part through expat: refuses entity declarations and nesting deeper than
    MAX_XML_DEPTH. A part that is not well-formed XML is left to the format's parser (EPUB pages are
    often sloppy HTML), which has depth limits of its own."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._depth = 0
        self._parser: expat.XMLParserType | None = expat.ParserCreate()
        p = self._parser
        p.StartElementHandler = self._start
        p.EndElementHandler = self._end
        p.EntityDeclHandler = self._entity
        p.UnparsedEntityDeclHandler = self._unparsed

    def _start(self, _tag: str, _attrs: object) -> None:
        self._depth += 1
        if self._depth > MAX_XML_DEPTH:
            raise LimitExceeded(f"{self._name} is nested more than {MAX_XML_DEPTH} levels deep; not read.")

    def _end(self, _tag: str) -> None:
        self._depth -= 1

    def _entity(self, *_args: object) -> None:
        raise LimitExceeded(f"{self._name} declares XML entities, which documents of this kind never need; "
                            "not read (it may be an entity-expansion bomb).")

    def _unparsed(self, *_args: object) -> None:
        self._entity()

    def feed(self, block: bytes) -> None:
        if self._parser is None:
            return
        try:
            self._parser.Parse(block, False)
        except expat.ExpatError:
            self._parser = None  # not XML: the format's own parser decides

    def close(self) -> None:
        if self._parser is not None:
            try:
                self._parser.Parse(b"", True)
            except expat.ExpatError:
                pass
            self._parser = None


def check_text(name: str, chars: int) -> None:
    """Refuse a document with more text than one document may hold."""
    if chars > MAX_DOCUMENT_CHARS:
        raise LimitExceeded(f"{name} holds {chars / 1e6:,.0f} million characters of text; one document may hold "
                            f"at most {MAX_DOCUMENT_CHARS / 1e6:,.0f} million. Split it into smaller files.")


def check_pixels(name: str, width: int, height: int, *, where: str = "") -> None:
    """Refuse an image bigger than one picture may be (before it is decoded)."""
    if width <= 0 or height <= 0:
        raise LimitExceeded(f"{name}{where} declares an empty picture ({width} x {height} pixels); not read.")
    if width * height > MAX_IMAGE_PIXELS:
        raise LimitExceeded(f"{name}{where} is {width:,} x {height:,} pixels, more than the limit of "
                            f"{MAX_IMAGE_PIXELS / 1e6:,.0f} million for one picture. Not read (it may be a "
                            "decompression bomb).")


def check_picture(name: str, width: int, height: int, channels: int, bits: int, *, where: str = "") -> None:
    """Refuse a picture (an image file's frame, or an image inside a PDF: ``where`` says which) with more
    pixels, or more bytes once decoded, than one picture may have; before it is decoded."""
    check_pixels(name, width, height, where=where)
    size = width * height * max(channels, 1) * max(-(-bits // 8), 1)
    if size > MAX_IMAGE_BYTES:
        depth = f"{bits}-bit, " if bits > 8 else ""
        raise LimitExceeded(f"{name}{where} is {width:,} x {height:,} pixels ({depth}{channels} "
                            f"channel{'s' if channels != 1 else ''}): {_mib(size)} once decoded, more than the "
                            f"limit of {_mib(MAX_IMAGE_BYTES)} for one picture. Not read.")


def render_scale(width_pt: float, height_pt: float) -> float:
    """The scale (pixels per PDF point) to render a page for OCR: OCR_DPI, lowered to stay within
    MAX_RENDER_PIXELS."""
    scale = OCR_DPI / 72
    area = max(width_pt, 1.0) * max(height_pt, 1.0)
    if area * scale * scale > MAX_RENDER_PIXELS:
        scale = (MAX_RENDER_PIXELS / area) ** 0.5
    return scale


def too_many_chunks(name: str, estimate: int | None = None) -> LimitExceeded:
    about = f" (about {estimate:,})" if estimate and estimate > MAX_CHUNKS else ""
    return LimitExceeded(f"{name} would make more than {MAX_CHUNKS:,} passages to index{about}; that is the limit "
                         "for one document. Split it into smaller files.")
