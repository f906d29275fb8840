"""`personal-llm self-test` / `personal-llm-desktop --self-test`: prove an installation works, end to end.

Runs against a throw-away store in a temporary profile directory, never the user's own:

- SQLCipher opens a new encrypted store and the migrations run;
- the sqlite-vec extension loads (`vec_version()`);
- two facts are remembered and found again by their words, with embeddings off;
- the bundled embedding model loads offline and a paraphrase (no word in common) finds the right fact;
- the store's files on disk contain none of the remembered text.

The key of the temporary store lives in the keychain when one works (under a fresh, random account of
service `personal-llm`, deleted afterwards), else behind a random passphrase. The user's own keychain
entries and store are never read or written. One line per check is printed; the exit status is 0 only
when every check passed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import secrets
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

# Two facts with no word in common with each other, and a paraphrase that shares no word with either.
FACT_CITY = "My sister Alice lives in Lisbon near the river."
FACT_TAX = "The quarterly tax return is due on the fifteenth of April."
LEXICAL_QUERY = "Lisbon"
PARAPHRASE_QUERY = "Which city is my sibling based in?"
SECRET_WORDS = ("Lisbon", "Alice", "quarterly tax return", "fifteenth of April")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    seconds: float


class _Failed(Exception):
    """A check's own verdict (as opposed to a crash): the message is the detail line."""


@contextlib.contextmanager
def _env(**values: str | None) -> Iterator[None]:
    """Set (or unset, for None) environment variables for the duration, then restore them."""
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class SelfTest:
    def __init__(self, *, semantic: bool = True, use_keychain: bool = True, out: TextIO | None = None,
                 verbose: bool = True):
        self.semantic = semantic
        self.use_keychain = use_keychain
        self.out = out
        self.verbose = verbose
        self.checks: list[Check] = []
        self.home: Path | None = None
        self.profile = None
        self.ids: dict[str, str] = {}

    # --- reporting ------------------------------------------------------------------------------------
    def _say(self, line: str) -> None:
        if self.out is None or not self.verbose:
            return
        try:
            self.out.write(line + "\n")
            self.out.flush()
        except (OSError, ValueError):  # a GUI process may have no usable stdout
            pass

    def check(self, name: str, fn: Callable[[], str]) -> bool:
        t0 = time.perf_counter()
        try:
            detail, ok = fn(), True
        except _Failed as e:
            detail, ok = str(e), False
        except Exception as e:  # a crash is a failed check with its reason, never a traceback dump
            tb = traceback.extract_tb(e.__traceback__)
            where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
            cause = e.__cause__ or e.__context__
            why = f"; caused by {type(cause).__name__}: {cause}" if cause is not None else ""
            detail, ok = f"{type(e).__name__}: {e}{where}{why}", False
        c = Check(name, ok, detail, round(time.perf_counter() - t0, 3))
        self.checks.append(c)
        self._say(f"{'PASS' if ok else 'FAIL'}  {name:<16} {detail} ({c.seconds:.2f}s)")
        return ok

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    # --- the checks -----------------------------------------------------------------------------------
    def run(self) -> bool:
        tmp = Path(tempfile.mkdtemp(prefix="personal-llm-selftest-"))
        self.home = tmp / "profile"
        passphrase = secrets.token_urlsafe(24)
        try:
            # The temporary profile owns every path the engine derives (store, settings, logs).
            with _env(PERSONAL_LLM_HOME=str(self.home), PERSONAL_LLM_PASSPHRASE=passphrase):
                self.check("runtime", self._runtime)
                if self.check("store", self._store):
                    self.check("sqlite-vec", self._sqlite_vec)
                    self.check("lexical recall", self._lexical)
                    if self.semantic:
                        self.check("semantic recall", self._semantic)
                    self.check("encrypted", self._encrypted)
        finally:
            self.check("cleanup", lambda: self._cleanup(tmp))
        return self.ok

    def _runtime(self) -> str:
        from .version import __version__

        frozen = "bundled" if getattr(sys, "frozen", False) else "python"
        return (f"personal-llm {__version__}, Python {platform.python_version()} ({frozen}), "
                f"{platform.system()} {platform.machine()}")

    def _engine(self, *, lexical: bool):
        from .embeddings import NoEmbedder
        from .engine import Engine

        return Engine.open(self.home, actor="engine", embedder=NoEmbedder() if lexical else None)

    def _store(self) -> str:
        from .keys import keychain_usable

        assert self.home is not None
        self.home.mkdir(parents=True)
        if not (self.use_keychain and keychain_usable()):
            # Decide for the engine: a profile that says "passphrase" makes it read PERSONAL_LLM_PASSPHRASE.
            (self.home / "profile.json").write_text(json.dumps(
                {"store_id": secrets.token_hex(16), "key_source": "passphrase", "created_at": time.time()}
            ), encoding="utf-8")
        with self._engine(lexical=True) as eng:
            self.profile = eng.profile
            d = eng.diagnostics()
            if not d.cipher_version:
                raise _Failed("the store is not opened by SQLCipher (no cipher_version)")
            if d.schema_version != d.expected_schema_version:
                raise _Failed(f"schema version {d.schema_version}, expected {d.expected_schema_version}")
        where = "keychain (temporary entry)" if eng.key_source == "keychain" else "random passphrase"
        return f"SQLCipher {d.cipher_version}, schema v{d.schema_version}, key in {where}"

    def _sqlite_vec(self) -> str:
        import sqlite_vec

        with self._engine(lexical=True) as eng:
            d = eng.diagnostics()
        if not d.vec_length_ok:
            raise _Failed("vec_length of a 3-dimensional vector is not 3")
        return f"vec_version() = {d.vec_version} (from {Path(sqlite_vec.loadable_path()).name})"

    def _lexical(self) -> str:
        with self._engine(lexical=True) as eng:
            for key, text in (("city", FACT_CITY), ("tax", FACT_TAX)):
                r = eng.remember(text, kind="fact")
                self.ids[key] = r.id
            hits = eng.recall(LEXICAL_QUERY, k=5, record_access=False)
            if not hits or hits[0].id != self.ids["city"]:
                raise _Failed(f"'{LEXICAL_QUERY}' found {[h.id for h in hits]}, expected {self.ids['city']} first")
            tax = eng.recall("tax return", k=5, record_access=False)
            if not tax or tax[0].id != self.ids["tax"]:
                raise _Failed(f"'tax return' found {[h.id for h in tax]}, expected {self.ids['tax']} first")
            para = eng.recall(PARAPHRASE_QUERY, k=5, record_access=False)
            if para:
                raise _Failed(f"the paraphrase shares words with a fact ({[h.id for h in para]}): test is unsound")
        return "2 facts remembered; found by their words (embeddings off)"

    def _semantic(self) -> str:
        from .embeddings import DEFAULT_MODEL

        with self._engine(lexical=False) as eng:
            t0 = time.perf_counter()
            eng.load_embeddings()
            load = time.perf_counter() - t0
            embedded = eng.embed_pending()
            hits = eng.recall(PARAPHRASE_QUERY, k=2, record_access=False)
        if embedded != 2:
            raise _Failed(f"embedded {embedded} memories, expected 2")
        if not hits or hits[0].id != self.ids["city"]:
            raise _Failed(f"'{PARAPHRASE_QUERY}' found {[h.id for h in hits]}, expected {self.ids['city']} first")
        top = hits[0]
        if "vector" not in top.via or top.cosine is None:
            raise _Failed(f"the top hit did not come from the vector index (via {top.via})")
        other = next((h.cosine for h in hits[1:] if h.cosine is not None), None)
        versus = f" vs {other:.2f}" if other is not None else ""
        return f"{DEFAULT_MODEL} loaded offline in {load:.1f}s; paraphrase found the fact (cosine {top.cosine:.2f}{versus})"

    def _encrypted(self) -> str:
        assert self.home is not None
        files = [p for p in self.home.rglob("*") if p.is_file()]
        store = self.home / "memory.db"
        if not store.is_file():
            raise _Failed("no store file was written")
        if store.read_bytes()[:16] == b"SQLite format 3\x00":
            raise _Failed("memory.db has a plain SQLite header")
        leaks = []
        for p in files:
            data = p.read_bytes()
            leaks += [f"{p.name}: {w!r}" for w in SECRET_WORDS if w.encode() in data]
        if leaks:
            raise _Failed("plaintext found: " + ", ".join(leaks))
        size = sum(p.stat().st_size for p in files)
        return f"no remembered text in {len(files)} files of the profile ({size // 1024} KiB)"

    def _cleanup(self, tmp: Path) -> str:
        removed: list[str] = []
        if self.profile is not None and self.profile.key_source == "keychain":
            import keyring
            from keyring.errors import PasswordDeleteError

            from .keys import SERVICE

            for account in (self.profile.key_account, self.profile.token_account):
                with contextlib.suppress(PasswordDeleteError):
                    keyring.delete_password(SERVICE, account)
                    removed.append(account)
                if keyring.get_password(SERVICE, account) is not None:
                    raise _Failed(f"the temporary keychain entry {account} could not be deleted")
        shutil.rmtree(tmp, ignore_errors=True)
        if tmp.exists():
            raise _Failed(f"could not remove {tmp}")
        return "temporary profile removed" + (f", keychain entry {', '.join(removed)} deleted" if removed else "")

    def summary(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [asdict(c) for c in self.checks]}


