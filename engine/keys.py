"""The store's key: a random 32-byte data key in the OS keychain, or unwrapped with a passphrase where no
keychain works (engine/recovery.py wraps it; engine/unlock.py opens and creates the store with it).

The profile file (`profile.json`, not secret) records which of the two opens the store, the store's id
(which names its keychain entry, unless the profile was given entries of its own: `own_keychain_id`) and
the wrapped keys. Nothing here ever writes a key to disk in
plaintext. This is the one module outside the storage seam that builds a `PRAGMA key`.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .errors import KeyMissing, UserError
from .locking import creation_lock
from .paths import PROFILE_FILE, cache_dir, write_atomic

log = logging.getLogger(__name__)

SERVICE = "personal-llm"
PASSPHRASE_ENV = "PERSONAL_LLM_PASSPHRASE"
MIN_PASSPHRASE_CHARS = 8  # a new passphrase (one that opens an existing store is never refused)


def passphrase_problem(phrase: str) -> str:
    """Why `phrase` cannot be a new passphrase, for people; '' when it can."""
    if not phrase:
        return "An empty passphrase cannot protect the store."
    if len(phrase) < MIN_PASSPHRASE_CHARS:
        return (f"A passphrase needs at least {MIN_PASSPHRASE_CHARS} characters (this one has {len(phrase)}); "
                "a few unrelated words are strong and easy to remember.")
    return ""
KeySource = Literal["keychain", "passphrase"]


@dataclass(frozen=True)
class Profile:
    store_id: str
    key_source: KeySource
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)  # wrapped keys, rotation state

    @staticmethod
    def of(raw: dict[str, Any]) -> Profile:
        """What a profile.json with these contents says."""
        return Profile(store_id=str(raw["store_id"]), key_source=raw["key_source"], raw=raw)

    @property
    def keychain_id(self) -> str:
        """What names this profile's keychain entries: the store's id, or the id a copy of the store in
        another profile was given (`own_keychain_id`), so that it never writes over the entries of the
        profile it was copied from."""
        return str(self.raw.get("keychain_id") or self.store_id)

    @property
    def key_account(self) -> str:
        return f"store-{self.keychain_id}"

    @property
    def token_account(self) -> str:
        return f"api-token-{self.keychain_id}"


def own_keychain_id(raw: dict[str, Any]) -> dict[str, Any]:
    """The profile `raw` with keychain entries of its own: a copy of a store (a snapshot restored into
    another profile) has its source's store id, and with it the source's keychain entries; a key written
    there (a recovery, a rotation) would lock the source out of its store."""
    return {**raw, "keychain_id": f"{raw['store_id']}-{secrets.token_hex(4)}"}


# keyring's backend where nothing chooses it ($PYTHON_KEYRING_BACKEND, keyring's own config file): keyring
# imports every backend it knows and asks each whether it works, in every process, ~0.1 s of a short command
# on Linux (its macOS backend looks for its library with ldconfig; the Secret Service's opens D-Bus). The
# backend that search found (the one written to last) is remembered (its class name, in the cache folder)
# and reads load it alone; the search runs again when it no longer loads or lacks an entry asked for, and
# for every write (rare: a new store, a rotation, a new token), so that an entry goes where keyring puts it.
BACKEND_FILE = "keychain-backend"
_BACKEND_PACKAGES = ("keyring.backends.", "keyrings.alt.")
_NOT_REMEMBERED = ("keyring.backends.fail.", "keyring.backends.null.", "keyring.backends.chainer.")
_backend_lock = threading.Lock()
_loaded: Any = None  # the remembered backend, loaded by this process


def _keyring_backend() -> Any:
    """The keyring backend this module reads the profile's entries through."""
    global _loaded
    import keyring
    import keyring.core

    if keyring.core._keyring_backend is not None or _configured():
        return keyring.get_keyring()  # chosen already, or by the user's configuration
    with _backend_lock:
        if _loaded is None and (name := _remembered_backend()):
            try:
                _loaded = keyring.core.load_keyring(name)  # raises when it cannot work here (now)
            except Exception as e:
                log.info("the keychain backend found last does not load: %s", type(e).__name__)
        if _loaded is not None:
            return _loaded
    kr = keyring.get_keyring()  # the search
    _remember_backend(kr)
    return kr


