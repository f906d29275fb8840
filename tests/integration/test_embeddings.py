"""The ONNX Runtime and numpy runtimes give the same vectors as sentence-transformers, the ONNX one falls back
to numpy when it cannot be built or disagrees, and the default model never imports torch."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from engine import onnx_minilm
from engine.embeddings import SMALL_BATCH, Embedder, _sentence_transformer, models_extra_installed
from engine.minilm import BATCH_TOKENS, MiniLM, gelu
from engine.onnx_minilm import PROBES, Model, OnnxMiniLM, load_runtime

TEXTS = [
    "My sister Alice lives in Lisbon.",
    "Which city is my sibling based in?",
    "Café déjà vu — naïve façade, 東京 and emoji 🙂 in one line.",
    "word " * 400,  # longer than the model's 256 word-pieces: truncated the same way
    "",
    " ".join(f"Sentence {i} of a long paragraph about the harbour budget." for i in range(30)),
] + [f"Note {i}: the {w} is in drawer {i}." for i, w in enumerate(["stapler", "passport", "charger"] * 4)]


def numpy_runtime(path: Path, **_) -> MiniLM:
    return MiniLM(path)


def make(runtime: str) -> Embedder:
    """A loaded Embedder of the default model on the named runtime."""
    e = Embedder() if runtime == "onnxruntime" else Embedder(runtime=numpy_runtime)
    e.load()
    assert e.runtime == runtime
    return e


@pytest.mark.skipif(not models_extra_installed(), reason="sentence-transformers is not installed (dev extra)")
@pytest.mark.parametrize("runtime", ["onnxruntime", "numpy"])
def test_runtimes_match_sentence_transformers(runtime):
    fast = make(runtime)
    reference = _sentence_transformer(fast._model_dir()).encode(
        TEXTS, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    one = np.stack([fast.encode_one(t) for t in TEXTS])  # single items, one thread
    batch = fast.encode(TEXTS)  # more than SMALL_BATCH: a batch, sorted by length, on the bounded pool
    assert len(TEXTS) > SMALL_BATCH
    # tiny batches force the token budget's cut into several padded batches (on a two-thread session or pool)
    cut = fast._fast.encode(TEXTS, batch_size=3, n_threads=2)
    for ours in (one, batch, cut):
        assert ours.shape == reference.shape == (len(TEXTS), 384)
        assert (ours * reference).sum(1).min() >= 0.9999
        assert np.abs(ours - reference).max() < 1e-5


def test_a_one_shot_process_encodes_a_few_texts_without_loading_the_model():
    """The CLI's embedder: a query or a memory (up to SMALL_BATCH texts) on the numpy runtime over the
    memory-mapped weights, the same vectors as the model's; a batch loads the model, which then runs all."""
    onnx = make("onnxruntime")
    e = Embedder()
    e.one_shot = True
    few = e.encode(TEXTS[:SMALL_BATCH])
    assert e.runtime is None and not e.ready  # the model (ONNX Runtime) was not loaded
    assert e._few._mapping is not None  # the weights were read where they lie
    assert (few * onnx.encode(TEXTS[:SMALL_BATCH])).sum(1).min() >= 0.99999
    one = e.encode_one(TEXTS[3])  # truncated at 256 word-pieces as the model does
    assert float(one @ onnx.encode_one(TEXTS[3])) >= 0.99999
    assert e.window_spans("word " * 400)  # windows of a long text without loading the model either
    assert e.runtime is None
    batch = e.encode(TEXTS)  # more than SMALL_BATCH texts: the model
    assert e.runtime == "onnxruntime" and e._few is None
    assert (batch * onnx.encode(TEXTS)).sum(1).min() >= 0.99999


@pytest.mark.parametrize("runtime", ["onnxruntime", "numpy"])
def test_batches_keep_to_the_token_budget(runtime):
    fast = make(runtime)
    seen: list[tuple[int, int]] = []
    forward = fast._fast._forward

    def spy(ids, *rest):
        seen.append((len(ids), max(len(i) for i in ids)))
        return forward(ids, *rest)

    fast._fast._forward = spy
    texts = ["word " * 300] * 20 + ["short"] * 100
    vecs = fast.encode(texts)
    assert vecs.shape == (120, 384)
    assert all(b * n <= BATCH_TOKENS for b, n in seen if b > 1)
    assert seen[-1][1] < 10  # the short texts were batched together, not padded to the long ones
    assert np.allclose(vecs[0], vecs[19], atol=1e-6) and np.allclose(vecs[20], vecs[119], atol=1e-6)


def test_gelu_is_the_exact_one():
    import math

    x = np.linspace(-8, 8, 4001, dtype=np.float32)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    assert np.abs(gelu(x.copy()) - exact).max() < 1e-6


