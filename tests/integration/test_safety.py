"""The store survives the machine and forgets for real: first-run races, private files, repair of a
bricked profile, erasure checked by decrypting every page, recovery on a new machine, key changes killed
at random points."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import keyring
import pytest

from engine import Engine
from engine.embeddings import NoEmbedder
from engine.errors import WrongKey
from engine.keys import SERVICE, read_profile
from tests.forensics import everything, find
from tests.integration.test_cli import CLI, run

RECOVERY_RE = re.compile(r"\b[A-Z2-7]{4}(?:-[A-Z2-7]{4}){7}\b")
SDK_WRITER = (
    "import sys\nfrom engine import Engine\n"
    "with Engine.open(actor='sdk') as e:\n"
    "    print(e.remember(sys.argv[1]).id, flush=True)\n"
)


def lexical_profile(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(json.dumps({"embedding_model": "none"}))


def data_key(home: Path) -> bytes:
    profile = read_profile(home)
    assert profile is not None
    return bytes.fromhex(keyring.get_password(SERVICE, profile.key_account))


def test_eight_first_runs_at_once_make_one_store_holding_every_write(profile_home: Path):
    lexical_profile(profile_home)
    procs = []
    for n in range(8):
        text = f"first-run note {n} from {'cli' if n % 2 else 'sdk'}"
        cmd = [CLI, "remember", text, "--json"] if n % 2 else [sys.executable, "-c", SDK_WRITER, text]
        procs.append((text, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    acked, errs = {}, []
    for text, p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        acked[text] = json.loads(out)["id"] if out.startswith("{") else out.strip()
        errs.append(err)
    assert len(set(acked.values())) == 8
    # one store, one key: the keychain holds exactly one store key, the one profile.json names
    from engine.keys import keychain_accounts

    assert keychain_accounts() == [read_profile(profile_home).key_account]
    assert sorted(p.name for p in profile_home.glob("memory.db*")) in (["memory.db"], ["memory.db", "memory.db-wal",
                                                                                     "memory.db-shm"])
    # every process can open it afterwards, and every acknowledged write is in it
    for text, mid in acked.items():
        p = run("get", mid, "--json")
        assert p.returncode == 0 and json.loads(p.stdout)["text"] == text, p.stderr
    check = subprocess.run([sys.executable, "-c", "from engine import Engine\nwith Engine.open() as e: "
                            "print(e.stats().memories)"], capture_output=True, text=True, timeout=120)
    assert check.stdout.strip() == "8", check.stderr
    # the recovery key was shown at most once (the SDK never prints it), to the process that made the store
    assert sum(len(RECOVERY_RE.findall(e)) for e in errs) <= 1


TOKEN_READER = (
    "import sys, time\nfrom engine import Engine\n"
    "with Engine.open(actor='sdk') as e:\n"
    "    time.sleep(max(0.0, float(sys.argv[1]) - time.time()))  # all of them at once\n"
    "    print(e.api_token(), flush=True)\n"
)


def test_programs_starting_at_once_all_get_the_one_api_token(profile_home: Path):
    """The app, the API server and the CLI may each ask for the token first; they must agree on it (a
    server holding one token refuses every client reading another)."""
    lexical_profile(profile_home)
    with Engine.open(profile_home, embedder=NoEmbedder()):
        pass
    at = time.time() + 4.0  # after every process has opened the store
    procs = [subprocess.Popen([sys.executable, "-c", TOKEN_READER, str(at)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(6)]
    tokens = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        tokens.append(out.strip())
    assert all(tokens) and len(set(tokens)) == 1, tokens
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        assert eng.api_token() == tokens[0]


def test_every_file_the_store_makes_is_private(profile_home: Path, embedder, tmp_path: Path):
    doc = tmp_path / "notes.md"
    doc.write_text("# Notes\n\nThe boiler was serviced in March.\n")
    with Engine.open(profile_home, embedder=embedder) as eng:
        eng.remember("The spare key is under the blue pot.")
        eng.ingest([doc])
        eng.apply_settings(eng.settings.model_copy(update={"hotkey": "Ctrl+Alt+M"}))
        seen_open = {p.name for p in profile_home.rglob("*")}
        modes_open = {p.name: stat.S_IMODE(p.stat().st_mode) for p in profile_home.rglob("*")}
    assert {"memory.db", "memory.db-wal", "memory.db-shm", "profile.json", "settings.json"} <= seen_open
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in profile_home.rglob("*")}
    for name, mode in {**modes_open, **modes}.items():
        path = next(profile_home.rglob(name), profile_home / name)
        want = 0o700 if path.is_dir() else 0o600
        assert mode == want, f"{name}: {oct(mode)}"
    assert stat.S_IMODE(profile_home.stat().st_mode) == 0o700


def test_an_old_store_made_world_readable_is_made_private_on_open(profile_home: Path):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        eng.remember("x")
    os.chmod(profile_home / "memory.db", 0o644)
    os.chmod(profile_home, 0o755)
    with Engine.open(profile_home, embedder=NoEmbedder()):
        assert stat.S_IMODE((profile_home / "memory.db").stat().st_mode) == 0o600
        assert stat.S_IMODE((profile_home / "memory.db-wal").stat().st_mode) == 0o600
    assert stat.S_IMODE(profile_home.stat().st_mode) == 0o700


def _loose(home: Path) -> list[str]:
    """Everything in the profile that is not the owner's alone (a folder not 0700, a file not 0600)."""
    return [f"{p.relative_to(home)} {oct(stat.S_IMODE(p.stat().st_mode))}" for p in [home, *home.rglob("*")]
            if stat.S_IMODE(p.stat().st_mode) != (0o700 if p.is_dir() else 0o600)]