def _configured() -> bool:
    """True when the user's configuration chooses keyring's backend."""
    from keyring.util import platform_

    config = Path(platform_.config_root()) / "keyringrc.cfg"
    return bool(os.environ.get("PYTHON_KEYRING_BACKEND")) or config.exists()


def _remembered_backend() -> str | None:
    try:
        name = (cache_dir() / BACKEND_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeError):
        return None
    ok = name.startswith(_BACKEND_PACKAGES) and not name.startswith(_NOT_REMEMBERED)
    return name if ok and all(part.isidentifier() for part in name.split(".")) else None


def _remember_backend(kr: Any) -> None:
    """Remember the backend keyring's search chose (of a chain, the first: where it writes and reads first)."""
    first = (list(getattr(kr, "backends", None) or []) or [kr])[0]
    name = f"{type(first).__module__}.{type(first).__qualname__}"
    try:
        if (not name.startswith(_BACKEND_PACKAGES) or name.startswith(_NOT_REMEMBERED)
                or getattr(first, "priority", 0) <= 0 or _remembered_backend() == name):
            return
        write_atomic(cache_dir() / BACKEND_FILE, name + "\n")
    except Exception as e:  # a cache: never worth failing a command
        log.info("the keychain backend was not remembered: %s", type(e).__name__)


def keychain_usable() -> bool:
    """True when keyring has a real backend (not the 'fail' or a null one)."""
    try:
        from keyring.backends import fail

        kr = _keyring_backend()
        if isinstance(kr, fail.Keyring) or getattr(kr, "priority", 1) <= 0:
            return False
        kr.get_password(SERVICE, "probe")
        return True
    except Exception as e:  # keyring raises many kinds (dbus, locked, missing backend)
        log.info("keychain unusable: %s", type(e).__name__)
        return False


SECURE_KEYCHAINS = {
    "keyring.backends.macOS": "the macOS Keychain",
    "keyring.backends.Windows": "Windows Credential Manager",
    "keyring.backends.SecretService": "the Secret Service keyring (GNOME Keyring or KWallet)",
    "keyring.backends.libsecret": "the Secret Service keyring (libsecret)",
    "keyring.backends.kwallet": "KWallet",
}


def keychain_backend() -> tuple[str, bool]:
    """Which keyring backend holds keys, for people, and whether it is a real system keychain (False for
    keyrings.alt's files, which keep the key in a file beside your data — plaintext or weakly protected)."""
    try:
        import keyring

        kr = keyring.get_keyring()
    except Exception as e:  # a broken keyring setup: say so rather than fail
        return f"no usable keyring ({type(e).__name__})", False
    backends = list(getattr(kr, "backends", None) or [kr])  # a chainer: the first backend it writes to
    first = backends[0] if backends else kr
    module, name = type(first).__module__, type(first).__name__
    for prefix, label in SECURE_KEYCHAINS.items():
        if module.startswith(prefix):
            return label, True
    where = getattr(first, "file_path", None)
    if module.startswith("keyrings.alt.file") and name == "PlaintextKeyring":
        return f"a plaintext file ({where})" if where else "a plaintext file (keyrings.alt)", False
    if module.startswith("keyrings.alt"):
        return f"a file kept by keyrings.alt ({where or name})", False
    return f"{name} ({module})", False


def _keyring_get(account: str) -> str | None:
    import keyring

    try:
        kr = _keyring_backend()
        value = kr.get_password(SERVICE, account)
        if value is None and kr is _loaded:  # keyring's search may find it in a backend it also looks in
            value = keyring.get_password(SERVICE, account)
        return value
    except Exception as e:
        raise KeyMissing(
            f"The keychain could not be read ({type(e).__name__}). Unlock it and try again; "
            "the store was left untouched."
        ) from e


KEYCHAIN_SETTLE_SECONDS = 1.0  # how long an entry that should be there may read as missing


def _keyring_get_settled(account: str) -> str | None:
    """The entry, read again for up to KEYCHAIN_SETTLE_SECONDS while it reads as missing: a keychain kept in
    a file (keyrings.alt, common on Linux without a desktop keyring) is rewritten whole by each write, and a
    program reading it while another writes an entry (the app storing its API token as it starts) can see it
    empty for a moment."""
    value = _keyring_get(account)
    deadline = time.monotonic() + KEYCHAIN_SETTLE_SECONDS
    while value is None and time.monotonic() < deadline:
        time.sleep(0.05)
        value = _keyring_get(account)
    return value