def test_the_default_model_never_imports_torch(tmp_path):
    """remember, ingest (a batch of chunks), a long capture and recall, all with vectors, and no torch."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"n{i}.md").write_text("\n\n".join(
            f"Paragraph {j} of file {i}: the harbour budget for item {j} is kept in box {j % 9}." for j in range(24)))
    code = (
        "import sys, os; from pathlib import Path; from engine import Engine; "
        "os.environ['PERSONAL_LLM_PASSPHRASE'] = 'pw'; "
        "eng = Engine.open(Path(sys.argv[1])); "
        "eng.remember('My sister Alice lives in Lisbon.', embed='sync'); "
        "text = ' '.join(f'Paragraph {i} says the item number {i} is kept in box {i % 9}.' for i in range(80)); "
        "eng.remember(text, embed='sync'); "
        "n = eng.con.execute('SELECT count(*) FROM memory_windows').fetchone()[0]; assert n > 4, n; "
        "r = eng.ingest([Path(sys.argv[2])]); assert all(x.status == 'added' for x in r), r; "
        "assert eng.stats().pending_embeddings == 0; assert eng.embedder.runtime == 'onnxruntime', eng.embedder.runtime; "
        "hits = eng.recall('Which city is my sibling based in?'); assert any('Lisbon' in h.text and h.cosine for h in hits), hits; "
        "bad = [m for m in ('torch', 'sentence_transformers', 'transformers', 'scipy', 'sklearn') if m in sys.modules]; "
        "assert not bad, bad"
    )
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "home"), str(docs)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: numpy's BLAS has one thread anyway")
def test_loading_the_model_puts_numpy_blas_on_one_thread(tmp_path):
    """The vector mirror's rescoring and near-duplicate keys are numpy's, whichever runtime embeds: once a
    model loads they run on one BLAS thread (set in the engine, not by the environment) — also when the
    ONNX graph's check is already kept and the numpy runtime never runs (the second process here)."""
    code = (
        "from threadpoolctl import threadpool_info; from engine.embeddings import Embedder; "
        "before = [i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas']; "
        "e = Embedder(); e.load(); assert e.runtime == 'onnxruntime', e.runtime; "
        "after = [i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas']; "
        "print(max(before), max(after))"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    env["PERSONAL_LLM_HOME"] = str(tmp_path / "home")  # where the graph's check is kept
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr
        before, after = map(int, r.stdout.split())
        assert before > 1  # numpy's own default: a thread per core
        assert after == 1


def fallback_embedder(tmp_path: Path, **kw) -> Embedder:
    """The default model with load_runtime given `kw` (a check or a build), and no verdict kept."""
    return Embedder(runtime=lambda path, **given: load_runtime(path, key=given["key"], cache_dir=None, **kw))


def assert_encodes_like_numpy(e: Embedder) -> None:
    numpy = MiniLM(e._model_dir())
    texts = TEXTS[:3]
    assert np.abs(e.encode(texts) - numpy.encode(texts)).max() < 1e-6
    assert np.abs(e.encode_one(texts[0]) - numpy.encode(texts[:1])[0]).max() < 1e-6


def test_a_disagreeing_onnx_graph_falls_back_to_numpy(tmp_path, caplog):
    calls = []

    def disagree(onnx, numpy):
        calls.append((type(onnx), type(numpy)))
        return 0.5

    e = fallback_embedder(tmp_path, check=disagree)
    with caplog.at_level(logging.INFO, logger="engine"):
        e.load()
    assert calls == [(OnnxMiniLM, MiniLM)]
    assert e.runtime == "numpy"
    assert_encodes_like_numpy(e)
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "differ" in logged and "numpy runtime" in logged
    assert not any(p[:12] in logged for p in PROBES)  # no text in the log


def test_an_onnx_graph_that_fails_to_build_falls_back_to_numpy(tmp_path, caplog):
    def broken(path):
        return Model(b"\x08\x08 this is not an ONNX model", {})

    e = fallback_embedder(tmp_path, build=broken)
    with caplog.at_level(logging.WARNING, logger="engine"):
        e.load()
    assert e.runtime == "numpy"
    assert_encodes_like_numpy(e)
    assert "does not run on ONNX Runtime" in caplog.text


def test_a_check_that_raises_falls_back_to_numpy(tmp_path):
    def boom(onnx, numpy):
        raise RuntimeError("probe failed")

    e = fallback_embedder(tmp_path, check=boom)
    e.load()
    assert e.runtime == "numpy"


def test_the_verdict_is_kept_and_checked_again(tmp_path, monkeypatch):
    """The first load checks in full and keeps the verdict; later loads re-encode its probes instead, and a
    verdict whose probe vectors no longer match is checked in full again."""
    calls = []

    def counting(onnx, numpy):
        calls.append(1)
        return onnx_minilm.agreement(onnx, numpy)

    def loader(path, **given):
        return load_runtime(path, key=given["key"], cache_dir=tmp_path / "cache", check=counting)

    monkeypatch.setattr(onnx_minilm, "_kept", {})  # only what this test's loads keep
    first = Embedder(runtime=loader)
    first.load()
    assert first.runtime == "onnxruntime" and len(calls) == 1
    (verdict,) = (tmp_path / "cache").glob("minilm-*.json")
    kept = json.loads(verdict.read_text())
    assert kept["lowest_cosine"] >= 0.9999 and len(kept["probes"]) == 2

    monkeypatch.setattr(onnx_minilm, "_kept", {})  # as a new process: the file only
    second = Embedder(runtime=loader)
    second.load()
    assert second.runtime == "onnxruntime" and len(calls) == 1

    kept["probes"] = [list(reversed(v)) for v in kept["probes"]]  # vectors the session does not give
    verdict.write_text(json.dumps(kept))
    monkeypatch.setattr(onnx_minilm, "_kept", {})
    third = Embedder(runtime=loader)
    third.load()
    assert third.runtime == "onnxruntime" and len(calls) == 2
    assert json.loads(verdict.read_text())["probes"] != kept["probes"]  # written again


def test_onnx_calls_run_concurrently_and_give_the_same_vectors():
    """No lock around the ONNX runtime: threads encoding at once (queries and a batch) get what one thread
    gets, from the shared session and tokenizer."""
    e = make("onnxruntime")
    texts = TEXTS + [f"Question {i}: where is item {i}?" for i in range(20)]
    alone = [e.encode_one(t) for t in texts]
    batch_alone = e.encode(texts)
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(5)

    def work(k: int) -> None:
        try:
            start.wait()
            if k == 0:
                results[k] = e.encode(texts)
            else:
                results[k] = np.stack([e.encode_one(t) for t in texts[k::4]])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert np.abs(results[0] - batch_alone).max() < 1e-6
    for k in range(1, 5):
        assert np.abs(results[k] - np.stack(alone[k::4])).max() < 1e-6


def test_a_question_is_encoded_beside_its_caller_while_a_helper_is_free():
    """encode_one_soon: the same vector, made on a helper thread; None (the caller encodes it itself) when every
    helper is busy, so a search never waits in a queue behind others, and on a runtime of one call at a time."""
    from engine import embeddings

    e = make("onnxruntime")
    text = "Where did I put the passport?"
    soon = e.encode_one_soon(text)
    assert soon is not None and np.array_equal(soon.result(timeout=60), e.encode_one(text))
    release = threading.Event()
    busy = []
    while (held := embeddings._helpers.submit(release.wait)) is not None:
        busy.append(held)
        assert len(busy) <= os.cpu_count()
    assert busy and e.encode_one_soon(text) is None
    release.set()
    for held in busy:
        held.result(timeout=60)
    soon = e.encode_one_soon(text)
    assert soon is not None and np.array_equal(soon.result(timeout=60), e.encode_one(text))
    assert make("numpy").encode_one_soon(text) is None


def test_weights_are_hashed_once_and_a_changed_file_is_refused(tmp_path, monkeypatch):
    """The weights' sha256 is checked at the first load and remembered by the file's size, time and inode:
    a later load skips hashing; a file that changed (bytes or time) is hashed again, and refused."""
    import hashlib

    from engine import embeddings

    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"weights " * 1000)
    good = hashlib.sha256(weights.read_bytes()).hexdigest()
    hashed: list[Path] = []
    real = embeddings._sha256
    monkeypatch.setattr(embeddings, "_sha256", lambda p: hashed.append(p) or real(p))
    assert embeddings._weights_intact(weights, good) and len(hashed) == 1
    assert embeddings._weights_intact(weights, good) and len(hashed) == 1  # remembered
    assert not embeddings._weights_intact(weights, "0" * 64)  # another expected hash: checked, refused
    raw = bytearray(weights.read_bytes())
    raw[3] ^= 1
    weights.write_bytes(bytes(raw))  # same size, new time
    assert not embeddings._weights_intact(weights, good)
    assert len(hashed) == 3


