"""Read a SQLCipher 4 file the way someone holding its key could: decrypt every page of the database and
every frame of its write-ahead log, including pages SQLite no longer uses (free pages, old log frames).

SQLCipher 4 page format: the last bytes of each page are reserved (a 16-byte IV, then the page's HMAC); the
rest is AES-256-CBC under the key. Two layouts, as `engine.db.CIPHERS` makes them: 8192-byte pages with
HMAC-SHA256 (48 reserved bytes: stores made now) and SQLCipher's defaults, 4096-byte pages with
HMAC-SHA512 (80 reserved bytes: stores made before). Which one a file has is read from page 1: decrypted,
it starts with byte 16 of SQLite's header, the page size. The first 16 bytes of the file are the salt, so
page 1's ciphertext starts at byte 16. A raw key (`x'…'`, as the engine's data keys are) is the AES key
itself. A WAL frame is a 24-byte header and one page encrypted the same way.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

LAYOUTS = ((8192, 48), (4096, 80))  # (page size, reserved bytes)
SALT = 16
WAL_HEADER = 32
FRAME_HEADER = 24


def decrypt_page(key: bytes, page: bytes, pgno: int, reserve: int) -> bytes:
    size = len(page)
    body = page[SALT if pgno == 1 else 0 : size - reserve]
    iv = page[size - reserve : size - reserve + 16]
    d = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
    return d.update(body) + d.finalize()


def layout(db: Path, key: bytes) -> tuple[int, int]:
    """(page size, reserved bytes) of this store file."""
    data = db.read_bytes()[:8192]
    for size, reserve in LAYOUTS:
        if len(data) >= size and struct.unpack(">H", decrypt_page(key, data[:size], 1, reserve)[:2])[0] == size:
            return size, reserve
    raise AssertionError(f"{db} is not a SQLCipher 4 file under this key")


def db_pages(db: Path, key: bytes) -> Iterator[tuple[int, bytes]]:
    size, reserve = layout(db, key)
    data = db.read_bytes()
    for i in range(len(data) // size):
        yield i + 1, decrypt_page(key, data[i * size : (i + 1) * size], i + 1, reserve)


def wal_frames(wal: Path, key: bytes, db: Path) -> Iterator[tuple[int, bytes]]:
    if not wal.exists():
        return
    size, reserve = layout(db, key)
    data = wal.read_bytes()
    off = WAL_HEADER
    while off + FRAME_HEADER + size <= len(data):
        pgno = struct.unpack(">I", data[off : off + 4])[0]
        yield pgno, decrypt_page(key, data[off + FRAME_HEADER : off + FRAME_HEADER + size], pgno, reserve)
        off += FRAME_HEADER + size


def everything(db: Path, key: bytes) -> list[tuple[str, int, bytes]]:
    """(file, page number, plaintext) for every page of the database and every frame of its WAL."""
    wal = db.with_name(db.name + "-wal")
    return [("db", n, p) for n, p in db_pages(db, key)] + [("wal", n, p) for n, p in wal_frames(wal, key, db)]


def find(db: Path, key: bytes, needle: bytes) -> list[tuple[str, int]]:
    return [(f, n) for f, n, p in everything(db, key) if needle in p]