def _keyring_set(account: str, value: str) -> None:
    import keyring

    try:
        keyring.set_password(SERVICE, account, value)  # where keyring's own choice puts it
    except Exception as e:
        raise UserError(f"The keychain refused to store the key ({type(e).__name__}).") from e
    if not _configured():
        _remember_backend(keyring.get_keyring())  # later reads look there first


def read_profile(home: Path) -> Profile | None:
    path = home / PROFILE_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Profile.of(data)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"{path} is damaged; it names the key of this store, so restore it from a backup.") from e


def write_profile(home: Path, raw: dict[str, Any]) -> Profile:
    """Replace profile.json atomically (0600) and return what it now says."""
    write_atomic(home / PROFILE_FILE, json.dumps(raw, indent=2))
    return Profile.of(raw)


def keychain_accounts() -> list[str]:
    """The store-key accounts the keychain holds for this app, where the backend can list them (the file
    keychains of keyrings.alt and the Secret Service); [] elsewhere."""
    import configparser

    import keyring

    found: list[str] = []
    try:
        kr = keyring.get_keyring()
        for backend in getattr(kr, "backends", None) or [kr]:
            path = getattr(backend, "file_path", None)
            if isinstance(path, str) and os.path.exists(path):
                from keyrings.alt.escape import escape, unescape

                cfg = configparser.RawConfigParser()
                cfg.read(path, encoding="utf-8")
                if cfg.has_section(escape(SERVICE)):
                    found += [unescape(o) for o in cfg.options(escape(SERVICE))]
            elif hasattr(backend, "get_preferred_collection"):
                coll = backend.get_preferred_collection()
                found += [i.get_attributes().get("username", "") for i in coll.search_items({"service": SERVICE})]
    except Exception as e:
        log.info("keychain entries could not be listed: %s", type(e).__name__)
    return sorted({a for a in found if a.startswith("store-") and not a.endswith(".next")})


def _passphrase(confirm: bool, interactive: bool = True) -> str:
    env = os.environ.get(PASSPHRASE_ENV)
    if env:
        return env
    if not interactive or not sys.stdin or not sys.stdin.isatty():
        raise KeyMissing(
            "No keychain is available and no passphrase was given. Set PERSONAL_LLM_PASSPHRASE or run "
            "this command in a terminal to type it."
        )
    first = getpass.getpass("Passphrase for your memory store: ")
    if confirm and getpass.getpass("Repeat the passphrase: ") != first:
        raise UserError("The two passphrases differ; nothing was created.")
    if confirm and (problem := passphrase_problem(first)):
        raise UserError(problem + " Nothing was created.")
    if not first:
        raise UserError("An empty passphrase cannot protect the store.")
    return first


def pragma_for(dk: bytes) -> str:
    """The `PRAGMA key` statement for a raw data key (never logged)."""
    return f"PRAGMA key = \"x'{dk.hex()}'\""


def pragma_for_passphrase(phrase: str) -> str:
    """The `PRAGMA key` of a store made before wrapped data keys: SQLCipher derives the key from the passphrase."""
    return "PRAGMA key = '" + phrase.replace("'", "''") + "'"


def keychain_token(profile: Profile, home: Path, *, create: bool = True) -> str | None:
    """The HTTP API's bearer token from the keychain, beside the key (created on first use unless `create`
    is False: a client of the running server only reads it).

    None when the store is passphrase-protected: the engine then keeps the token inside the
    encrypted store itself. A missing token is made under the profile's creation lock and looked for
    again inside it: two programs starting at once (the app and the API server) otherwise each
    made one, and the one whose token was overwritten refused every client of the other.
    """
    if profile.key_source != "keychain" or not keychain_usable():
        return None
    tok = _keyring_get(profile.token_account)
    if tok is not None or not create:
        return tok
    with creation_lock(home):  # whoever makes it holds the lock: a second look inside it is enough
        tok = _keyring_get(profile.token_account)
        if tok is None:
            tok = secrets.token_urlsafe(32)
            _keyring_set(profile.token_account, tok)
    return tok
