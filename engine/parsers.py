"""Turn files on disk into structured text: a title plus sections that carry page and heading context.

Every reader returns the same shape, :class:`ParsedDocument`, so the chunker never needs to know the
format. Failures the user can act on (encrypted, damaged, empty, too big, not text, unknown type)
raise :class:`DocumentError` or :class:`UnsupportedDocument` with a message written for people.
Document text is never logged.

Pictures of text (image files, PDF pages without a text layer) are read by OCR (engine/ocr.py) when
:class:`~engine.ocr.OcrOptions` allows it; their sections are marked ``ocr`` (the locator then says
"OCR") and the document's ``meta["ocr"]`` lists the pages so read. Slides are sections per slide (and
its speaker notes); spreadsheets are sections of row ranges per sheet, each row written as
``Header: value; Header: value``.
"""

from __future__ import annotations

import ast
import contextlib
import csv
import hashlib
import io
import json
import logging
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import limits
from .errors import UserError
from .ocr import ENGINE_NAME, MAX_SIDE, OcrCancelled, OcrOptions, OcrUnavailable, read_image

log = logging.getLogger(__name__)

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "IMAGE_EXTENSIONS",
    "NEEDS_READER_LIBRARIES",
    "DocumentError",
    "OcrCancelled",
    "OcrOptions",
    "ParsedDocument",
    "Section",
    "UnsupportedDocument",
    "content_hash",
    "parse_file",
    "parse_text",
]


TOO_LARGE = "{name} needs more memory to read than one document may use. Not read."
# what native readers (ONNX Runtime, OpenCV, C++'s std::bad_alloc) say when an allocation fails
OUT_OF_MEMORY = ("failed to allocate", "bad_alloc", "bad allocation", "out of memory", "insufficient memory",
                 "cannot allocate memory")


class DocumentError(UserError):
    """A document could not be read (damaged, empty, too big, ...)."""


class UnsupportedDocument(DocumentError):
    """A document is of a kind the engine cannot read (unknown type, encrypted, binary, scanned)."""


@dataclass(frozen=True, slots=True)
class Section:
    """A run of text that shares one location: a PDF page, a heading, a code block.

    ``page`` is 1-based (a frame's number for images). ``heading_path`` runs from the outermost heading inwards, e.g.
    ``["Setup", "Linux"]``. ``first_line`` is the 1-based line of the source file on which ``text``
    starts; it is set only for line-oriented formats (plain text, code, CSV, JSON Lines), where the
    chunker can then cite line numbers.
    """

    text: str
    page: int | None = None
    heading_path: list[str] = field(default_factory=list)
    first_line: int | None = None
    ocr: bool = False  # read from a picture by OCR (its locator says so)


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    title: str
    mime: str
    sections: list[Section]
    meta: dict[str, Any] = field(default_factory=dict)  # stored with the document (e.g. which pages were OCR)


_TEXT_EXTENSIONS = frozenset({".txt", ".text", ".log", ".rst"})
_MARKDOWN_EXTENSIONS = frozenset({".md", ".markdown"})
_HTML_EXTENSIONS = frozenset({".html", ".htm"})
_CSV_EXTENSIONS = frozenset({".csv", ".tsv"})
_CODE_MIME = {
    ".py": "text/x-python",
    ".js": "text/javascript",
    ".ts": "text/x-typescript",
    ".java": "text/x-java",
    ".c": "text/x-c",
    ".cpp": "text/x-c++",
    ".h": "text/x-c",
    ".go": "text/x-go",
    ".rs": "text/x-rust",
    ".rb": "text/x-ruby",
    ".sh": "text/x-shellscript",
    ".sql": "application/sql",
    ".toml": "application/toml",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".ini": "text/plain",
    ".cfg": "text/plain",
    ".css": "text/css",
}
_MIME: dict[str, str] = {
    **dict.fromkeys(_TEXT_EXTENSIONS, "text/plain"),
    ".rst": "text/x-rst",
    **dict.fromkeys(_MARKDOWN_EXTENSIONS, "text/markdown"),
    **dict.fromkeys(_HTML_EXTENSIONS, "text/html"),
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".json": "application/json",
    ".jsonl": "application/jsonl",
    ".pdf": "application/pdf",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".odt": "application/vnd.oasis.opendocument.text",
    ".epub": "application/epub+zip",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".ods": "application/vnd.oasis.opendocument.spreadsheet",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".tif": "image/tiff",
    ".tiff": "image/tiff",
    ".webp": "image/webp",
    **_CODE_MIME,
}
IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp"})

SUPPORTED_EXTENSIONS: frozenset[str] = frozenset(_MIME)
"""Lower-case file suffixes (with the dot) that :func:`parse_file` can read."""


# ---------------------------------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------------------------------


