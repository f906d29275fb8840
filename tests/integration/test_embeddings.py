"""The numpy runtime gives the same vectors as sentence-transformers, and small calls never import torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from engine.embeddings import SMALL_BATCH, Embedder, _sentence_transformer

TEXTS = [
    "My sister Alice lives in Lisbon.",
    "Which city is my sibling based in?",
    "Café déjà vu — naïve façade, 東京 and emoji 🙂 in one line.",
    "word " * 400,  # longer than the model's 256 word-pieces: truncated the same way
    "",
] + [f"Note {i}: the {w} is in drawer {i}." for i, w in enumerate(["stapler", "passport", "charger"] * 4)]


def test_numpy_runtime_matches_sentence_transformers():
    fast = Embedder()
    fast.load()
    ours = fast._fast.encode(TEXTS)
    reference = _sentence_transformer(fast._model_dir()).encode(
        TEXTS, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    assert ours.shape == reference.shape == (len(TEXTS), 384)
    assert np.abs(ours - reference).max() < 1e-5
    assert (ours * reference).sum(1).min() > 0.99999
    big = fast.encode(TEXTS)  # more than SMALL_BATCH: sentence-transformers itself
    assert len(TEXTS) > SMALL_BATCH and np.abs(big - reference).max() < 1e-6


def test_a_query_needs_no_torch():
    code = ("import sys; from engine.embeddings import Embedder; e = Embedder(); e.load(); "
            "v = e.encode_one('hello there'); assert v.shape == (384,); "
            "assert 'torch' not in sys.modules and 'sentence_transformers' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_capturing_a_long_note_needs_no_torch(tmp_path):
    code = (
        "import sys, os; from pathlib import Path; from engine import Engine; "
        "os.environ['PERSONAL_LLM_PASSPHRASE'] = 'pw'; "
        "eng = Engine.open(Path(sys.argv[1])); "
        "text = ' '.join(f'Paragraph {i} says the item number {i} is kept in box {i % 9}.' for i in range(150)); "
        "eng.remember(text, embed='sync'); "
        "n = eng.con.execute('SELECT count(*) FROM memory_windows').fetchone()[0]; assert n > 8, n; "
        "assert 'torch' not in sys.modules and 'sentence_transformers' not in sys.modules, 'torch imported'"
    )
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "home")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
