"""Build hostile files for the limit tests: zip bombs of each container format, deep XML, huge lines.

Each container starts from a real, valid document of its format (written by the library the parser
uses, or by hand where the format is that simple) and has one of its parts replaced, so only the
hostile part differs from a file the parsers read every day.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

from tests.fixtures_docs import make_docx, make_epub, make_odt

MIB = 1024 * 1024

# The part of each format that holds the text, and how a paragraph of it is written.
TEXT_PART = {".docx": "word/document.xml", ".odt": "content.xml", ".epub": "EPUB/chap_01.xhtml"}
_OPEN = {
    ".docx": b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document xmlns:w='
             b'"http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>',
    ".odt": b'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-content xmlns:office='
            b'"urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:text='
            b'"urn:oasis:names:tc:opendocument:xmlns:text:1.0" office:version="1.2"><office:body><office:text>',
    ".epub": b'<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml"><head>'
             b"<title>c</title></head><body>",
}
_CLOSE = {".docx": b"</w:body></w:document>", ".odt": b"</office:text></office:body></office:document-content>",
          ".epub": b"</body></html>"}
_PARA = {".docx": (b"<w:p><w:r><w:t>", b"</w:t></w:r></w:p>"), ".odt": (b"<text:p>", b"</text:p>"),
         ".epub": (b"<p>", b"</p>")}
_NEST = {".docx": (b"<w:sdt><w:sdtContent>", b"</w:sdtContent></w:sdt>"),
         ".odt": (b"<text:section>", b"</text:section>"), ".epub": (b"<div>", b"</div>")}


def base_document(ext: str, path: Path) -> Path:
    """A valid document of this format (from the parser tests' fixtures)."""
    return {".docx": make_docx, ".odt": make_odt, ".epub": make_epub}[ext](path)


def _text_part(ext: str, names: list[str]) -> str:
    if ext == ".epub":
        return next(n for n in names if n.endswith((".xhtml", ".html")) and "nav" not in n)
    return TEXT_PART[ext]


def replace_part(src: Path, dst: Path, part: str | None, body: Iterator[bytes], *, declared: int | None = None) -> Path:
    """Copy the zip `src` to `dst` with one member's content streamed from `body` (the text part when
    `part` is None). The member is deflated at the highest level; `declared`, when given, overwrites the
    uncompressed size recorded in the archive (a header that lies)."""
    ext = src.suffix.lower()
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
        names = zin.namelist()
        target = part or _text_part(ext, names)
        for info in zin.infolist():
            if info.filename == target:
                continue
            zout.writestr(info, zin.read(info.filename))
        with zout.open(target, "w", force_zip64=True) as f:
            for block in body:
                f.write(block)
    if declared is not None:
        _patch_declared_size(dst, target, declared)
    return dst


def _patch_declared_size(path: Path, member: str, size: int) -> None:
    """Rewrite the central directory's uncompressed size of `member` (zip64 extra field left alone)."""
    data = bytearray(path.read_bytes())
    name = member.encode()
    pos = data.rfind(b"PK\x01\x02")
    while pos != -1:
        name_len = int.from_bytes(data[pos + 28:pos + 30], "little")
        if bytes(data[pos + 46:pos + 46 + name_len]) == name:
            data[pos + 24:pos + 28] = min(size, 0xFFFFFFFE).to_bytes(4, "little")
            extra_len = int.from_bytes(data[pos + 30:pos + 32], "little")
            extra = pos + 46 + name_len
            end = extra + extra_len
            while extra + 4 <= end:  # the zip64 field carries the real size when the 32-bit one is 0xFFFFFFFF
                tag, length = int.from_bytes(data[extra:extra + 2], "little"), int.from_bytes(data[extra + 2:extra + 4], "little")
                if tag == 1 and length >= 8:
                    data[extra + 4:extra + 12] = size.to_bytes(8, "little")
                extra += 4 + length
            break
        pos = data.rfind(b"PK\x01\x02", 0, pos)
    path.write_bytes(bytes(data))


def bomb_body(ext: str, inflated: int, block: int = MIB) -> Iterator[bytes]:
    """A well-formed text part of about `inflated` bytes that compresses about 1000:1 (one long paragraph)."""
    start, end = _PARA[ext]
    yield _OPEN[ext] + start
    filler = b"A" * block
    for _ in range(max(1, inflated // block)):
        yield filler
    yield end + _CLOSE[ext]


def many_paragraphs_body(ext: str, count: int, text: bytes = b"All work and no play makes Jack a dull boy. ") -> Iterator[bytes]:
    """A text part with `count` short paragraphs: a lot of chunks from a small, very compressible file."""
    start, end = _PARA[ext]
    yield _OPEN[ext]
    para = start + text * 20 + end
    for _ in range(count // 1000):
        yield para * 1000
    yield para * (count % 1000)
    yield _CLOSE[ext]


def deep_body(ext: str, depth: int) -> Iterator[bytes]:
    """A text part whose elements nest `depth` levels deep."""
    start, end = _NEST[ext]
    p_start, p_end = _PARA[ext]
    yield _OPEN[ext] + start * depth + p_start + b"deep" + p_end + end * depth + _CLOSE[ext]


def entity_body(ext: str) -> Iterator[bytes]:
    """A text part with a 'billion laughs' entity expansion in its DOCTYPE."""
    lol = [b'<!ENTITY a0 "lol">'] + [b'<!ENTITY a%d "%s">' % (i, b"&a%d;" % (i - 1) * 10) for i in range(1, 10)]
    head = _OPEN[ext].split(b"\n", 1)
    root = head[1].split(b" ", 1)[0][1:]
    start, end = _PARA[ext]
    yield head[0] + b"\n<!DOCTYPE " + root + b" [" + b"".join(lol) + b"]>\n" + head[1] + start + b"&a9;" + end + _CLOSE[ext]


def many_members(src: Path, dst: Path, count: int) -> Path:
    """A valid document with `count` extra empty members."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info.filename))
        for i in range(count):
            zout.writestr(f"junk/{i}.bin", b"")
    return dst


def long_line(path: Path, size: int, *, words: bool) -> Path:
    """A text file of `size` bytes on a single line: words separated by spaces, or one unbroken token."""
    unit = b"lorem ipsum dolor sit amet consectetur " if words else b"x" * 64
    with open(path, "wb") as f:
        full, rest = divmod(size, len(unit) * 16384)
        block = unit * 16384
        for _ in range(full):
            f.write(block)
        f.write((unit * (rest // len(unit) + 1))[:rest])
    return path