def _resident_kb(address: int) -> int:
    """Resident kB of the mapping of this process that holds `address` (Linux /proc/self/smaps): other
    mappings of the same file (another runtime, sentence-transformers) are not counted."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and ":" not in head[0] and len(head) >= 5:
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            inside = lo <= address < hi
        elif inside and line.startswith("Rss:"):
            return int(head[1])
    raise AssertionError("no mapping holds the address")


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps")
def test_the_word_table_is_read_from_the_file_and_let_go():
    """The 47 MB word-embedding table is not in the graph (ONNX Runtime would keep a resident copy): its rows
    are looked up in the memory-mapped weights, and the pages a call read leave the resident set after it."""
    e = make("onnxruntime")
    inputs = [i.name for i in e._fast._sessions[1][0].get_inputs()]
    assert inputs == ["words", "attention_mask"]
    many = [f"Item {i}: {' '.join(f'w{(i * 37 + j) % 9000}' for j in range(120))}" for i in range(80)]
    table = e._fast._words
    assert table.shape == (30522, 384)
    where = table.__array_interface__["data"][0]  # inside the memory map of the weights file
    e.encode(many)
    assert _resident_kb(where) < 1024  # what the call read was let go (the whole table is 46,000 kB)
    touched = table[np.arange(0, 30522, 7)].sum()  # read a seventh of the rows: ~all of its pages resident
    assert np.isfinite(touched) and _resident_kb(where) > 20_000  # the measure sees resident pages
    e.encode_one("and one query")
    assert _resident_kb(where) < 1024



EXIT_DURING_A_CALL = """
import threading, time
from engine.embeddings import Embedder

