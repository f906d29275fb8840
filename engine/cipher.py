"""The export cipher: a passphrase-protected stream of JSON Lines.

One plaintext JSON line describes the scheme, then the data follows as AES-256-GCM segments (key from
scrypt) in the STREAM construction — each segment's nonce holds its counter and a last-segment flag, and the
header line is the associated data, so reordered, truncated or edited files are refused. Only the
`cryptography` package's primitives are used.
"""

from __future__ import annotations

import base64
import json
import secrets
import struct
from pathlib import Path
from typing import Any, BinaryIO, Final

from .errors import UserError

FORMAT: Final = "personal-llm-export"
FORMAT_VERSION = 1

# encryption parameters (written into each file, so they can change without breaking old exports)
CIPHER = "AES-256-GCM"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**17, 8, 1  # 128 MiB, ~0.3 s: slow to guess, quick once
SEGMENT = 1 << 20  # plaintext bytes per encrypted segment
NONCE_PREFIX = 7  # + 4-byte counter + 1-byte last flag = 12-byte GCM nonce
TAG = 16
MAX_HEADER_LINE = 4096


class WrongPassphrase(UserError):
    """The passphrase does not open the file (or the file was altered)."""


def _derive_key(passphrase: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    if not passphrase:
        raise UserError("An empty passphrase cannot protect an export.")
    return Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(passphrase.encode("utf-8"))


def _nonce(prefix: bytes, counter: int, last: bool) -> bytes:
    return prefix + struct.pack(">I", counter) + (b"\x01" if last else b"\x00")


class EncryptingWriter:
    """Writes the encrypted format to `out`: the header line, then sealed segments. Call finish() last."""

    def __init__(self, out: BinaryIO, passphrase: str):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        salt, self._prefix = secrets.token_bytes(16), secrets.token_bytes(NONCE_PREFIX)
        header = {
            "type": "encrypted", "format": FORMAT, "version": FORMAT_VERSION, "cipher": CIPHER,
            "kdf": {"name": "scrypt", "n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P,
                    "salt": base64.b64encode(salt).decode()},
            "nonce_prefix": base64.b64encode(self._prefix).decode(), "segment": SEGMENT,
        }
        self._aad = json.dumps(header, sort_keys=True).encode("ascii")
        self._aead = AESGCM(_derive_key(passphrase, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P))
        self._out = out
        self._buf = bytearray()
        self._counter = 0
        out.write(self._aad + b"\n")

    def write(self, data: bytes) -> int:
        self._buf += data
        while len(self._buf) > SEGMENT:  # keep at least one byte back: the last segment is sealed as last
            self._seal(bytes(self._buf[:SEGMENT]), last=False)
            del self._buf[:SEGMENT]
        return len(data)

    def _seal(self, plain: bytes, *, last: bool) -> None:
        ct = self._aead.encrypt(_nonce(self._prefix, self._counter, last), plain, self._aad)
        self._out.write(struct.pack(">I", len(ct)) + ct)
        self._counter += 1

    def finish(self) -> None:
        self._seal(bytes(self._buf), last=True)
        self._buf.clear()


def parse_header(line: bytes) -> dict[str, Any] | None:
    """The scheme of an encrypted export, or None when the line is not one."""
    try:
        head = json.loads(line)
    except ValueError:
        return None
    if not isinstance(head, dict) or head.get("type") != "encrypted":
        return None
    if head.get("format") != FORMAT or head.get("cipher") != CIPHER or head.get("kdf", {}).get("name") != "scrypt":
        raise UserError("This encrypted file uses a scheme this version of Personal LLM does not know.")
    if int(head.get("version", 0)) > FORMAT_VERSION:
        raise UserError("This export was made by a newer version of Personal LLM; update the app to import it.")
    kdf = head["kdf"]
    if not (2 <= int(kdf["n"]) <= 2**20 and 1 <= int(kdf["r"]) <= 32 and 1 <= int(kdf["p"]) <= 16):
        raise UserError("This encrypted file asks for unreasonable key-derivation settings; refusing it.")
    return head


def decrypt(f: BinaryIO, header_line: bytes, head: dict[str, Any], passphrase: str) -> bytes:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    kdf = head["kdf"]
    try:
        salt = base64.b64decode(kdf["salt"], validate=True)
        prefix = base64.b64decode(head["nonce_prefix"], validate=True)
    except (ValueError, KeyError) as e:
        raise UserError("The encrypted export's header is damaged.") from e
    aead = AESGCM(_derive_key(passphrase, salt, int(kdf["n"]), int(kdf["r"]), int(kdf["p"])))
    max_ct = int(head.get("segment", SEGMENT)) + TAG
    out = bytearray()
    counter = 0
    length = _read_length(f)
    while length is not None:
        if length > max_ct:
            raise UserError("The encrypted export is damaged (a segment is too long).")
        ct = f.read(length)
        if len(ct) != length:
            raise UserError("The encrypted export is truncated; use a complete copy.")
        following = _read_length(f)
        try:
            out += aead.decrypt(_nonce(prefix, counter, following is None), ct, header_line)
        except InvalidTag as e:
            if counter == 0:
                raise WrongPassphrase("That passphrase does not open this export (or the file was altered).") from e
            raise UserError("The encrypted export is damaged or incomplete; nothing was imported.") from e
        counter += 1
        length = following
    if counter == 0:
        raise UserError("The encrypted export is empty or truncated; nothing was imported.")
    return bytes(out)


def _read_length(f: BinaryIO) -> int | None:
    raw = f.read(4)
    if not raw:
        return None
    if len(raw) != 4:
        raise UserError("The encrypted export is truncated; use a complete copy.")
    return int(struct.unpack(">I", raw)[0])


def is_encrypted(path: Path | str) -> bool:
    """True when the file is an encrypted Personal LLM export."""
    with open(path, "rb") as f:
        return parse_header(f.readline(MAX_HEADER_LINE).rstrip(b"\r\n")) is not None
