"""Read a SQLCipher 4 file the way someone holding its key could: decrypt every page of the database and
every frame of its write-ahead log, including pages SQLite no longer uses (free pages, old log frames).

SQLCipher 4 page format (defaults, as `engine.db` uses them): 4096-byte pages; the last 80 bytes of each
page are reserved (a 16-byte IV, then a 64-byte HMAC-SHA512); the rest is AES-256-CBC under the key. The
first 16 bytes of the file are the salt, so page 1's ciphertext starts at byte 16. A raw key (`x'…'`, as
the engine's data keys are) is the AES key itself. A WAL frame is a 24-byte header and one page encrypted
the same way.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

PAGE = 4096
RESERVE = 80
SALT = 16
WAL_HEADER = 32
FRAME_HEADER = 24


def decrypt_page(key: bytes, page: bytes, pgno: int) -> bytes:
    body = page[SALT if pgno == 1 else 0 : PAGE - RESERVE]
    iv = page[PAGE - RESERVE : PAGE - RESERVE + 16]
    d = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
    return d.update(body) + d.finalize()


def db_pages(db: Path, key: bytes) -> Iterator[tuple[int, bytes]]:
    data = db.read_bytes()
    for i in range(len(data) // PAGE):
        yield i + 1, decrypt_page(key, data[i * PAGE : (i + 1) * PAGE], i + 1)


def wal_frames(wal: Path, key: bytes) -> Iterator[tuple[int, bytes]]:
    if not wal.exists():
        return
    data = wal.read_bytes()
    off = WAL_HEADER
    while off + FRAME_HEADER + PAGE <= len(data):
        pgno = struct.unpack(">I", data[off : off + 4])[0]
        yield pgno, decrypt_page(key, data[off + FRAME_HEADER : off + FRAME_HEADER + PAGE], pgno)
        off += FRAME_HEADER + PAGE


def everything(db: Path, key: bytes) -> list[tuple[str, int, bytes]]:
    """(file, page number, plaintext) for every page of the database and every frame of its WAL."""
    wal = db.with_name(db.name + "-wal")
    return [("db", n, p) for n, p in db_pages(db, key)] + [("wal", n, p) for n, p in wal_frames(wal, key)]


def find(db: Path, key: bytes, needle: bytes) -> list[tuple[str, int]]:
    return [(f, n) for f, n, p in everything(db, key) if needle in p]