e = Embedder()
e.load()
texts = ["The fuse box is in the hall cupboard, behind the coats and the spare light bulbs."] * 4


def embed_forever():
    while True:
        e.encode(texts)


class SlowToGo:  # cleared with __main__ while Python finalizes: the thread's call under way ends meanwhile
    def __del__(self):
        time.sleep(0.5)


keep = SlowToGo()
threading.Thread(target=embed_forever, daemon=True).start()
time.sleep(0.3)
print("exiting", flush=True)
"""


def test_the_process_exits_cleanly_while_a_daemon_thread_is_inside_onnx_runtime(tmp_path):
    """The app's background threads are daemons: one may still be loading the model (its check encodes
    probes) or embedding a batch when the process exits. Python ends such a thread when it takes the GIL
    back during finalization, which, inside ONNX Runtime's C++, aborted the process ("terminate called
    without an active exception"): the exit now waits for the call under way and starts no other."""
    script = tmp_path / "exit_during_a_call.py"
    script.write_text(EXIT_DURING_A_CALL)
    env = dict(os.environ, PERSONAL_LLM_HOME=str(tmp_path / "home"))
    for _ in range(2):
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
        assert (r.returncode, r.stdout) == (0, "exiting\n"), r.stderr


def test_on_a_serialised_runtime_a_question_goes_in_between_a_batch_and_vectors_stay_the_same():
    """The numpy runtime runs one call at a time: a search's question asked while the background embeds a
    batch of 64 waited for the whole batch (6-7 s beside a backlog). The batch now goes a few texts at a time
    and the question is encoded at the first gap; the batch's vectors are what one call gives."""
    calls: list[int] = []
    batch_started = threading.Event()

    class Recorded(MiniLM):  # the real numpy runtime; it notes how many texts each call encodes, in order
        def encode(self, texts, **kw):
            calls.append(len(texts))
            if len(texts) > 1:
                batch_started.set()
            return super().encode(texts, **kw)

    e = Embedder(runtime=lambda path, **_: Recorded(path))
    e.load()
    texts = [f"Note {i}: the harbour budget, the stapler and the passport in drawer {i}." for i in range(64)]
    whole = MiniLM.encode(e._fast, texts)
    calls.clear()
    out: dict[str, np.ndarray] = {}
    batch = threading.Thread(target=lambda: out.update(batch=e.encode(texts)))
    batch.start()
    assert batch_started.wait(60)
    question = e.encode_one("Where is my passport?")
    batch.join(120)
    assert calls.index(1) < len(calls) - 1, calls  # the question was not left until the batch was done
    assert sum(n for n in calls if n > 1) == 64 and max(calls) <= Embedder.TURN
    assert np.abs(out["batch"] - whole).max() < 1e-5
    assert np.abs(question - MiniLM.encode(e._fast, ["Where is my passport?"])[0]).max() < 1e-5


def test_closing_the_engine_stops_the_model_loading_in_the_background(profile_home):
    """Quit in the app's first seconds, while the model loads: the load stops at its next step and its thread
    is waited for, so neither the store's close nor the process's exit comes under it (a thread left inside
    the Rust of safetensors at exit crashed the app). A stopped load is no failure: the next one loads."""
    from engine import Engine

    embedder = Embedder()
    eng = Engine.open(profile_home, embedder=embedder)
    eng.start_background()
    assert any(t.name == "engine-background" for t in threading.enumerate())
    eng.close()
    assert not any(t.name == "engine-background" for t in threading.enumerate())
    assert not embedder.ready and embedder.failed is None
    assert embedder.load() is not None and embedder.ready