def test_the_cli_makes_logs_and_cache_private_and_tightens_them_when_loose(profile_home: Path):
    """With the usual umask (022), the CLI's log folder and log, the embedding runtime's cache and the settings
    are made 0700/0600; and an older profile whose folders are 0755 and files 0644 is tightened on open."""
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300,
                              preexec_fn=lambda: os.umask(0o022))

    assert cli("remember", "The spare key is under the blue pot.").returncode == 0  # loads the model: cache/
    assert cli("config", "set", "ocr.enabled", "false").returncode == 0  # settings.json
    assert {"logs", "cache"} <= {p.name for p in profile_home.iterdir()}
    assert (profile_home / "logs" / "cli.log").stat().st_size > 0
    assert _loose(profile_home) == []

    for p in [profile_home, *profile_home.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    (profile_home / "logs" / "cli.log.1").write_text("an older log\n")  # a rotated log made by an old version
    os.chmod(profile_home / "logs" / "cli.log.1", 0o644)
    p = cli("stats")
    assert p.returncode == 0, p.stderr
    assert _loose(profile_home) == []


def test_a_profile_naming_another_key_is_repaired_from_the_keychain(profile_home: Path):
    """What the old first-run race left: the store under one key, profile.json naming another."""
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        mid = eng.remember("Written by the process that made the store.").id
    good = read_profile(profile_home)
    keyring.set_password(SERVICE, "store-" + "b" * 32, "cd" * 32)  # the loser's key
    keyring.set_password(SERVICE, "store-" + "c" * 32, "ef" * 32)
    (profile_home / "profile.json").write_text(json.dumps({"store_id": "b" * 32, "key_source": "keychain"}))
    p = run("get", mid, "--json")
    assert p.returncode == 0, p.stderr
    assert "profile.json was repaired" in p.stderr and good.key_account in p.stderr
    assert read_profile(profile_home).store_id == good.store_id
    assert run("stats").stderr == ""  # repaired once, silent afterwards
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        assert "key_notice" in [a.action for a in eng.audit_log()]


def test_forget_leaves_no_forgotten_word_in_any_page_or_wal_frame(profile_home: Path, embedder):
    secret_words = [b"zanzibarquux", b"Marmaduke", b"plutonium"]
    with Engine.open(profile_home, embedder=embedder) as eng:
        for i in range(20):
            eng.remember(f"Ordinary note {i}: the tomatoes in bed {i} need water every {i % 3 + 1} days.")
        mem = eng.remember("The secret phrase is zanzibarquux, known to Marmaduke.", embed="sync")
        doc = eng.ingest_text("Marmaduke keeps the plutonium ledger in the attic.\n" * 30, "ledger")
        eng.embed_pending()
        rid = eng.con.execute("SELECT id FROM memories WHERE uid = ?", (mem.id,)).fetchone()[0]
        vec = eng.con.execute("SELECT embedding FROM vec_memories WHERE rowid = ?", (rid,)).fetchone()[0]
        key = data_key(profile_home)
        db = profile_home / "memory.db"
        assert find(db, key, b"zanzibarquux")  # the check can see it before the forget
        eng.forget(mem.id)
        assert doc.document_id
        eng.forget(doc.document_id)
        for i in range(5):
            eng.remember(f"Later note {i} about bicycles.")
        pages = everything(db, key)
        assert len(pages) > 50 and any(b"CREATE TABLE" in p for _, _, p in pages)  # the key decrypts
        assert any(b"tomatoes" in p for _, _, p in pages) and any(b"bicycles" in p for _, _, p in pages)
        for word in secret_words:
            assert find(db, key, word) == [], word
        assert find(db, key, vec[:64]) == []  # the vector's bytes are gone too
        assert eng.recall("zanzibarquux") == []
        before = db.stat().st_size
        sizes = eng.compact()
        # the size before counts the pages the log still held (copied into the file first)
        assert sizes["bytes_before"] >= before and sizes["bytes_after"] <= sizes["bytes_before"]
    for word in secret_words:
        assert find(db, key, word) == [], word


def test_recovery_key_opens_the_store_on_a_new_machine(profile_home: Path, tmp_path: Path):
    lexical_profile(profile_home)
    first = run("remember", "My locker code is 4711.", "--json")
    assert first.returncode == 0, first.stderr
    keys = RECOVERY_RE.findall(first.stderr)
    assert len(keys) == 1, first.stderr
    assert not RECOVERY_RE.search(run("remember", "Second note.").stderr)  # shown once, unasked
    mids = [json.loads(first.stdout)["id"]]
    # a new machine: a copy of the profile folder, an empty keychain
    new_home, new_keys = tmp_path / "new-machine", tmp_path / "new-keychain"
    shutil.copytree(profile_home, new_home)
    env = {"PERSONAL_LLM_HOME": str(new_home), "XDG_DATA_HOME": str(new_keys)}
    p = run("stats", env=env)
    assert p.returncode == 1 and "recovery key" in p.stderr and "Traceback" not in p.stderr
    bad = run("unlock", "--recovery-key", "AAAA-" * 7 + "AAAA", env=env)
    assert bad.returncode == 1 and "does not open" in bad.stderr
    p = run("unlock", "--recovery-key", keys[0].lower().replace("-", " "), env=env)
    assert p.returncode == 0, p.stderr
    got = run("get", mids[0], "--json", env=env)
    assert got.returncode == 0 and json.loads(got.stdout)["text"] == "My locker code is 4711.", got.stderr
    assert json.loads(run("stats", "--json", env=env).stdout)["memories"] == 2
    # the recovery key can be shown again, by someone who can open the store
    shown = run("key", "show-recovery", env=env)
    assert shown.returncode == 0 and RECOVERY_RE.findall(shown.stderr) == keys
    # a machine without a keychain: the recovery key, then a passphrase of the user's choosing
    third = tmp_path / "no-keychain"
    shutil.copytree(profile_home, third)
    env3 = {"PERSONAL_LLM_HOME": str(third), "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
            "PERSONAL_LLM_NEW_PASSPHRASE": "tulip garage seventeen"}
    assert run("unlock", "--recovery-key", keys[0], env=env3).returncode == 0
    env3["PERSONAL_LLM_PASSPHRASE"] = "tulip garage seventeen"
    got = run("get", mids[0], "--json", env=env3)
    assert got.returncode == 0 and "4711" in got.stdout, got.stderr
    env3["PERSONAL_LLM_PASSPHRASE"] = "wrong"
    assert run("stats", env=env3).returncode == 1


def test_change_passphrase_rewraps_and_the_old_one_stops_working(profile_home: Path, monkeypatch):
    import keyring.core

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    keyring.core._keyring_backend = None
    monkeypatch.setenv("PERSONAL_LLM_PASSPHRASE", "old phrase")
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        mid = eng.remember("Kept across passphrase changes.").id
        key_before = eng._data_key
    p = run("key", "change-passphrase", env={"PERSONAL_LLM_NEW_PASSPHRASE": "new phrase",
                                              "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"})
    assert p.returncode == 0, p.stderr
    with pytest.raises(WrongKey):
        Engine.open(profile_home, embedder=NoEmbedder())
    with Engine.open(profile_home, embedder=NoEmbedder(), passphrase="new phrase") as eng:
        assert eng.get(mid).text == "Kept across passphrase changes."
        assert eng._data_key == key_before  # rewrapped, not re-encrypted


def test_a_store_keyed_by_its_passphrase_is_migrated_by_rotate(profile_home: Path, monkeypatch):
    """Stores made before wrapped keys used the passphrase itself as SQLCipher's key."""
    import keyring.core
    import sqlcipher3

    from engine.store.sqlite.migrations import migrate

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    keyring.core._keyring_backend = None
    profile_home.mkdir(parents=True)
    con = sqlcipher3.connect(str(profile_home / "memory.db"), isolation_level=None)
    con.execute("PRAGMA key = 'legacy phrase'")
    migrate(con)
    con.close()
    (profile_home / "profile.json").write_text(json.dumps({"store_id": "d" * 32, "key_source": "passphrase"}))
    with Engine.open(profile_home, embedder=NoEmbedder(), passphrase="legacy phrase") as eng:
        mid = eng.remember("From the old days.").id
        from engine import keyops

        assert keyops.rotate(eng, passphrase="legacy phrase")  # it had no recovery key: one is made
        assert eng.get(mid).text == "From the old days."
    with Engine.open(profile_home, embedder=NoEmbedder(), passphrase="legacy phrase") as eng:
        assert eng._data_key is not None and eng.get(mid).text == "From the old days."


ROTATOR = """
import sys
from engine import Engine, keyops
from engine.embeddings import NoEmbedder
eng = Engine.open(embedder=NoEmbedder())
print("ready", flush=True)
sys.stdin.readline()
keyops.{op}
print("done", flush=True)
eng.close()
"""


def _kill_trials(profile_home: Path, op: str, trials: int, env: dict[str, str], check,
                 within: float = 0.25) -> dict[str, int]:
    outcomes = {"killed": 0, "finished": 0}
    for _ in range(trials):
        p = subprocess.Popen([sys.executable, "-c", ROTATOR.format(op=op)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        p.stdin.write("go\n")
        p.stdin.flush()
        time.sleep(random.uniform(0, within))
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate()
        outcomes["finished" if "done" in out else "killed"] += 1
        check()
    return outcomes


def test_rotation_killed_at_random_points_leaves_a_store_that_opens(profile_home: Path, tmp_path: Path):
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        for i in range(400):
            eng.remember(f"Memory {i}: " + "filler words to give the file some pages " * 20)
        rk, _ = __import__("engine.keyops", fromlist=["x"]).show_recovery(eng)
    keys_seen = set()
    keychain_damaged = 0

    def check() -> None:
        nonlocal keychain_damaged
        from engine.errors import KeyMissing
        from engine.keyops import unlock_with_recovery

        try:
            e = Engine.open(profile_home, embedder=NoEmbedder())  # the old or the new key, found by itself
        except KeyMissing:
            # keyrings.alt's file keychain rewrites its whole file non-atomically: a kill inside that write
            # empties it. The recovery key then opens the store, whichever key the file has.
            keychain_damaged += 1
            unlock_with_recovery(profile_home, rk)
            e = Engine.open(profile_home, embedder=NoEmbedder())
        with e:
            assert e.stats().memories == 400
            assert e.con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            keys_seen.add(e._data_key)

    # the kill window follows this machine's speed: kills fall within 1.5 times the time a rotation takes
    # (the quickest of three, timed from "go" to "done"), so most land inside one, quiet machine or loaded
    took = []
    for _ in range(3):
        # -X faulthandler: a rotation that crashed in native code says where (CI once saw it end without a word)
        p = subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", ROTATOR.format(op="rotate(eng)")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        t0 = time.perf_counter()
        p.stdin.write("go\n")
        p.stdin.flush()
        if p.stdout.readline().strip() != "done":
            _, err = p.communicate(timeout=60)
            raise AssertionError(f"the rotation ended without finishing (exit {p.returncode}): {err[-3000:]}")
        took.append(time.perf_counter() - t0)
        p.communicate()
        check()
    window = 1.5 * min(took)
    outcomes = _kill_trials(profile_home, "rotate(eng)", 20, {}, check, within=window)
    assert outcomes["killed"] >= 5, outcomes  # the kills did land inside rotations
    assert len(keys_seen) >= 2  # and some rotations completed
    assert keychain_damaged <= 2, keychain_damaged
    print(f"rotation kill trials: {outcomes}, keys seen {len(keys_seen)}, keychain file damaged {keychain_damaged}")
    # the recovery key still opens it on a new machine, whatever key the file has now
    new_home = tmp_path / "elsewhere"
    shutil.copytree(profile_home, new_home)
    env = {"PERSONAL_LLM_HOME": str(new_home), "XDG_DATA_HOME": str(tmp_path / "fresh-keys")}
    p = run("unlock", "--recovery-key", rk, env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(run("stats", "--json", env=env).stdout)["memories"] == 400


def test_passphrase_change_killed_at_random_points_opens_with_the_old_or_the_new(profile_home: Path,
                                                                                 monkeypatch):
    import keyring.core

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    keyring.core._keyring_backend = None
    phrases = ["phrase-0"]
    with Engine.open(profile_home, embedder=NoEmbedder(), passphrase="phrase-0") as eng:
        eng.remember("Still here.")
    counter = iter(range(1, 100))

    def check() -> None:
        nonlocal env
        for phrase in (phrases[-1], env["NEXT"]):
            try:
                with Engine.open(profile_home, embedder=NoEmbedder(), passphrase=phrase) as e:
                    assert e.stats().memories == 1
            except WrongKey:
                continue
            if phrase != phrases[-1]:
                phrases.append(phrase)
            break
        else:
            raise AssertionError("neither the old nor the new passphrase opens the store")
        nxt = f"phrase-{next(counter)}"
        env.update({"PERSONAL_LLM_PASSPHRASE": phrases[-1], "NEXT": nxt})

    env = {"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring", "PERSONAL_LLM_PASSPHRASE": "phrase-0",
           "NEXT": "phrase-x"}
    outcomes = {"killed": 0, "finished": 0}
    for _ in range(20):
        r = _kill_trials(profile_home, "change_passphrase(eng, __import__('os').environ['NEXT'])", 1, env, check,
                         within=1.2)
        for k in outcomes:
            outcomes[k] += r[k]
    assert outcomes["finished"] + outcomes["killed"] == 20 and 0 < len(phrases) - 1
    print(f"passphrase kill trials: {outcomes}, passphrases that took effect {len(phrases) - 1}")


def test_snapshot_while_four_writers_run_restores_into_a_fresh_profile(profile_home: Path, embedder,
                                                                      tmp_path: Path):
    import threading

    from engine import backup

    queries = ["Where is the spare key?", "When was the boiler serviced?", "note 3 from writer 2"]
    with Engine.open(profile_home, embedder=embedder) as eng:
        eng.remember("The spare key is under the blue pot.")
        eng.remember("The boiler was serviced in March.")
        stop = threading.Event()

        def writer(n: int) -> None:
            i = 0
            while not stop.is_set():
                eng.remember(f"note {i} from writer {n}", embed="none")
                i += 1

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        snap = backup.backup_now(eng)
        stop.set()
        for t in threads:
            t.join()
        assert stat.S_IMODE(snap.path.stat().st_mode) == 0o600
        assert snap.path.read_bytes()[:16] != b"SQLite format 3\x00"  # encrypted
    # restore into a fresh profile (same keychain), then compare recall with the snapshot opened in place
    fresh = tmp_path / "fresh-profile"
    shutil.copytree(profile_home / "backups", fresh / "backups")
    assert backup.restore_into_empty(fresh, backup.find(fresh / "backups", snap.name))
    with Engine.open(fresh, embedder=embedder) as restored:
        n = restored.stats().memories
        restored.embed_pending()
        got = [[h.id for h in restored.recall(q, k=5)] for q in queries]
        assert restored.con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert n >= 2
    # over the existing profile: the current store is kept aside until the user deletes it
    with Engine.open(profile_home, embedder=embedder) as eng:
        total = eng.stats().memories
        pragma = eng.store._key_pragma
    assert total > n
    aside = backup.restore(profile_home, snap, pragma)
    assert aside is not None and aside.exists()
    with Engine.open(profile_home, embedder=embedder) as eng:
        assert eng.stats().memories == n
        eng.embed_pending()
        assert [[h.id for h in eng.recall(q, k=5)] for q in queries] == got


def test_retention_keeps_seven_daily_and_four_weekly(tmp_path: Path):
    from datetime import datetime, timedelta

    from engine import backup

    now = datetime(2026, 6, 30, 12, 0)
    made = []
    for days in range(60):  # two snapshots a day for 60 days
        for hour in (9, 18):
            at = now - timedelta(days=days) + timedelta(hours=hour - 12)
            p = tmp_path / f"memory-{at.strftime('%Y%m%dT%H%M%S%f')}.db"
            p.write_bytes(b"x")
            made.append(at)
    backup.prune(tmp_path)
    kept = sorted((s.at for s in backup.snapshots(tmp_path)), reverse=True)
    assert len(kept) == 11
    days = {datetime.fromtimestamp(t).date() for t in kept[:7]}
    assert len(days) == 7 and all(datetime.fromtimestamp(t).hour == 18 for t in kept[:7])  # newest of each day
    weeks = {datetime.fromtimestamp(t).isocalendar()[:2] for t in kept[7:]}
    assert len(weeks) == 4


def test_a_new_store_has_8k_pages_authenticated_with_hmac_sha256(profile_home: Path):
    import sqlcipher3

    from engine.store.sqlite import db as dbmod
    from tests.forensics import layout

    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        eng.remember("The spare key is under the blue pot.")
        assert eng.store.con.execute("PRAGMA cipher_hmac_algorithm").fetchone()[0] == "HMAC_SHA256"
    key = data_key(profile_home)
    path = profile_home / "memory.db"
    assert layout(path, key) == (8192, 48)
    for settings, opens in ((dbmod.CIPHER_LEGACY, False), (dbmod.CIPHER_CURRENT, True)):
        con = sqlcipher3.connect(str(path), isolation_level=None)
        con.execute("PRAGMA cipher_log_level = NONE")
        con.execute(f"PRAGMA key = \"x'{key.hex()}'\"")
        for pragma in settings:
            con.execute(pragma)
        try:
            got = con.execute("SELECT count(*) FROM memories").fetchone()[0]
        except sqlcipher3.DatabaseError:
            got = None
        con.close()
        assert (got == 1) is opens, settings


def test_a_store_made_with_sqlciphers_defaults_still_opens_is_copied_alike_and_rotates(
        profile_home: Path, monkeypatch: pytest.MonkeyPatch):
    """Stores made before the current page settings keep SQLCipher 4's defaults (4 KiB, HMAC-SHA512)."""
    from engine import backup, keyops
    from engine.store.sqlite import db as dbmod
    from tests.forensics import layout

    assert dbmod.CIPHERS == (dbmod.CIPHER_CURRENT, dbmod.CIPHER_LEGACY)
    monkeypatch.setattr(dbmod, "CIPHERS", (dbmod.CIPHER_LEGACY, dbmod.CIPHER_CURRENT))  # as older versions made it
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        first = eng.remember("The boiler was serviced in March.").id
    path = profile_home / "memory.db"
    assert layout(path, data_key(profile_home)) == (4096, 80)
    monkeypatch.setattr(dbmod, "CIPHERS", (dbmod.CIPHER_CURRENT, dbmod.CIPHER_LEGACY))  # as this version does
    monkeypatch.setattr(dbmod, "_cipher_seen", {})  # a new process: nothing known about the file
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        assert eng.get(first).text == "The boiler was serviced in March."
        second = eng.remember("The spare key is under the blue pot.").id
        snap = backup.backup_now(eng)
        assert layout(snap.path, data_key(profile_home)) == (4096, 80)  # a copy keeps its store's settings
        old_key = data_key(profile_home)
        keyops.rotate(eng)
        assert eng.get(second).text == "The spare key is under the blue pot."
    monkeypatch.setattr(dbmod, "_cipher_seen", {})
    assert data_key(profile_home) != old_key
    assert layout(path, data_key(profile_home)) == (4096, 80)  # the new key, the same settings
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        assert {m.id for m in eng.list_memories()} == {first, second}
        assert eng.con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_the_recovery_key_is_shown_when_the_first_command_fails_after_making_the_store(profile_home: Path):
    lexical_profile(profile_home)
    first = run("get", "mem_doesnotexist")
    assert first.returncode != 0 and first.stderr.startswith("error: No memory with id")
    assert len(RECOVERY_RE.findall(first.stderr)) == 1, first.stderr  # after the error, once
    assert not RECOVERY_RE.search(run("remember", "A first note.").stderr)


def test_a_snapshot_restored_into_another_profile_never_takes_the_keychain_entry_of_its_source(
        profile_home: Path, tmp_path: Path):
    """A snapshot restored into a new profile on the same computer is a copy of the store with its source's
    id, and that id names the keychain entry. A recovery or a rotation in the copy must not write over the
    source's entry: both profiles keep opening, each with its own key."""
    from engine import backup
    from engine.keyops import show_recovery, unlock_with_recovery

    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        eng.remember("The spare key is under the blue pot.")
        rk, _ = show_recovery(eng)
        snap = backup.backup_now(eng)
        eng.remember("Written after the snapshot.")
        eng.rotate_key()  # the source's key is no longer the snapshot's
    source_account = read_profile(profile_home).key_account
    source_key = keyring.get_password(SERVICE, source_account)

    # a snapshot from before the rotation: the keychain cannot open it, the recovery key does
    older = tmp_path / "older-copy"
    shutil.copytree(profile_home / "backups", older / "backups")
    assert not backup.restore_into_empty(older, backup.find(older / "backups", snap.name))
    unlock_with_recovery(older, rk)
    assert read_profile(older).key_account != source_account
    assert keyring.get_password(SERVICE, source_account) == source_key  # left as it was
    with Engine.open(older, embedder=NoEmbedder()) as copy:
        assert copy.stats().memories == 1
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        assert eng.stats().memories == 2

    # a snapshot the keychain opens: the copy gets an entry of its own at once, so rotating it later
    # leaves the source alone
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        snap = backup.backup_now(eng)
    copy_home = tmp_path / "copy"
    shutil.copytree(profile_home / "backups", copy_home / "backups")
    assert backup.restore_into_empty(copy_home, backup.find(copy_home / "backups", snap.name))
    assert read_profile(copy_home).key_account not in (source_account, read_profile(older).key_account)
    with Engine.open(copy_home, embedder=NoEmbedder()) as copy:
        copy.rotate_key()
        copy.remember("Only in the copy.")
    assert keyring.get_password(SERVICE, source_account) == source_key
    with Engine.open(profile_home, embedder=NoEmbedder()) as eng:
        assert eng.stats().memories == 2
    with Engine.open(copy_home, embedder=NoEmbedder()) as copy:
        assert copy.stats().memories == 3
