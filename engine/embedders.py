"""Which embedder an `embedding_model` setting means: words only, the bundled model or a local folder
(engine/embeddings.py), or a model of the user's Ollama (engine/ollama_embeddings.py)."""

from __future__ import annotations

from typing import Any

from .embeddings import Embedder, NoEmbedder
from .ollama_embeddings import OllamaEmbedder


def make_embedder(choice: str, llm: Any = None) -> Embedder:
    """The embedder for an `embedding_model` setting. `llm` (the settings' `llm` section, or a function that
    gives it: only an Ollama model reads it) says where Ollama is: its host when the language model is
    Ollama's too, else $OLLAMA_HOST or 127.0.0.1:11434."""
    if choice == "none":
        return NoEmbedder()
    if choice.lower().startswith("ollama:"):
        from .llm import LLMConfig

        if callable(llm):
            llm = llm()
        same = llm is not None and llm.provider == "ollama"
        config = LLMConfig(provider="ollama", host=llm.host if same else None)
        return OllamaEmbedder(choice, host=config.base_url, api_key=llm.api_key if same else None,
                              timeout=float(llm.timeout) if same else 60.0)
    return Embedder(choice)