def parse_file(path: Path, *, max_bytes: int, ocr: OcrOptions | None = None) -> ParsedDocument:
    """Read ``path`` into a :class:`ParsedDocument`.

    Raises :class:`UnsupportedDocument` for unknown types, encrypted or binary files (and pictures when
    OCR is off) and :class:`DocumentError` for missing, empty, oversized or damaged ones;
    :class:`OcrCancelled` when ``ocr.cancel`` is set while pages are read by OCR. ``ocr`` defaults to
    OCR on, without progress.
    """
    ocr = ocr or OcrOptions()
    path = Path(path)
    name = path.name
    ext = path.suffix.lower()
    if ext not in SUPPORTED_EXTENSIONS:
        kind = f"{ext} files aren't" if ext else "Files without an extension aren't"
        raise UnsupportedDocument(
            f"{name}: {kind} supported. Supported types: {', '.join(sorted(SUPPORTED_EXTENSIONS))}"
        )
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise DocumentError(f"{name} doesn't exist (was it moved or deleted?)") from None
    except OSError as e:
        raise DocumentError(f"{name} can't be read: {e.strerror or e}") from None
    if not path.is_file():
        raise DocumentError(f"{name} is not a file")
    if size == 0:
        raise DocumentError(f"{name} is empty")
    if size > max_bytes:
        raise DocumentError(
            f"{name} is too big ({_megabytes(size)} MB); the limit is {_megabytes(max_bytes)} MB"
        )

    reader = _READERS.get(ext, _read_code)
    try:
        if ext in _ZIP_CONTAINERS:
            limits.check_archive(path, _KIND_NAMES[ext])  # sizes, ratio, XML depth and entities, before any parser
        doc = _OCR_READERS[ext](path, ocr) if ext in _OCR_READERS else reader(path)
    except (DocumentError, OcrCancelled):
        raise
    except OcrUnavailable as e:
        raise UnsupportedDocument(f"{name}: {e}") from None
    except limits.EncryptedArchive as e:
        raise UnsupportedDocument(str(e)) from None
    except limits.LimitExceeded as e:
        log.info("a %s file exceeds a limit", ext)
        raise DocumentError(str(e)) from None
    except RecursionError:
        raise DocumentError(f"{name} is nested too deeply to read") from None
    except MemoryError:  # the reader process's own memory limit (engine/parse_worker.py), or the machine's
        raise DocumentError(TOO_LARGE.format(name=name)) from None
    except OSError as e:
        raise DocumentError(f"{name} can't be read: {e.strerror or e}") from None
    except Exception as e:  # third-party parsers raise anything on malformed input
        if ext == ".pdf" and (limit := _pdf_limit(name, e)) is not None:
            log.info("a .pdf file exceeds a limit")
            raise DocumentError(limit) from None
        log.warning("parsing a %s file failed: %s", ext, type(e).__name__)  # the message may quote content
        if any(said in str(e).lower() for said in OUT_OF_MEMORY):  # a native library (OCR) out of memory
            raise DocumentError(TOO_LARGE.format(name=name)) from None
        raise DocumentError(f"{name} is damaged or not a valid {_KIND_NAMES.get(ext, ext)} file") from None

    sections = [s for s in doc.sections if s.text.strip()]
    if not sections:
        raise DocumentError(f"{name} has no text to remember")
    _check_text(name, sections)
    log.debug("parsed %s: %d sections", ext, len(sections))
    title = doc.title if doc.title.strip().casefold() not in _PLACEHOLDER_TITLES else path.name
    return ParsedDocument(title=title, mime=_MIME[ext], sections=sections, meta=doc.meta)


# Titles that tools write into a file's properties when nobody gave one: the file's name says more.
_PLACEHOLDER_TITLES = frozenset({"", "untitled", "untitled document", "no title", "(anonymous)", "document",
                                 "title", "presentation", "powerpoint presentation", "slide 1"})


def parse_text(text: str, title: str) -> ParsedDocument:
    """Parse raw text (pasted or uploaded) as Markdown; plain text is valid Markdown."""
    cleaned = _clean_text(text)
    if not cleaned.strip():
        raise DocumentError(f"{title or 'The text'} is empty")
    md_title, sections = _markdown_sections(cleaned)
    _check_text(title or "The text", sections)
    return ParsedDocument(title=title or md_title or "Untitled", mime="text/markdown", sections=sections)


def content_hash(path: Path) -> str:
    """Hex SHA-256 of the file's bytes, read in blocks so large files don't fill memory."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


# ---------------------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------------------


_ZIP_CONTAINERS = frozenset({".docx", ".odt", ".epub", ".pptx", ".xlsx", ".ods"})
NEEDS_READER_LIBRARIES: frozenset[str] = frozenset({".pdf", *_ZIP_CONTAINERS, *_HTML_EXTENSIONS, *IMAGE_EXTENSIONS})
"""The suffixes whose readers import third-party libraries (engine/parse_worker.py reads them in a helper)."""


def _check_text(name: str, sections: list[Section]) -> None:
    try:
        limits.check_text(name, sum(len(s.text) for s in sections))
    except limits.LimitExceeded as e:
        raise DocumentError(str(e)) from None


def _megabytes(n: int) -> str:
    mb = n / (1024 * 1024)
    return f"{mb:.0f}" if mb >= 10 or mb == int(mb) else f"{mb:.1f}"


_KIND_NAMES = {
    ".pdf": "PDF",
    ".docx": "Word (.docx)",
    ".odt": "OpenDocument (.odt)",
    ".epub": "EPUB",
    ".pptx": "PowerPoint (.pptx)",
    ".xlsx": "Excel (.xlsx)",
    ".ods": "OpenDocument spreadsheet (.ods)",
    **dict.fromkeys((".png",), "PNG image"),
    **dict.fromkeys((".jpg", ".jpeg"), "JPEG image"),
    **dict.fromkeys((".tif", ".tiff"), "TIFF image"),
    ".webp": "WebP image",
    ".json": "JSON",
    ".jsonl": "JSON Lines",
    ".csv": "CSV",
    ".tsv": "TSV",
}

# Newline-like characters become "\n"; other control and invisible formatting characters are dropped
# (the embedding model's tokenizer drops them too, so keeping them would only confuse token counts).
_NEWLINES = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_CLEAN_TABLE = {
    **{c: None for c in [*range(0x00, 0x09), *range(0x0E, 0x20), *range(0x7F, 0xA0)]},
    **dict.fromkeys(map(ord, _NEWLINES), "\n"),
    0x00AD: None,  # soft hyphen
    0x200B: None,  # zero-width space
    0xFEFF: None,  # byte-order mark / zero-width no-break space
}
_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st", "ﬆ": "st"})


def _clean_text(text: str) -> str:
    """Normalise newlines and Unicode composition; remove control characters."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return unicodedata.normalize("NFC", text.translate(_CLEAN_TABLE))


_BOMS = (
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)


