"""Key operations: open with the recovery key on a new machine, change the passphrase, rotate the data key,
show the recovery key. See `engine.recovery` for the design and `engine.unlock` for crash recovery.

Crash safety: every step is either one atomic file replacement (`profile.json`), one keychain write, or
SQLite's own atomic commit (re-keying rewrites every page in one transaction). A rotation records the
new key (`next` in the profile: sealed under the current key, and wrapped by the recovery key and the
passphrase) *before* re-keying the file, so whichever key the file has after a crash, the next open finds
it and finishes or undoes the rotation. The keychain is written once, after the re-key (file-based
keychains such as keyrings.alt's rewrite their whole file non-atomically, so fewer writes mean fewer
windows in which a kill could damage them; the recovery key still opens the store then).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Protocol

from . import recovery
from .audit import AuditLog
from .errors import KeyMissing, UserError, WrongKey
from .keys import (
    Profile,
    _keyring_get,
    _keyring_set,
    keychain_usable,
    own_keychain_id,
    passphrase_problem,
    pragma_for,
    pragma_for_passphrase,
    read_profile,
    write_profile,
)
from .locking import InUse, creation_lock
from .paths import STORE_FILE
from .store.sqlite import maintenance
from .store.sqlite.db import Store, connect
from .unlock import settle_rotation, store_exists


class OpenStore(Protocol):
    """What the key operations need of an open engine (the facade, engine.Engine, is one)."""

    home: Path
    profile: Profile
    store: Store
    audit: AuditLog
    _data_key: bytes | None
    _in_use: InUse | None

    def stop_background(self) -> None: ...

log = logging.getLogger(__name__)


def unlock_with_recovery(home: Path, recovery_key: str, *, new_passphrase: str | None = None) -> str:
    """Open the store with its recovery key and make it open normally again on this machine: a new keychain
    entry, or (no keychain, or `new_passphrase` given) a new passphrase. Returns what was done."""
    rk = recovery.parse_recovery_key(recovery_key)
    if new_passphrase is not None and (problem := passphrase_problem(new_passphrase)):
        raise UserError(problem)
    path = home / STORE_FILE
    if not store_exists(path):
        raise UserError(f"There is no memory store at {path}; copy the folder with memory.db and profile.json "
                        "there (or restore a backup) first.")
    in_use = InUse(home)
    try:
        with creation_lock(home):
            profile = read_profile(home)
            if profile is None:
                raise KeyMissing(f"{home / 'profile.json'} is missing: it holds the wrapped key the recovery key "
                                 "opens. Copy it from the old computer or from a backup folder.")
            found: tuple[str, bytes] | None = None
            for label, rec in (("current", profile.raw.get("wraps")), ("next", (profile.raw.get("next") or {})
                                                                        .get("wraps"))):
                blob = (rec or {}).get("recovery")
                dk = recovery.unwrap(rk, blob, profile.store_id) if blob else None
                if dk is None:
                    continue
                try:
                    Store(path, pragma_for(dk)).close()
                except WrongKey:
                    continue
                found = (label, dk)
                break
            if found is None:
                raise WrongKey("This recovery key does not open the store in this profile; nothing was changed.")
            label, dk = found
            if profile.raw.get("next"):
                from .unlock import Opened

                opened = Opened(Store(path, pragma_for(dk)), profile, in_use, dk)
                settle_rotation(home, opened, label, [("next", dk)] if label == "next" else [])
                opened.store.close()
                profile = opened.profile
            raw = dict(profile.raw)
            keep = recovery.unseal(dk, raw.get("sealed"), profile.store_id) or {}
            use_keychain = new_passphrase is None and keychain_usable()
            if not use_keychain and not new_passphrase:
                raise KeyMissing("No keychain is available here: give a new passphrase for this store "
                                 "(PERSONAL_LLM_PASSPHRASE or --new-passphrase at the prompt).")
            raw["wraps"], raw["sealed"] = recovery.key_records(
                dk, profile.store_id, keep=keep, passphrase=None if use_keychain else new_passphrase)
            if use_keychain:
                held = _keyring_get(profile.key_account)
                if held and held.lower() != dk.hex():
                    # another key under this store's name: the profile this store was copied from (a snapshot
                    # from before a rotation restored into a new profile) still opens with it; keep it
                    raw = own_keychain_id(raw)
                _keyring_set(Profile.of(raw).key_account, dk.hex())
                raw["key_source"] = "keychain"
                done = "The recovery key opened the store; its key is now in this computer's keychain."
            else:
                raw["key_source"] = "passphrase"
                done = "The recovery key opened the store; from now on it opens with the new passphrase."
            raw["recovered_at"] = time.time()
            write_profile(home, raw)
    finally:
        in_use.release()
    log.info("store unlocked with the recovery key")
    return done


def passphrase_opens(eng: OpenStore, phrase: str) -> bool:
    """True when `phrase` is the passphrase of this open store (to re-authenticate before a secret is shown)."""
    wrapped = (eng.profile.raw.get("wraps") or {}).get("passphrase")
    if wrapped:
        return recovery.unwrap(phrase, wrapped, eng.profile.store_id) is not None
    if eng.profile.key_source != "passphrase":
        return False
    try:  # a store whose key is its passphrase
        connect(eng.home / STORE_FILE, pragma_for_passphrase(phrase)).close()
    except WrongKey:
        return False
    return True


def _records(eng: OpenStore) -> dict[str, Any]:
    if eng._data_key is None:
        return {}
    return recovery.unseal(eng._data_key, eng.profile.raw.get("sealed"), eng.profile.store_id) or {}


def show_recovery(eng: OpenStore) -> tuple[str, bool]:
    """The recovery key (the store being open is the authentication), making one if the store has none
    (stores made before recovery keys). Returns (key, newly_made)."""
    if eng._data_key is None:
        raise UserError("This store still uses its passphrase as the key itself; run `personal-llm key rotate` "
                        "once to give it a data key and a recovery key.")
    keep = _records(eng)
    if keep.get("recovery_key"):
        return str(keep["recovery_key"]), False
    rk = recovery.new_recovery_key()
    with creation_lock(eng.home):
        raw = dict(read_profile(eng.home).raw)  # type: ignore[union-attr]
        raw["wraps"], raw["sealed"] = recovery.key_records(eng._data_key, eng.profile.store_id, keep=keep,
                                                           recovery_key=rk)
        eng.profile = write_profile(eng.home, raw)
    eng.audit.record("recovery_key_created", None, {})
    return rk, True


def change_passphrase(eng: OpenStore, new: str) -> str:
    """Set (or change) the passphrase that opens this store. The data key is rewrapped; the file is not
    rewritten. A store whose key *is* its passphrase (made before wrapped keys) is re-keyed once instead."""
    if problem := passphrase_problem(new):
        raise UserError(problem + " Nothing was changed.")
    if eng._data_key is None:
        rotate(eng, passphrase=new)
        return "The store now has a data key wrapped by your new passphrase (it was re-keyed once)."
    keep = _records(eng)
    with creation_lock(eng.home):
        raw = dict(read_profile(eng.home).raw)  # type: ignore[union-attr]
        raw["wraps"], raw["sealed"] = recovery.key_records(eng._data_key, eng.profile.store_id, keep=keep,
                                                           passphrase=new)
        eng.profile = write_profile(eng.home, raw)  # one atomic replace: the old or the new passphrase
    eng.audit.record("passphrase_changed", None, {})
    return "The passphrase was changed; the old one no longer opens the store."


def rotate(eng: OpenStore, *, passphrase: str | None = None) -> str | None:
    """Re-encrypt the store with a new data key (SQLCipher's rekey, store/sqlite/maintenance.py). The recovery key and passphrase stay the
    same (they wrap the new key) unless the store had none. Refuses while another program has the store
    open. Returns a new recovery key when one had to be made, else None."""
    if eng._in_use is None:
        raise UserError("This engine was not opened with Engine.open; it cannot rotate its key.")
    profile = eng.profile
    keep = _records(eng)
    legacy = eng._data_key is None
    if legacy and passphrase is None:
        raise UserError("Give the passphrase to wrap the new key with (this store's key is its passphrase).")
    new_rk = None if keep.get("recovery_key") else recovery.new_recovery_key()
    dk2 = recovery.new_data_key()
    wraps, sealed = recovery.key_records(dk2, profile.store_id, keep=keep, recovery_key=new_rk,
                                         passphrase=passphrase)
    store = eng.store
    with eng._in_use.exclusive("`personal-llm key rotate`"), store.write_lock:
        eng.stop_background()
        raw = dict(profile.raw)
        raw["next"] = {"wraps": wraps, "sealed": sealed, "started_at": time.time()}
        if eng._data_key is not None:  # the new key, sealed under the current one: no keychain write yet
            raw["next"]["key"] = recovery.seal(eng._data_key, {"dk": dk2.hex()}, profile.store_id)
        write_profile(eng.home, raw)                         # 1-2. the profile says a rotation is under way
        store.close()
        con = store.connect()
        try:
            maintenance.rekey(con, dk2)      # 3. one transaction: the old or the new key
            maintenance.checkpoint(con)      # no page under the old key stays in the log
        finally:
            con.close()
        store._key_pragma = pragma_for(dk2)
        if profile.key_source == "keychain":
            _keyring_set(profile.key_account, dk2.hex())    # 4. the keychain names the new key
        raw.pop("next")
        raw["wraps"], raw["sealed"] = wraps, sealed
        if legacy:
            raw["key_source"] = "passphrase"
        eng.profile = write_profile(eng.home, raw)           # 5. done
        eng._data_key = dk2
    eng.audit.record("key_rotated", None, {"new_recovery_key": new_rk is not None})
    log.info("store key rotated")
    return new_rk
