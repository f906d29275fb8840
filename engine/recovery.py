"""Key material: the store's data key, the recovery key and the passphrase that wrap it.

The store is encrypted with a random 32-byte **data key** (SQLCipher raw key). Everyday it comes from the
OS keychain, or from a passphrase typed at start. `profile.json` (not secret, next to the store) holds the
data key *wrapped* (AES-256-GCM) under keys derived (scrypt) from:

- the **recovery key**: 32 random base32 characters shown at first run; it opens the store on any machine
  (`personal-llm unlock --recovery-key …`), which writes a new keychain entry;
- the **passphrase**, when the user chose one: changing it rewraps the data key, the file is not rewritten.

`sealed` holds, encrypted under the data key itself, what later key operations need without asking again:
the recovery key (for `key show-recovery`) and the derived wrapping keys (so `key rotate` can wrap a new
data key for the same recovery key and passphrase). Whoever holds the data key can read the store anyway,
so this gives nothing away. During a rotation `next` holds the same records for the new key until the
file has been re-keyed (see `engine.unlock`).
"""

from __future__ import annotations

import base64
import json
import secrets
from typing import Any

from .errors import UserError

RECOVERY_BYTES = 20  # 160 bits: 32 base32 characters, shown as 8 groups of 4
# scrypt costs: the recovery key is already strong (a light KDF suffices); a passphrase may not be
KDF_RECOVERY = {"n": 2**14, "r": 8, "p": 1}
KDF_PASSPHRASE = {"n": 2**15, "r": 8, "p": 1}


def new_data_key() -> bytes:
    return secrets.token_bytes(32)


def new_recovery_key() -> str:
    raw = base64.b32encode(secrets.token_bytes(RECOVERY_BYTES)).decode("ascii")
    return "-".join(raw[i : i + 4] for i in range(0, len(raw), 4))


def parse_recovery_key(text: str) -> str:
    """Normalise what the user typed (case, spaces, dashes; O/0 and I/1/L confusions) to the canonical form."""
    clean = "".join(ch for ch in text.upper() if ch.isalnum())
    clean = clean.replace("0", "O").replace("1", "I").replace("8", "B")
    try:
        raw = base64.b32decode(clean)
    except (ValueError, TypeError):
        raw = b""
    if len(raw) != RECOVERY_BYTES:
        raise UserError("That is not a recovery key: it has 32 letters and digits (2-7), in groups of four.")
    enc = base64.b32encode(raw).decode("ascii")
    return "-".join(enc[i : i + 4] for i in range(0, len(enc), 4))


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _unb64(s: str) -> bytes:
    return base64.b64decode(s.encode("ascii"))


def derive(secret: str, kdf: dict[str, Any]) -> bytes:
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    return Scrypt(salt=_unb64(kdf["salt"]), length=32, n=kdf["n"], r=kdf["r"], p=kdf["p"]).derive(
        secret.encode("utf-8"))


def new_kdf(kind: str) -> dict[str, Any]:
    base = KDF_RECOVERY if kind == "recovery" else KDF_PASSPHRASE
    return {"salt": _b64(secrets.token_bytes(16)), **base}


def _aad(store_id: str, purpose: str) -> bytes:
    return f"personal-llm:{store_id}:{purpose}".encode()


def wrap(kek: bytes, dk: bytes, store_id: str, kdf: dict[str, Any]) -> dict[str, Any]:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = secrets.token_bytes(12)
    return {"kdf": kdf, "nonce": _b64(nonce), "ct": _b64(AESGCM(kek).encrypt(nonce, dk, _aad(store_id, "wrap")))}


def unwrap(secret: str, blob: dict[str, Any], store_id: str) -> bytes | None:
    """The data key this secret unwraps, or None when it is the wrong secret."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        kek = derive(secret, blob["kdf"])
        return AESGCM(kek).decrypt(_unb64(blob["nonce"]), _unb64(blob["ct"]), _aad(store_id, "wrap"))
    except (InvalidTag, KeyError, ValueError, TypeError):
        return None


def seal(dk: bytes, payload: dict[str, Any], store_id: str) -> dict[str, Any]:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = secrets.token_bytes(12)
    ct = AESGCM(dk).encrypt(nonce, json.dumps(payload).encode(), _aad(store_id, "sealed"))
    return {"nonce": _b64(nonce), "ct": _b64(ct)}


def unseal(dk: bytes, blob: dict[str, Any] | None, store_id: str) -> dict[str, Any] | None:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if not blob:
        return None
    try:
        plain = AESGCM(dk).decrypt(_unb64(blob["nonce"]), _unb64(blob["ct"]), _aad(store_id, "sealed"))
        return dict(json.loads(plain))
    except (InvalidTag, KeyError, ValueError, TypeError):
        return None


def key_records(dk: bytes, store_id: str, *, recovery_key: str | None = None, passphrase: str | None = None,
                keep: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(wraps, sealed) for data key `dk`. `keep` (an unsealed record of the previous key) reuses its recovery
    key and wrapping keys, so a rotation changes neither secret; `passphrase` sets a new passphrase."""
    keep = keep or {}
    keks: dict[str, dict[str, Any]] = dict(keep.get("keks", {}))
    rk = recovery_key or keep.get("recovery_key")
    if recovery_key is not None:
        kdf = new_kdf("recovery")
        keks["recovery"] = {"kdf": kdf, "kek": _b64(derive(recovery_key, kdf))}
    if passphrase is not None:
        kdf = new_kdf("passphrase")
        keks["passphrase"] = {"kdf": kdf, "kek": _b64(derive(passphrase, kdf))}
    wraps = {name: wrap(_unb64(k["kek"]), dk, store_id, k["kdf"]) for name, k in keks.items()}
    sealed = seal(dk, {"recovery_key": rk, "keks": keks}, store_id)
    return wraps, sealed
