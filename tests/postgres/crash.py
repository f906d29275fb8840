"""Kill -9 of `personal-llm serve --database` while several users write: what the server acknowledged must be
in the database after a restart, readable through the API, and nothing may be half-written.

Used by tests/postgres/test_crash.py (a few trials) and bench/pg_crash.py (many). One trial: the server runs
(a process of its own), each user's threads remember through POST /memory/remember and, now and then, five
memories at once through POST /memory/batch (one transaction); once writes are being acknowledged, the server
gets SIGKILL at a random moment, with requests in flight; it is started again and checked:

- every acknowledged memory, of every trial so far, is there with its words (read through the API as its user
  for this trial's, from the database for all);
- a batch is all there or not at all (in flight when the server died: either);
- no row is half-written: every memory's words are words a client sent, with their hash; a memory marked
  embedded has its vector and one that is not has none; the counts the triggers keep equal the rows.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg

from tests.postgres.serving import start

WORDS = ("garden", "harbour", "invoice", "bicycle", "router", "dentist", "recipe", "ferry", "violin", "ledger",
         "glacier", "pottery", "compass", "lantern", "orchard", "meteor", "saddle", "walnut", "quarry", "tundra")


def start_server(url: str, home: Path) -> tuple[subprocess.Popen, str]:
    """`personal-llm serve --database URL` on a free loopback port; (process, its address) once it listens."""
    return start(["--database", url, "--port", "0"], {**os.environ, "PERSONAL_LLM_HOME": str(home)},
                 stderr=subprocess.DEVNULL)


@dataclass
class Ledger:
    """What the clients sent and what the server acknowledged, per user, over every trial."""

    acked: dict[str, dict[str, str]] = field(default_factory=dict)  # user -> {memory id: text}
    sent: dict[str, set[str]] = field(default_factory=dict)  # user -> every text sent (answered or not)
    batches: dict[str, list[list[str]]] = field(default_factory=dict)  # user -> texts of each batch sent
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class Trial:
    acked: int  # writes acknowledged in this trial (memories)
    in_flight: int  # requests without an answer when the server died
    killed_after: float  # seconds of writing before SIGKILL
    restart: float  # seconds until the restarted server listened


def _text(rng: random.Random, user: str, n: int) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(6))
    return f"{user} note {n} {rng.getrandbits(48):012x}: {words}."


def _writer(address: str, user: str, token: str, seed: int, ledger: Ledger, stop: threading.Event,
            counts: dict[str, int]) -> None:
    rng = random.Random(seed)
    n = 0
    with httpx.Client(base_url=address, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        while not stop.is_set():
            n += 1
            batch = rng.random() < 0.2
            texts = [_text(rng, user, n * 10 + i) for i in range(5 if batch else 1)]
            with ledger.lock:
                ledger.sent[user].update(texts)
                if batch:
                    ledger.batches[user].append(texts)
            counts["in_flight"] += 1
            try:
                if batch:
                    r = client.post("/memory/batch", json={"items": [{"text": t} for t in texts]})
                else:
                    r = client.post("/memory/remember", json={"text": texts[0]})
            except httpx.TransportError:  # the server died under this request
                return
            counts["in_flight"] -= 1
            if r.status_code != 200:
                raise AssertionError(f"{user}: HTTP {r.status_code} from a live server: {r.text[:200]}")
            results = r.json() if batch else [r.json()]
            with ledger.lock:
                for t, res in zip(texts, results, strict=True):
                    if not res["merged"]:
                        ledger.acked[user][res["id"]] = t
                counts["acked"] += len(results)


def trial(url: str, address: str, proc: subprocess.Popen, tokens: dict[str, str], home: Path, ledger: Ledger,
          rng: random.Random, *, threads: int = 2, min_acked: int = 20, kill_within: float = 2.0,
          ) -> tuple[subprocess.Popen, str, Trial]:
    """Write as every user against the running server, SIGKILL it, start it again and check (see the module
    doc). Returns the restarted server (process, address) and what happened."""
    for user in tokens:
        ledger.acked.setdefault(user, {})
        ledger.sent.setdefault(user, set())
        ledger.batches.setdefault(user, [])
    stop = threading.Event()
    counts = [{"in_flight": 0, "acked": 0} for _ in range(len(tokens) * threads)]
    errors: list[BaseException] = []

    def run(*args) -> None:
        try:
            _writer(*args)
        except BaseException as e:  # noqa: BLE001 (raised below, in the trial)
            errors.append(e)

    runners = [threading.Thread(target=run, daemon=True,
                                args=(address, user, token, rng.getrandbits(32), ledger, stop, counts[i * threads + j]))
               for i, (user, token) in enumerate(tokens.items()) for j in range(threads)]
    t0 = time.monotonic()
    for t in runners:
        t.start()
    while sum(c["acked"] for c in counts) < min_acked:  # writes are going through
        if time.monotonic() - t0 > 120 or errors:
            break
        time.sleep(0.02)
    time.sleep(rng.uniform(0, kill_within))
    proc.send_signal(signal.SIGKILL)
    killed_after = time.monotonic() - t0
    proc.wait(30)
    stop.set()
    for t in runners:
        t.join(120)
    if errors:
        raise errors[0]
    t1 = time.monotonic()
    proc, address = start_server(url, home)
    restart = time.monotonic() - t1
    check(url, address, tokens, ledger)
    return proc, address, Trial(sum(c["acked"] for c in counts), sum(c["in_flight"] for c in counts),
                                killed_after, restart)


def check(url: str, address: str, tokens: dict[str, str], ledger: Ledger, *, read_through_api: int = 50) -> None:
    """Every acknowledged memory is there with its words, batches are whole, no row is half-written (module
    doc). Reads the database as its superuser, and up to `read_through_api` memories of each user through
    the API as that user."""
    from engine.memory_rules import content_hash
    from engine.store.postgres.migrations import MEMORY_TALLY_KEY

    with psycopg.connect(url) as con:
        con.execute("SET search_path = personal_llm, public")
        ids = dict(con.execute("SELECT name, id FROM users").fetchall())
        for user in tokens:
            uid_ = ids[user]
            stored = {u: (t, h, e) for u, t, h, e in con.execute(
                "SELECT uid, text, content_hash, embedded_hash FROM memories WHERE user_id = %s", (uid_,))}
            lost = [m for m in ledger.acked[user] if m not in stored]
            assert not lost, f"{user}: {len(lost)} acknowledged memories lost, e.g. {lost[:3]}"
            changed = [m for m, t in ledger.acked[user].items() if stored[m][0] != t]
            assert not changed, f"{user}: acknowledged memories with other words: {changed[:3]}"
            texts = {t for t, _, _ in stored.values()}
            strange = texts - ledger.sent[user]
            assert not strange, f"{user}: {len(strange)} memories with words no client sent"
            bad_hash = [u for u, (t, h, _) in stored.items() if h != content_hash(t)]
            assert not bad_hash, f"{user}: memories whose hash is not of their words: {bad_hash[:3]}"
            for batch in ledger.batches[user]:
                there = sum(t in texts for t in batch)
                assert there in (0, len(batch)), f"{user}: a batch of {len(batch)} half stored ({there})"
            (mismatch,) = con.execute(
                "SELECT count(*) FROM memories m WHERE user_id = %s AND (embedded_hash IS NOT NULL) <> EXISTS "
                "(SELECT 1 FROM memory_vectors v WHERE v.user_id = m.user_id AND v.memory_id = m.id)", (uid_,)).fetchone()
            assert mismatch == 0, f"{user}: {mismatch} memories whose vector disagrees with their embedded mark"
            counted = dict(con.execute(
                f"SELECT {MEMORY_TALLY_KEY.format(r='m')}, count(*) FROM memories m WHERE user_id = %s GROUP BY 1",
                (uid_,)).fetchall())
            kept = {k: n for k, n in con.execute(
                "SELECT name, n FROM tallies WHERE user_id = %s AND name LIKE 'm:%%'", (uid_,)).fetchall() if n}
            assert kept == counted, f"{user}: the kept counts {kept} are not the rows' {counted}"
    for user, token in tokens.items():
        with httpx.Client(base_url=address, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
            for m, t in list(ledger.acked[user].items())[-read_through_api:]:
                r = client.get(f"/memory/{m}")
                assert r.status_code == 200 and r.json()["text"] == t, f"{user}: {m} not readable: {r.status_code}"


def pending(address: str, tokens: dict[str, str]) -> int:
    """Memories and chunks waiting for their vector, over every user (the background embeds them)."""
    total = 0
    for token in tokens.values():
        r = httpx.get(f"{address}/stats", headers={"Authorization": f"Bearer {token}"}, timeout=60)
        r.raise_for_status()
        total += int(r.json()["pending_embeddings"])
    return total