def run(*, semantic: bool = True, use_keychain: bool = True, json_out: bool = False,
        out: TextIO | None = None) -> int:
    """Run every check; 0 when all passed, 1 otherwise."""
    out = out if out is not None else sys.stdout  # None in a Windows GUI process: report nothing, still exit
    t = SelfTest(semantic=semantic, use_keychain=use_keychain, out=out, verbose=not json_out)
    t._say("Personal LLM self-test")
    t.run()
    if json_out:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            out.write(json.dumps(t.summary(), indent=2) + "\n")  # type: ignore[union-attr]
    else:
        passed = sum(c.ok for c in t.checks)
        t._say(f"{'OK' if t.ok else 'FAILED'}: {passed}/{len(t.checks)} checks passed")
    return 0 if t.ok else 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The self-test's options (shared by `personal-llm self-test` and `python -m engine.selftest`)."""
    p.add_argument("--lexical-only", action="store_true", help="skip the embedding model (faster)")
    p.add_argument("--no-keychain", action="store_true",
                   help="protect the temporary store with a random passphrase even when a keychain works")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")


def main(argv: list[str] | None = None) -> int:
    """Entry point for `personal-llm-desktop --self-test` and `python -m engine.selftest` (argv: options)."""
    p = argparse.ArgumentParser(prog="personal-llm self-test", description=__doc__.splitlines()[0])
    add_arguments(p)
    a = p.parse_args([] if argv is None else argv)
    return run(semantic=not a.lexical_only, use_keychain=not a.no_keychain, json_out=a.json)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
