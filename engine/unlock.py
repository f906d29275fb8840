"""Opening and creating the store: one creator at a time, the key that opens it, and self-repair.

- **Creation is atomic.** Under the profile's creation lock exactly one process writes the key (keychain),
  `profile.json` and the store; every other process waits for the lock and then opens what was made. The
  key is stored before the profile that names it and the profile before the store, so a crash at any point
  leaves nothing that disagrees (a missing store is simply created on the next run, with the same key).
- **A profile that names the wrong key** (made by an older version when two first runs raced) is repaired:
  the keychain's other entries for this app are tried, and the one that opens the store is written into
  `profile.json`, with a notice saying so.
- **An interrupted key rotation** (see `engine.keyops`) is finished or undone on the next open, whichever
  matches the file.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import recovery
from .errors import DiskFull, EngineError, KeyMissing, NotFound, StoreReadOnly, WrongKey
from .keys import (
    SERVICE,
    KeySource,
    Profile,
    _keyring_get,
    _keyring_get_settled,
    _keyring_set,
    _passphrase,
    keychain_accounts,
    keychain_usable,
    pragma_for,
    pragma_for_passphrase,
    read_profile,
    write_profile,
)
from .locking import InUse, creation_lock, precreate, private_dir, secure_profile
from .paths import PROFILE_FILE, STORE_FILE
from .store.sqlite import maintenance
from .store.sqlite.db import Store, read_only_folder
from .store.sqlite.migrations import migrate

log = logging.getLogger(__name__)

PROFILE_VERSION = 2


@dataclass
class Opened:
    store: Store
    profile: Profile
    in_use: InUse
    data_key: bytes | None  # None: a store made before wrapped keys, opened with its passphrase
    created: bool = False
    recovery_key: str | None = None  # set only in the process that created the store: show it once
    notices: list[str] = field(default_factory=list)


def store_exists(path: Path) -> bool:
    return path.exists() and path.stat().st_size > 0


def open_store(home: Path, *, create: bool = True, passphrase: str | None = None,
               interactive: bool = True) -> Opened:
    path = home / STORE_FILE
    if not store_exists(path):
        if not create:
            raise NotFound(f"There is no memory store at {path}.")
        with creation_lock(home):
            if not store_exists(path):
                return _create(home, path, passphrase, interactive)
    private_dir(home)
    in_use = InUse(home)  # waits while a rotation or restore holds the store
    try:
        profile = read_profile(home)
        if profile is None:
            raise KeyMissing(
                f"{home / PROFILE_FILE} is missing, so the key of the store at {path} cannot be found. "
                "Restore the file from a backup; the store was left untouched."
            )
        opened = _open_existing(home, path, profile, in_use, passphrase, interactive)
    except BaseException:
        in_use.release()
        raise
    secure_profile(home)  # 0700 folders and 0600 files, also what older versions left looser
    return opened


# ------------------------------------------------------------------------------------------------------
# creation
# ------------------------------------------------------------------------------------------------------
def _create(home: Path, path: Path, passphrase: str | None, interactive: bool) -> Opened:
    """Called under the creation lock with no store on disk. A profile may exist (a crash between it and
    the store, or a passphrase prompt that was cancelled); its id and key source are kept."""
    old = read_profile(home)
    source: KeySource = old.key_source if old else ("keychain" if keychain_usable() else "passphrase")
    phrase = None
    if source == "passphrase":
        phrase = passphrase or _passphrase(confirm=True, interactive=interactive)  # before anything is written
    store_id = old.store_id if old else uuid.uuid4().hex
    account = f"store-{store_id}"
    dk = None
    if source == "keychain":
        if not keychain_usable():
            raise KeyMissing("This profile keeps its key in the keychain, but no keychain is available now. "
                             "Unlock or start your keychain and try again.")
        existing = _keyring_get(account)
        dk = _parse_hex(existing) if existing else None
        if dk is None:
            dk = recovery.new_data_key()
            _keyring_set(account, dk.hex())  # 1. the key, before the profile that names it
    else:
        dk = recovery.new_data_key()
    rk = recovery.new_recovery_key()
    wraps, sealed = recovery.key_records(dk, store_id, recovery_key=rk, passphrase=phrase)
    profile = write_profile(home, {  # 2. the profile, before the store it describes
        "version": PROFILE_VERSION, "store_id": store_id, "key_source": source, "created_at": time.time(),
        "wraps": wraps, "sealed": sealed,
    })
    precreate(path)  # 3. the store, 0600 (its -wal and -shm inherit the mode)
    in_use = InUse(home)
    try:
        store = Store(path, pragma_for(dk))
        try:
            migrate(store.con)
            maintenance.checkpoint(store.con)  # the file itself now holds the schema
        except BaseException:
            store.close()
            raise
    except BaseException:
        in_use.release()
        raise
    secure_profile(home)  # 0700 folders and 0600 files, also what older versions left looser
    log.info("created a new store (%s key)", source)
    return Opened(store, profile, in_use, dk, created=True, recovery_key=rk)


def _parse_hex(value: str | None) -> bytes | None:
    if value is None or len(value) != 64:
        return None
    try:
        return bytes.fromhex(value)
    except ValueError:
        return None


# ------------------------------------------------------------------------------------------------------
# opening an existing store
# ------------------------------------------------------------------------------------------------------
def candidates(profile: Profile, passphrase: str | None, interactive: bool) -> list[tuple[str, bytes | str]]:
    """The keys to try, in order: ("current" | "next", data key bytes or a legacy passphrase)."""
    raw = profile.raw
    nxt: dict[str, Any] = raw.get("next") or {}
    out: list[tuple[str, bytes | str]] = []
    if profile.key_source == "keychain":
        if not keychain_usable():
            raise KeyMissing(
                "This store's key lives in the keychain, but no keychain is available now. "
                "Unlock or start your keychain (Secret Service, macOS Keychain, Windows Credential Manager) "
                "and try again, or open it with your recovery key (personal-llm unlock --recovery-key …); "
                "the store was left untouched."
            )
        hexkey = _keyring_get_settled(profile.key_account)
        if hexkey is not None:
            dk = _parse_hex(hexkey)
            if dk is None:
                raise KeyMissing("The keychain entry for this store is not a valid key; the store was left "
                                 "untouched.")
            out.append(("current", dk))
        if nxt and out:
            sealed = recovery.unseal(out[0][1], nxt.get("key"), profile.store_id)  # type: ignore[arg-type]
            nk = _parse_hex(sealed.get("dk")) if sealed else None
            if nk is not None:
                out.append(("next", nk))
        if not out:
            raise KeyMissing(
                f"The key for this store is not in the keychain (service '{SERVICE}', account "
                f"'{profile.key_account}'). Open it with your recovery key (personal-llm unlock --recovery-key …), "
                "or restore that keychain entry if you moved the store from another computer or user; "
                "the store was left untouched."
            )
        return out
    phrase = passphrase or _passphrase(confirm=False, interactive=interactive)
    wrapped = (raw.get("wraps") or {}).get("passphrase")
    if wrapped:
        dk = recovery.unwrap(phrase, wrapped, profile.store_id)
        if dk is not None:
            out.append(("current", dk))
    else:
        out.append(("current", phrase))  # a store from before wrapped keys: SQLCipher derives the key
    nwrapped = (nxt.get("wraps") or {}).get("passphrase")
    if nwrapped:
        nk = recovery.unwrap(phrase, nwrapped, profile.store_id)
        if nk is not None:
            out.append(("next", nk))
    if not out:
        raise WrongKey("This passphrase does not open this memory store; nothing was changed. Forgotten it? "
                       "`personal-llm unlock --recovery-key …` opens the store and sets a new one.")
    return out


def pragma_of(key: bytes | str) -> str:
    return pragma_for(key) if isinstance(key, bytes) else pragma_for_passphrase(key)


def _open_existing(home: Path, path: Path, profile: Profile, in_use: InUse, passphrase: str | None,
                   interactive: bool) -> Opened:
    cands = candidates(profile, passphrase, interactive)
    last: WrongKey | None = None
    for label, key in cands:
        try:
            store = _store(path, pragma_of(key))
        except WrongKey as e:
            last = e
            continue
        opened = Opened(store, profile, in_use, key if isinstance(key, bytes) else None)
        if profile.raw.get("next"):
            try:
                settle_rotation(home, opened, label, cands)
            except BaseException:
                store.close()
                raise
        return opened
    if profile.key_source == "keychain":
        repaired = _repair(home, path, profile, in_use)
        if repaired is not None:
            return repaired
    assert last is not None
    raise last


def _store(path: Path, pragma: str) -> Store:
    """The store opened for reading and writing or, when the disk is full or read-only (SQLite can't make
    its -shm there, or can't write at all), opened read-only: the user can still recall and export their
    memory. A wrong key is a wrong key either way."""
    try:
        if (refused := read_only_folder(path)) is not None:  # SQLite may read it as it is; nothing is written
            raise refused
        return Store(path, pragma)
    except (DiskFull, StoreReadOnly) as e:
        reason = e
    try:
        store = Store(path, pragma, read_only=reason)
    except (WrongKey, KeyMissing):
        raise
    except EngineError:
        raise reason from None
    log.info("store opened read-only: %s", type(reason).__name__)
    return store


def settle_rotation(home: Path, opened: Opened, label: str, cands: list[tuple[str, bytes | str]]) -> None:
    """A rotation was interrupted: finish it when the file already has the new key, else forget it."""
    profile = opened.profile
    raw = dict(profile.raw)
    nxt = raw.pop("next")
    # `next.sealed` is sealed under the new key: it unseals exactly when the file already has that key
    finished = label == "next" or (opened.data_key is not None
                                   and recovery.unseal(opened.data_key, nxt.get("sealed"), profile.store_id) is not None)
    if finished:
        raw["wraps"], raw["sealed"] = nxt["wraps"], nxt["sealed"]
        if profile.key_source == "keychain" and opened.data_key is not None:
            _keyring_set(profile.key_account, opened.data_key.hex())
        opened.notices.append("A key rotation that was interrupted has been completed; the store is open.")
    else:
        opened.notices.append("A key rotation that was interrupted before it changed the store was undone; "
                              "run `personal-llm key rotate` again if you want a new key.")
    opened.profile = write_profile(home, raw)
    log.info("interrupted key rotation %s", "finished" if finished else "undone")


def _repair(home: Path, path: Path, profile: Profile, in_use: InUse) -> Opened | None:
    """profile.json names a key that does not open the store: try the app's other keychain entries."""
    with creation_lock(home):
        for account in keychain_accounts():
            if account == profile.key_account:
                continue
            dk = _parse_hex(_keyring_get(account))
            if dk is None:
                continue
            try:
                store = Store(path, pragma_for(dk))
            except WrongKey:
                continue
            store_id = account.removeprefix("store-")
            raw: dict[str, Any] = {"version": PROFILE_VERSION, "store_id": store_id,
                   "key_source": "keychain", "created_at": profile.raw.get("created_at"),
                   "repaired_at": time.time()}
            with contextlib.suppress(Exception):
                keep = recovery.unseal(dk, profile.raw.get("sealed"), store_id)
                if keep:  # only records made for this very key survive
                    raw["wraps"], raw["sealed"] = recovery.key_records(dk, store_id, keep=keep)
            fixed = write_profile(home, raw)
            log.warning("profile.json named a key that does not open the store; repaired from the keychain")
            opened = Opened(store, fixed, in_use, dk)
            opened.notices.append(
                f"profile.json named a key (keychain account '{profile.key_account}') that does not open the "
                f"store; the keychain entry '{account}' does, and profile.json was repaired to name it."
                + ("" if "wraps" in raw else " Run `personal-llm key show-recovery` to make a recovery key.")
            )
            return opened
    return None