# Terminal escape sequences: colours and cursor moves (CSI), titles and links (OSC), two-byte ones.
_TERMINAL_CODES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def _read_text(path: Path) -> str:
    """Decode a text file: BOM, then strict UTF-8, then charset-normalizer; refuse binary data."""
    data = path.read_bytes()
    text = _decode(data)
    if text is None:
        raise UnsupportedDocument(f"{path.name} looks like a binary file, not text")
    text = _TERMINAL_CODES.sub("", text)  # a log written for a terminal: its colours are not binary data
    sample = text[:8192]
    controls = sum(1 for c in sample if c < " " and c not in "\t\n\r\f")
    if controls > max(2, len(sample) // 100):
        raise UnsupportedDocument(f"{path.name} looks like a binary file, not text")
    return _clean_text(text)


def _decode(data: bytes) -> str | None:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError:
                return None
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass

    import charset_normalizer

    matches = list(charset_normalizer.from_bytes(data))
    if not matches:
        return None
    best = matches[0]
    # charset-normalizer often ranks a sibling code page (cp1250, cp1257) above cp1252 for Western
    # European text; cp1252 is by far the most common legacy encoding, so prefer it when it is about
    # as plausible as the winner.
    for m in matches:
        if m.encoding == "cp1252" and m.chaos <= best.chaos + 0.1 and m.coherence >= best.coherence - 0.05:
            best = m
            break
    log.debug("detected legacy encoding %s", best.encoding)
    return str(best)


# ---------------------------------------------------------------------------------------------------
# Plain text, Markdown, code
# ---------------------------------------------------------------------------------------------------


def _read_plain(path: Path) -> ParsedDocument:
    return ParsedDocument(path.name, "", [Section(_read_text(path), first_line=1)])


def _read_markdown(path: Path) -> ParsedDocument:
    text = _read_text(path)
    title, sections = _markdown_sections(text)
    if title and not any(s.text.strip() for s in sections):  # a note that is only its heading
        sections = [Section(title, first_line=1)]
    return ParsedDocument(title or path.name, "", sections, _markdown_meta(text))


_TAG = re.compile(r"(?<![\w&/#])#([^\W\d][\w/-]*|\d+[^\W\d][\w/-]*)")
_MAX_FRONT_MATTER = 64 * 1024


def _markdown_meta(text: str) -> dict[str, Any]:
    """Front matter (YAML) as ``front_matter`` and the tags (front matter ``tags`` and inline ``#tags``
    outside code) as ``tags``; {} when a note has neither. Unreadable front matter is left out."""
    meta: dict[str, Any] = {}
    tags: list[str] = []
    body = text
    if (fm := _FRONT_MATTER.match(text)) and len(fm.group(1)) <= _MAX_FRONT_MATTER:
        body = text[fm.end():]
        try:
            import yaml

            data = yaml.safe_load(fm.group(1))
        except Exception:  # not YAML after all (or a yaml we lack): the text is still the note's
            data = None
        if isinstance(data, dict) and data:
            meta["front_matter"] = json.loads(json.dumps(data, default=str))
            raw = data.get("tags", data.get("tag"))
            items = raw if isinstance(raw, list) else re.split(r"[,\s]+", raw) if isinstance(raw, str) else []
            tags += [str(t).strip().lstrip("#") for t in items if str(t).strip().lstrip("#")]
    code = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1|`[^`\n]*`", re.MULTILINE | re.DOTALL)
    tags += _TAG.findall(code.sub("", body))
    if tags:
        meta["tags"] = list(dict.fromkeys(tags))
    return meta


_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))??(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
_FRONT_MATTER_TITLE = re.compile(r"^title:[ \t]*['\"]?(.*?)['\"]?[ \t]*$", re.MULTILINE)


def _markdown_sections(text: str) -> tuple[str, list[Section]]:
    """Split Markdown at ATX/setext headings (ignoring fenced code); return (first H1 or '', sections).

    A lone H1 is the document's title, not a part of it, so it is left out of the heading paths.
    """
    title = ""
    if fm := _FRONT_MATTER.match(text):
        if t := _FRONT_MATTER_TITLE.search(fm.group(1)):
            title = t.group(1).strip()
        text = text[fm.end():]

    builder = _SectionBuilder()
    fence: str | None = None
    body: list[str] = []  # lines of the current section
    h1_count = 0

    for line in text.split("\n"):
        if fence is not None:
            body.append(line)
            if line.strip().startswith(fence):
                fence = None
            continue
        if m := _FENCE.match(line):
            fence = m.group(1)
            body.append(line)
            continue
        level, heading = 0, ""
        if m := _ATX.match(line):
            level, heading = len(m.group(1)), (m.group(2) or "").strip()
        elif (m := _SETEXT.match(line)) and body and body[-1].strip() and not _ATX.match(body[-1]):
            level, heading = (1 if m.group(1)[0] == "=" else 2), body.pop().strip()
        if level:
            builder.add("\n".join(body))
            body = []
            builder.heading(level, heading)
            if level == 1:
                h1_count += 1
                title = title or heading
        else:
            body.append(line)
    builder.add("\n".join(body))
    builder.flush()
    return title, _drop_lone_h1(builder.sections, title if h1_count == 1 else None)


def _drop_lone_h1(sections: list[Section], h1: str | None) -> list[Section]:
    """Remove a document's only H1 (its title) from the front of every heading path."""
    if not h1:
        return sections
    return [replace(s, heading_path=s.heading_path[1:]) if s.heading_path[:1] == [h1] else s for s in sections]


def _read_code(path: Path) -> ParsedDocument:
    text = _read_text(path)
    sections = _python_sections(text) if path.suffix.lower() == ".py" else None
    return ParsedDocument(path.name, "", sections or [Section(text, first_line=1)])


def _python_sections(source: str) -> list[Section] | None:
    """One section per top-level def/class (decorators and preceding comments included)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    lines = source.split("\n")
    cuts: list[tuple[int, list[str]]] = []  # (0-based first line, heading path) in file order
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            floor = cuts[-1][0] if cuts else 0
            while start > floor and lines[start - 1].lstrip().startswith("#"):
                start -= 1  # keep the comment block that introduces a definition with it
            kind = "class" if isinstance(node, ast.ClassDef) else "def"
            cuts.append((start, [f"{kind} {node.name}"]))
            cuts.append((node.end_lineno or node.lineno, []))
    if not cuts:
        return None
    bounds = [(0, []), *cuts, (len(lines), [])]
    sections = []
    for (start, heading), (end, _) in zip(bounds, bounds[1:], strict=False):
        chunk = "\n".join(lines[start:end])
        if chunk.strip():
            sections.append(Section(chunk, heading_path=heading, first_line=start + 1))
    return sections


# ---------------------------------------------------------------------------------------------------
# Structured text: CSV, JSON, JSON Lines
# ---------------------------------------------------------------------------------------------------


def _read_csv(path: Path) -> ParsedDocument:
    text = _read_text(path)
    sample = text[:65536]
    dialect: type[csv.Dialect] | csv.Dialect
    if path.suffix.lower() == ".tsv":
        dialect = csv.excel_tab
    else:
        try:
            dialect = csv.Sniffer().sniff(sample, delimiters=",;\t|")
        except csv.Error:
            dialect = csv.excel
    rows = [[_one_line(c) for c in row] for row in csv.reader(io.StringIO(text), dialect)]
    rows = [row for row in rows if any(row)]
    if not rows:
        return ParsedDocument(path.name, "", [])
    header = rows[0] if _looks_like_header(rows) else None
    lines = []
    for row in rows[1:] if header else rows:
        if header:
            cells = [f"{h}: {v}" for h, v in zip(header, row, strict=False) if v]
            cells += [v for v in row[len(header):] if v]
        else:
            cells = [v for v in row if v]
        lines.append("; ".join(cells))
    return ParsedDocument(path.name, "", [Section("\n".join(lines), first_line=2 if header else 1)])


def _one_line(s: str) -> str:
    return " ".join(s.split())


def _looks_like_header(rows: list[list[str]]) -> bool:
    first = rows[0]
    if len(rows) < 2 or not all(first) or len(set(first)) != len(first):
        return False
    return not any(_is_number(c) for c in first)


def _is_number(s: str) -> bool:
    try:
        float(s.replace(",", ""))
    except ValueError:
        return False
    return True


def _read_json(path: Path) -> ParsedDocument:
    text = _read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DocumentError(f"{path.name} is not valid JSON (line {e.lineno}, column {e.colno})") from None
    if isinstance(data, dict) and data:
        sections = [Section("\n".join(_flatten(value, "")) or "(empty)", heading_path=[str(key)])
                    for key, value in data.items()]
    elif isinstance(data, list):
        sections = [Section("\n\n".join("\n".join(_flatten(item, "")) for item in data))]
    else:
        sections = [Section("\n".join(_flatten(data, "")))]
    return ParsedDocument(path.name, "", sections)


def _read_jsonl(path: Path) -> ParsedDocument:
    lines = []
    for n, line in enumerate(_read_text(path).split("\n"), start=1):
        if not line.strip():
            lines.append("")
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise DocumentError(f"{path.name} is not valid JSON Lines (line {n})") from None
        lines.append("; ".join(_flatten(record, "")))
    return ParsedDocument(path.name, "", [Section("\n".join(lines), first_line=1)])


def _flatten(value: Any, prefix: str) -> Iterator[str]:
    """Yield ``path: value`` lines; lists of scalars stay on one line."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        for i, v in enumerate(value):
            yield from _flatten(v, f"{prefix}[{i}]")
    else:
        if isinstance(value, list):
            rendered = ", ".join(_scalar(v) for v in value)
        else:
            rendered = _scalar(value)
        yield f"{prefix}: {rendered}" if prefix else rendered


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return _clean_text(str(v))


# ---------------------------------------------------------------------------------------------------
# Section assembly shared by the structured readers
# ---------------------------------------------------------------------------------------------------


class _SectionBuilder:
    """Collects paragraphs under a heading stack and emits a Section whenever the heading changes."""

    def __init__(self, base_path: Iterable[str] = (), page: int | None = None) -> None:
        self._base = list(base_path)
        self._stack: list[tuple[int, str]] = []
        self._paragraphs: list[str] = []
        self._page = page
        self.sections: list[Section] = []

    @property
    def heading_path(self) -> list[str]:
        return [*self._base, *(h for _, h in self._stack)]

    def add(self, paragraph: str) -> None:
        if paragraph.strip():
            self._paragraphs.append(paragraph.strip("\n"))

    def heading(self, level: int, text: str) -> None:
        self.flush()
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        text = _one_line(text)
        if text:
            self._stack.append((level, text))

    def flush(self) -> None:
        if self._paragraphs:
            self.sections.append(Section("\n\n".join(self._paragraphs), self._page, self.heading_path))
            self._paragraphs = []


def _table_text(rows: list[list[str]]) -> str:
    """Render a table as lines; with a header row, each line reads ``column: value; column: value``."""
    rows = [[_one_line(c) for c in row] for row in rows]
    rows = [row for row in rows if any(row)]
    if not rows:
        return ""
    if _looks_like_header(rows):
        header, body = rows[0], rows[1:]
        return "\n".join(
            "; ".join(f"{h}: {v}" for h, v in zip(header, row, strict=False) if v) for row in body
        )
    return "\n".join(" | ".join(c for c in row if c) for row in rows)


# ---------------------------------------------------------------------------------------------------
# PDF
# ---------------------------------------------------------------------------------------------------


def _pdf_limit(name: str, e: Exception) -> str | None:
    """pypdf's refusal of a stream that inflates past its limit (a decompression bomb), said as ours: the
    limit named, not "damaged". None for any other error."""
    from pypdf.errors import LimitReachedError

    if not isinstance(e, LimitReachedError):
        return None
    from pypdf import get_configuration

    mb = get_configuration().zlib_maximum_output_length / 1_000_000
    return (f"{name} was not read: a compressed part of it (a PDF stream) inflates to more than {mb:g} MB, the "
            "limit for one part (it may be a decompression bomb)")


def _read_pdf(path: Path, ocr: OcrOptions) -> ParsedDocument:
    import pypdf
    from pypdf import PasswordType

    reader = pypdf.PdfReader(path)
    if reader.is_encrypted:
        try:
            opened = reader.decrypt("") != PasswordType.NOT_DECRYPTED
        except Exception as e:  # e.g. DependencyError when an AES backend is missing
            log.info("opening an encrypted PDF with an empty password failed: %s", type(e).__name__)
            opened = False
        if not opened:
            raise UnsupportedDocument(f"{path.name} is encrypted: remove the password and try again")

    pages: dict[int, Section] = {}
    scanned: list[int] = []  # pages without a text layer (or with only a stray page number)
    for number, page in enumerate(reader.pages, start=1):
        text = _clean_text((page.extract_text() or "").translate(_LIGATURES))
        if text.strip():
            pages[number] = Section(text, page=number)
        if len(_WORD_CHARS.findall(text)) < _MIN_TEXT_LAYER_CHARS:
            scanned.append(number)
    meta: dict[str, Any] = {}
    if scanned and ocr.enabled:
        if len(scanned) <= limits.MAX_OCR_PAGES:  # (more is refused, saying so, by _ocr_pdf_pages)
            for number in scanned:  # what rendering them would decode, before PDFium decodes any of it
                _check_pdf_images(path.name, number, reader.pages[number - 1])
        read = _ocr_pdf_pages(path, scanned, ocr)
        for number, text in read.items():
            if len(_WORD_CHARS.findall(text)) > len(_WORD_CHARS.findall(pages[number].text if number in pages else "")):
                pages[number] = Section(text, page=number, ocr=True)
        meta["ocr"] = {"engine": ENGINE_NAME, "pages": sorted(n for n, p in pages.items() if p.ocr)}
    sections = [pages[n] for n in sorted(pages)]
    if not sections:
        if not ocr.enabled:
            raise UnsupportedDocument(
                f"{path.name} has no text layer (scanned?) and reading scanned pages (OCR) is turned off: turn it "
                "on with `personal-llm config set ocr.enabled true`, or run the file through OCR first"
            )
        raise UnsupportedDocument(f"{path.name} has no text layer (scanned?) and OCR found no text on its pages")
    title = ""
    try:
        metadata = reader.metadata
        title = _one_line(str(metadata.title or "")) if metadata is not None else ""
    except Exception:  # broken metadata must not cost us the text
        log.info("unreadable PDF metadata ignored")
    return ParsedDocument(title or path.name, "", sections, meta)


_WORD_CHARS = re.compile(r"\w")
_MIN_TEXT_LAYER_CHARS = 10
_PDF_CHANNELS = {"/DeviceGray": 1, "/CalGray": 1, "/G": 1, "/DeviceRGB": 3, "/CalRGB": 3, "/RGB": 3, "/Lab": 3,
                 "/DeviceCMYK": 4, "/CMYK": 4, "/Separation": 1}
_PDF_OBJECTS_CHECKED = 10_000  # a page that reaches more images and forms than this is not rendered


def _check_pdf_images(name: str, number: int, page: Any) -> None:
    """Refuse a page whose images (in its resources, forms, patterns, Type 3 fonts and annotations'
    appearances, at any depth) are over the picture limits, from their dictionaries: nothing is decoded."""
    seen: set[int] = set()
    todo: list[Any] = [page.get("/Resources")]
    for annot in _pdf_list(page.get("/Annots")):  # their appearances are drawn with the page
        appearance: Any = _pdf(_pdf(annot).get("/AP")) if hasattr(_pdf(annot), "get") else None
        normal: Any = _pdf(appearance.get("/N")) if hasattr(appearance, "get") else None
        if hasattr(normal, "get"):
            todo += [normal] if "/Subtype" in normal else list(normal.values())
    where = f": an image on page {number}"
    while todo:
        node = _pdf(todo.pop())
        if not hasattr(node, "get"):
            continue
        key = id(node) if getattr(node, "indirect_reference", None) is None else node.indirect_reference.idnum
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > _PDF_OBJECTS_CHECKED:
            raise limits.LimitExceeded(f"{name}{where} draws more than {_PDF_OBJECTS_CHECKED:,} images and forms; "
                                       "not read.")
        if node.get("/Subtype") == "/Image":
            _check_pdf_image(name, where, node)
            todo.append(node.get("/SMask"))
            continue
        for group in ("/XObject", "/Pattern", "/Font"):
            entries = _pdf(node.get(group))
            if hasattr(entries, "values"):
                todo += list(entries.values())
        todo.append(node.get("/Resources"))


def _check_pdf_image(name: str, where: str, image: Any) -> None:
    def number(key: str, default: int) -> int:
        try:
            return int(_pdf(image.get(key, default)))
        except (TypeError, ValueError):
            return default

    if image.get("/ImageMask"):
        channels, bits = 1, 1
    else:
        channels, bits = _pdf_channels(image.get("/ColorSpace")), number("/BitsPerComponent", 8)
    limits.check_picture(name, number("/Width", 0), number("/Height", 0), channels, bits, where=where)


def _pdf_channels(space: Any, depth: int = 0) -> int:
    """Colour channels an image in this colour space decodes to (4 when it cannot be told: the most)."""
    space = _pdf(space)
    if isinstance(space, str):
        return _PDF_CHANNELS.get(space, 4)
    items = _pdf_list(space)
    if not items or depth > 4:
        return 4
    family = _pdf(items[0])
    if family == "/ICCBased" and len(items) > 1:
        try:
            return int(_pdf(_pdf(items[1]).get("/N", 4)))
        except (AttributeError, TypeError, ValueError):
            return 4
    if family == "/Indexed" and len(items) > 1:  # read as the colours of its palette
        return _pdf_channels(items[1], depth + 1)
    if family == "/DeviceN" and len(items) > 1:
        return max(len(_pdf_list(items[1])), 1)
    return _PDF_CHANNELS.get(str(family), 4)


def _pdf(value: Any) -> Any:
    """A PDF object with its indirect reference followed."""
    return value.get_object() if hasattr(value, "get_object") else value


def _pdf_list(value: Any) -> list[Any]:
    value = _pdf(value)
    return list(value) if isinstance(value, list) else []


def _ocr_pdf_pages(path: Path, numbers: list[int], ocr: OcrOptions) -> dict[int, str]:
    """OCR text of these 1-based pages, rendered with PDFium at limits.OCR_DPI (lowered for huge pages)."""
    import numpy as np
    import pypdfium2 as pdfium

    if len(numbers) > limits.MAX_OCR_PAGES:
        raise limits.LimitExceeded(
            f"{path.name} has {len(numbers):,} pages without a text layer; at most {limits.MAX_OCR_PAGES:,} pages "
            "of one document are read by OCR. Split it into smaller files."
        )
    out: dict[int, str] = {}
    pdf = pdfium.PdfDocument(str(path))
    try:
        for done, number in enumerate(numbers):
            ocr.check_cancel()
            page = pdf[number - 1]
            try:
                width, height = page.get_size()
                # no larger than the OCR engine reads (it would reduce a larger page itself, after copying it)
                scale = min(limits.render_scale(width, height), MAX_SIDE / max(width, height, 1.0))
                bitmap = page.render(scale=scale)
                image = bitmap.to_pil().convert("RGB")
                bitmap.close()
            finally:
                page.close()
            text = _clean_text(read_image(np.asarray(image)))
            if text.strip():
                out[number] = text
            if ocr.progress is not None:
                ocr.progress(done + 1, len(numbers))
    finally:
        pdf.close()
    return out


# ---------------------------------------------------------------------------------------------------
# Images (OCR)
# ---------------------------------------------------------------------------------------------------

_PIL_FORMATS = ("PNG", "JPEG", "MPO", "TIFF", "WEBP")


def _read_image(path: Path, ocr: OcrOptions) -> ParsedDocument:
    """The text of a picture (every frame of a multi-page TIFF is a page), read by OCR."""
    import warnings

    import numpy as np
    from PIL import Image

    name = path.name
    if not ocr.enabled:
        raise UnsupportedDocument(
            f"{name} is a picture, and reading text from pictures (OCR) is turned off: turn it on with "
            "`personal-llm config set ocr.enabled true`"
        )
    sections = []
    with warnings.catch_warnings(), _pixel_guard(name):
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        with Image.open(path, formats=_PIL_FORMATS) as im:  # reads the header only
            frames = int(getattr(im, "n_frames", 1) or 1)
            if frames > limits.MAX_IMAGE_FRAMES:
                raise limits.LimitExceeded(f"{name} holds {frames:,} pictures; a picture file may hold at most "
                                           f"{limits.MAX_IMAGE_FRAMES:,}. Not read.")
            for frame in range(frames):
                ocr.check_cancel()
                im.seek(frame)
                limits.check_picture(name, *im.size, *_channels_and_bits(im),
                                     where=f": picture {frame + 1}" if frames > 1 else "")
                text = _clean_text(read_image(_for_ocr(im, np)))
                if text.strip():
                    sections.append(Section(text, page=frame + 1, ocr=True))
                if ocr.progress is not None:
                    ocr.progress(frame + 1, frames)
    if not sections:
        raise DocumentError(f"{name} has no text to remember (OCR found none in the picture)")
    return ParsedDocument(name, "", sections, {"ocr": {"engine": ENGINE_NAME, "pages": [s.page for s in sections]}})


def _channels_and_bits(im: Any) -> tuple[int, int]:
    """The colour channels (a palette's colours, not its index) and bits per channel a frame declares."""
    channels = len(im.getbands())
    if im.mode in ("P", "PA"):
        channels = len(getattr(im.palette, "mode", "RGB") or "RGB") + (im.mode == "PA")
    bits = 8
    rawmodes = [str(t.args if not isinstance(t.args, tuple) else (t.args[0] if t.args else "")) for t in im.tile]
    for rawmode in rawmodes:
        if found := re.search(r";(\d+)", rawmode):
            bits = max(bits, int(found.group(1)))
    sample = getattr(im, "tag_v2", {}).get(258) if hasattr(im, "tag_v2") else None  # TIFF BitsPerSample
    if isinstance(sample, tuple) and sample:
        bits = max(bits, *(int(b) for b in sample))
    if im.mode.startswith("I;16"):
        bits = max(bits, 16)
    elif im.mode in ("I", "F"):
        bits = max(bits, 32)
    return channels, bits


def _for_ocr(im: Any, np: Any) -> Any:
    """The frame as an RGB array at most ocr.MAX_SIDE pixels on its longer side: the OCR engine reads no
    more than that, and a larger picture handed to it whole is copied whole several times. A JPEG is
    decoded at a reduced scale; anything else is decoded once and reduced (by whole factors) at once."""
    factor = -(-max(im.size) // MAX_SIDE)
    if factor > 1 and im.format in ("JPEG", "MPO"):
        im.draft("RGB", (max(im.size[0] // factor, 1), max(im.size[1] // factor, 1)))
        factor = -(-max(im.size) // MAX_SIDE)
    if im.mode in ("1", "P", "PA") or im.mode.startswith("I;16"):  # no reduce() for these modes
        im = im.convert({"1": "L", "P": "RGB", "PA": "RGBA"}.get(im.mode, "I"))
    if factor > 1:
        im = im.reduce(factor)
    if im.mode == "I":
        im = im.point(lambda v: v / 256)  # 16-bit levels to 8
    return np.asarray(im.convert("RGB"))


@contextlib.contextmanager
def _pixel_guard(name: str) -> Iterator[None]:
    """Pillow's own decompression-bomb check (far above limits.MAX_IMAGE_PIXELS) worded as ours."""
    from PIL import Image

    try:
        yield
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise limits.LimitExceeded(f"{name} declares a picture of more than {limits.MAX_IMAGE_PIXELS / 1e6:,.0f} "
                                   "million pixels, the limit for one picture. Not read (it may be a decompression "
                                   "bomb).") from None


# ---------------------------------------------------------------------------------------------------
# Slides and spreadsheets
# ---------------------------------------------------------------------------------------------------


def _read_pptx(path: Path) -> ParsedDocument:
    """One section per slide (its title, text boxes and tables, in shape order), one for its speaker notes."""
    from pptx import Presentation

    deck = Presentation(str(path))
    sections: list[Section] = []
    for number, slide in enumerate(deck.slides, start=1):
        title_shape = slide.shapes.title
        title = _one_line(_clean_text(title_shape.text_frame.text)) if title_shape is not None and \
            title_shape.has_text_frame else ""
        where = [f"slide {number}", *([title] if title else [])]
        parts = [title] if title else []
        for shape in _shapes(slide.shapes):
            if title_shape is not None and shape.shape_id == title_shape.shape_id:
                continue
            if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
                parts.append(_clean_text(shape.text_frame.text))
            elif getattr(shape, "has_table", False) and shape.has_table:
                parts.append(_table_text([[_clean_text(c.text) for c in row.cells] for row in shape.table.rows]))
        body = "\n\n".join(p.strip() for p in parts if p.strip())
        if body:
            sections.append(Section(body, heading_path=where))
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = _clean_text(slide.notes_slide.notes_text_frame.text).strip()
            if notes:
                sections.append(Section(notes, heading_path=[*where, "speaker notes"]))
    title = _one_line(deck.core_properties.title or "")
    return ParsedDocument(title or path.name, "", sections)


def _shapes(shapes: Any) -> Iterator[Any]:
    """Every shape, groups opened, in the slide's order."""
    for shape in shapes:
        if hasattr(shape, "shapes") and getattr(shape, "shape_type", None) == 6:  # MSO_SHAPE_TYPE.GROUP
            yield from _shapes(shape.shapes)
        else:
            yield shape


_ROWS_PER_SECTION = 40
_CHARS_PER_SECTION = 1500


def _cell_text(value: Any) -> str:
    """A spreadsheet value as people write it: 3 not 3.0, dates in ISO form, TRUE/FALSE."""
    import datetime as dt

    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ", timespec="minutes") if (value.hour, value.minute, value.second) != (0, 0, 0) \
            else value.date().isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return _one_line(_clean_text(str(value)))


def _sheet_sections(name: str, sheet: str, rows: Iterable[tuple[int, list[str]]]) -> list[Section]:
    """Sections of one sheet: (row number, cells) pairs become lines grouped into row ranges.

    When the first non-empty row looks like a header, every later row reads ``Header: value; Header:
    value`` (and the header row itself is not repeated); otherwise ``value | value``."""
    cells = 0
    kept: list[tuple[int, list[str]]] = []
    for number, row in rows:
        cells += max(len(row), 1)
        if cells > limits.MAX_SHEET_CELLS:
            raise limits.LimitExceeded(f"{name} has more than {limits.MAX_SHEET_CELLS:,} cells; not read. Split "
                                       "it into smaller files.")
        while row and not row[-1]:
            row.pop()
        if any(row):
            kept.append((number, row))
    if not kept:
        return []
    header = kept[0][1] if _looks_like_header([r for _, r in kept[:2]]) else None
    body = kept[1:] if header else kept
    lines: list[tuple[int, str]] = []
    for number, row in body:
        if header:
            text = "; ".join([f"{h}: {v}" if h else v for h, v in zip(header, row, strict=False) if v]
                             + [v for v in row[len(header):] if v])
        else:
            text = " | ".join(v for v in row if v)
        lines.append((number, text))
    if header and not body:
        lines = [(kept[0][0], " | ".join(v for v in header if v))]
    sections = []
    group: list[tuple[int, str]] = []

    def flush() -> None:
        if group:
            first, last = group[0][0], group[-1][0]
            where = f"row {first}" if first == last else f"rows {first}–{last}"
            sections.append(Section("\n".join(t for _, t in group), heading_path=[sheet, where]))
            group.clear()

    size = 0
    for number, text in lines:
        if group and (len(group) >= _ROWS_PER_SECTION or size + len(text) > _CHARS_PER_SECTION):
            flush()
            size = 0
        group.append((number, text))
        size += len(text) + 1
    flush()
    return sections


def _read_xlsx(path: Path) -> ParsedDocument:
    import openpyxl

    book = openpyxl.load_workbook(str(path), read_only=True, data_only=True)
    try:
        sections: list[Section] = []
        for ws in book.worksheets:
            start = ws.min_row or 1
            rows = ((start + i, [_cell_text(v) for v in row]) for i, row in enumerate(ws.iter_rows(values_only=True)))
            sections += _sheet_sections(path.name, _one_line(ws.title) or "sheet", rows)
        title = _one_line(book.properties.title or "") if book.properties is not None else ""
    finally:
        book.close()
    return ParsedDocument(title or path.name, "", sections)


_MAX_REPEAT = 1024  # a repeated cell or row (ODS compresses runs) is written out at most this many times


def _read_ods(path: Path) -> ParsedDocument:
    from odf import teletype
    from odf.namespaces import DCNS, TABLENS
    from odf.opendocument import load

    document = load(str(path))
    sections: list[Section] = []
    cell_tags = {(TABLENS, "table-cell"), (TABLENS, "covered-table-cell")}

    def table_rows(table: Any) -> Iterator[tuple[int, list[str]]]:
        number = 0
        for row in _ods_rows(table, TABLENS):
            repeat = _repeat(row.getAttrNS(TABLENS, "number-rows-repeated"))
            cells: list[str] = []
            for cell in row.childNodes:
                if getattr(cell, "qname", None) not in cell_tags:
                    continue
                text = _one_line(_clean_text(teletype.extractText(cell)))
                times = _repeat(cell.getAttrNS(TABLENS, "number-columns-repeated"))
                cells += [text] * min(times, _MAX_REPEAT)
            if not any(cells):
                number += repeat  # a run of empty rows: counted, not written out
                yield number, []
                continue
            for _ in range(min(repeat, _MAX_REPEAT)):
                number += 1
                yield number, list(cells)
            number += max(0, repeat - _MAX_REPEAT)

    for table in _ods_tables(document.spreadsheet, TABLENS):
        sheet = _one_line(str(table.getAttrNS(TABLENS, "name") or "")) or "sheet"
        sections += _sheet_sections(path.name, sheet, table_rows(table))
    titles = [n for n in document.meta.childNodes if getattr(n, "qname", None) == (DCNS, "title")]
    title = _one_line(teletype.extractText(titles[0])) if titles else ""
    return ParsedDocument(title or path.name, "", sections)


def _repeat(value: Any) -> int:
    try:
        return max(1, int(value)) if value else 1
    except (TypeError, ValueError):
        return 1


def _ods_tables(node: Any, ns: str) -> Iterator[Any]:
    for child in node.childNodes:
        if getattr(child, "qname", None) == (ns, "table"):
            yield child


def _ods_rows(node: Any, ns: str) -> Iterator[Any]:
    """The rows of a table, also those inside header-rows and row groups (not those of nested tables)."""
    for child in node.childNodes:
        qname = getattr(child, "qname", None)
        if qname == (ns, "table-row"):
            yield child
        elif qname in ((ns, "table-header-rows"), (ns, "table-row-group"), (ns, "table-rows")):
            yield from _ods_rows(child, ns)


# ---------------------------------------------------------------------------------------------------
# Word processor formats
# ---------------------------------------------------------------------------------------------------

_HEADING_STYLE = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)


def _read_docx(path: Path) -> ParsedDocument:
    import docx
    from docx.table import Table

    document = docx.Document(str(path))
    builder = _SectionBuilder()
    title = (document.core_properties.title or "").strip()
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            builder.add(_table_text([[cell.text for cell in row.cells] for row in block.rows]))
            continue
        text = _clean_text(block.text)
        style = block.style
        names = (style.name or "", style.style_id or "") if style is not None else ()
        level = next((int(m.group(1)) for n in names if (m := _HEADING_STYLE.match(n))), 0)
        if level:
            builder.heading(level, text)
        elif "Title" in names and text.strip():
            title = title or _one_line(text)
        else:
            builder.add(text)
    builder.flush()
    return ParsedDocument(title or path.name, "", builder.sections)


def _read_odt(path: Path) -> ParsedDocument:
    from odf import teletype
    from odf.namespaces import DCNS, TABLENS, TEXTNS
    from odf.opendocument import load
    from odf.table import TableRow

    document = load(str(path))
    builder = _SectionBuilder()

    def walk(node: Any) -> None:
        for child in node.childNodes:
            if child.nodeType != child.ELEMENT_NODE:
                continue
            qname = child.qname
            if qname == (TEXTNS, "h"):
                level = child.getAttrNS(TEXTNS, "outline-level")
                builder.heading(int(level) if level and str(level).isdigit() else 1,
                                _clean_text(teletype.extractText(child)))
            elif qname == (TEXTNS, "p"):
                builder.add(_clean_text(teletype.extractText(child)))
            elif qname == (TABLENS, "table"):
                rows = [
                    [_clean_text(teletype.extractText(cell)) for cell in row.childNodes
                     if getattr(cell, "qname", None) == (TABLENS, "table-cell")]
                    for row in child.getElementsByType(TableRow)
                ]
                builder.add(_table_text(rows))
            else:
                walk(child)

    walk(document.text)
    builder.flush()
    titles = [n for n in document.meta.childNodes if getattr(n, "qname", None) == (DCNS, "title")]
    title = _one_line(teletype.extractText(titles[0])) if titles else ""
    return ParsedDocument(title or path.name, "", builder.sections)


# ---------------------------------------------------------------------------------------------------
# HTML and EPUB
# ---------------------------------------------------------------------------------------------------

_SKIP_TAGS = frozenset({
    "script", "style", "noscript", "template", "nav", "button",
    "iframe", "svg", "canvas", "select", "head", "title", "meta", "link", "aside", "form",
})
_SKIP_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search"})
_BLOCK_TAGS = frozenset({
    "p", "div", "section", "article", "main", "li", "ul", "ol", "dl", "dt", "dd", "blockquote", "pre",
    "table", "tr", "figure", "figcaption", "address", "details", "summary", "hr", "body",
})
_HEADINGS = {f"h{i}": i for i in range(1, 7)}


def _read_html(path: Path) -> ParsedDocument:
    import lxml.html

    markup = _read_text(path)
    tree = lxml.html.document_fromstring(markup)
    title = _one_line(tree.findtext(".//title") or "")
    return ParsedDocument(title or path.name, "", _html_sections(markup, tree))


def _html_sections(markup: str, tree: Any) -> list[Section]:
    """Main text of a web page with its heading structure.

    trafilatura removes boilerplate best, but on short pages it falls back to a mode that drops
    headings; then walking the page's own structure (minus navigation) gives better sections.
    """
    import trafilatura

    extracted = trafilatura.extract(
        markup, output_format="markdown", include_tables=True, include_links=False,
        include_images=False, include_comments=False, include_formatting=False,
    )
    has_headings = tree.find(".//h1") is not None or any(tree.iter("h2", "h3", "h4", "h5", "h6"))
    if extracted and (not has_headings or re.search(r"^#{1,6} ", extracted, re.MULTILINE)):
        return _markdown_sections(_clean_text(extracted))[1]
    root = next(iter(tree.iter("main", "article")), None)
    return _walk_html(root if root is not None else tree.body if tree.find("body") is not None else tree)


def _walk_html(root: Any, base_path: Iterable[str] = ()) -> list[Section]:
    """Sections from an lxml HTML element: h1..h6 start sections, navigation and scripts are skipped."""
    builder = _SectionBuilder(base_path)
    buffer: list[str] = []

    def end_block() -> None:
        text = _clean_text("".join(buffer))
        buffer.clear()
        builder.add("\n".join(" ".join(line.split()) for line in text.split("\n") if line.strip()))

    def walk(el: Any) -> None:
        tag = el.tag.rsplit("}", 1)[-1].lower() if isinstance(el.tag, str) else ""
        if not tag or tag in _SKIP_TAGS or el.get("role") in _SKIP_ROLES or el.get("hidden") is not None:
            return
        if tag in ("header", "footer") and not any(el.iter(*_HEADINGS)):
            return  # page chrome; an article's own <header> usually holds its title
        if tag in _HEADINGS:
            end_block()
            builder.heading(_HEADINGS[tag], _clean_text(el.text_content()))
            return
        if tag == "tr":
            cells = [c.text_content() for c in el if isinstance(c.tag, str) and c.tag.lower() in ("td", "th")]
            buffer.append(" | ".join(_one_line(c) for c in cells if c.strip()) + "\n")
            return
        if tag in _BLOCK_TAGS:
            end_block()
        if tag == "br":
            buffer.append("\n")
        if el.text:
            buffer.append(el.text)
        for child in el:
            walk(child)
            if child.tail:
                buffer.append(child.tail)
        if tag in _BLOCK_TAGS:
            end_block()

    walk(root)
    end_block()
    builder.flush()
    h1s = [_one_line(_clean_text(h.text_content())) for h in root.iter("h1")]
    return _drop_lone_h1(builder.sections, h1s[0] if len(h1s) == 1 else None)


def _read_epub(path: Path) -> ParsedDocument:
    import ebooklib
    import lxml.html
    from ebooklib import epub

    # parse_file has inflated and CRC-checked every member (limits.check_archive): damage is reported already
    book = epub.read_epub(str(path), options={"ignore_ncx": True})
    toc_titles: dict[str, str] = {}
    for href, label in _epub_toc(book.toc):
        toc_titles.setdefault(href, label)
    sections: list[Section] = []
    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT:
            continue
        content = item.get_content()
        if not content or not content.strip():
            continue
        tree = lxml.html.document_fromstring(content)
        body = tree.find("body")
        root = body if body is not None else tree
        chapter = toc_titles.get(item.get_name()) or _first_heading(root) or _one_line(tree.findtext(".//title") or "")
        for s in _walk_html(root):
            path_ = s.heading_path if s.heading_path[:1] == [chapter] or not chapter else [chapter, *s.heading_path]
            sections.append(Section(s.text, None, path_))
    titles = book.get_metadata("DC", "title")
    title = _one_line(str(titles[0][0])) if titles else ""
    return ParsedDocument(title or path.name, "", sections)


def _epub_toc(entries: Any) -> Iterator[tuple[str, str]]:
    """(file name, title) pairs from ebooklib's nested table of contents, in reading order."""
    for entry in entries:
        if isinstance(entry, tuple | list):
            head, children = entry[0], entry[1]
            yield from _epub_toc([head])
            yield from _epub_toc(children)
        elif getattr(entry, "href", None) and getattr(entry, "title", None):
            yield entry.href.split("#", 1)[0], _one_line(entry.title)


def _first_heading(root: Any) -> str:
    for el in root.iter("h1", "h2", "h3"):
        if text := _one_line(el.text_content()):
            return text
    return ""


_READERS: dict[str, Callable[[Path], ParsedDocument]] = {
    **dict.fromkeys(_TEXT_EXTENSIONS, _read_plain),
    **dict.fromkeys(_MARKDOWN_EXTENSIONS, _read_markdown),
    **dict.fromkeys(_HTML_EXTENSIONS, _read_html),
    **dict.fromkeys(_CSV_EXTENSIONS, _read_csv),
    ".json": _read_json,
    ".jsonl": _read_jsonl,
    ".docx": _read_docx,
    ".pptx": _read_pptx,
    ".xlsx": _read_xlsx,
    ".ods": _read_ods,
    ".odt": _read_odt,
    ".epub": _read_epub,
}

_OCR_READERS: dict[str, Callable[[Path, OcrOptions], ParsedDocument]] = {
    ".pdf": _read_pdf,
    **dict.fromkeys(IMAGE_EXTENSIONS, _read_image),
}
