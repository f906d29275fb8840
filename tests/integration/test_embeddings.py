"""The numpy runtime gives the same vectors as sentence-transformers, and the default model never imports torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from engine.embeddings import SMALL_BATCH, Embedder, _sentence_transformer, models_extra_installed
from engine.minilm import BATCH_TOKENS, gelu

TEXTS = [
    "My sister Alice lives in Lisbon.",
    "Which city is my sibling based in?",
    "Café déjà vu — naïve façade, 東京 and emoji 🙂 in one line.",
    "word " * 400,  # longer than the model's 256 word-pieces: truncated the same way
    "",
    " ".join(f"Sentence {i} of a long paragraph about the harbour budget." for i in range(30)),
] + [f"Note {i}: the {w} is in drawer {i}." for i, w in enumerate(["stapler", "passport", "charger"] * 4)]


@pytest.mark.skipif(not models_extra_installed(), reason="sentence-transformers is not installed (dev extra)")
def test_numpy_runtime_matches_sentence_transformers():
    fast = Embedder()
    fast.load()
    reference = _sentence_transformer(fast._model_dir()).encode(
        TEXTS, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    one = np.stack([fast.encode_one(t) for t in TEXTS])  # single items, one thread
    batch = fast.encode(TEXTS)  # more than SMALL_BATCH: a batch, sorted by length, on the bounded pool
    assert len(TEXTS) > SMALL_BATCH
    # tiny batches force the token budget's cut into several padded batches
    cut = fast._fast.encode(TEXTS, batch_size=3, n_threads=2)
    for ours in (one, batch, cut):
        assert ours.shape == reference.shape == (len(TEXTS), 384)
        assert (ours * reference).sum(1).min() >= 0.9999
        assert np.abs(ours - reference).max() < 1e-5


def test_batches_keep_to_the_token_budget():
    fast = Embedder()
    fast.load()
    seen: list[tuple[int, int]] = []
    forward = fast._fast._forward

    def spy(ids):
        seen.append((len(ids), max(len(i) for i in ids)))
        return forward(ids)

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
        "assert eng.stats().pending_embeddings == 0; "
        "hits = eng.recall('Which city is my sibling based in?'); assert any('Lisbon' in h.text and h.cosine for h in hits), hits; "
        "bad = [m for m in ('torch', 'sentence_transformers', 'transformers', 'scipy', 'sklearn') if m in sys.modules]; "
        "assert not bad, bad"
    )
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "home"), str(docs)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
