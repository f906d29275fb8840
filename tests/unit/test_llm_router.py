"""The router's own rules: configuration, the "none" provider, errors, the retry schedule."""

from __future__ import annotations

import socket
import time

import pytest
from pydantic import ValidationError

from engine.config import LLMSettings
from engine.errors import EngineError, UserError
from engine.llm import (
    LLMBadOutput,
    LLMConfig,
    LLMError,
    LLMModelMissing,
    LLMRouter,
    LLMUnavailable,
    Message,
)

HELLO = [Message(role="user", content="Hello")]


def closed_port_url() -> str:
    """An address where nothing listens: connections are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_config_defaults_to_local_ollama(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    config = LLMConfig()
    assert (config.provider, config.model, config.timeout, config.max_retries) == (
        "ollama",
        "llama3.2",
        60.0,
        3,
    )
    assert config.base_url == "http://127.0.0.1:11434"


def test_config_host_comes_from_settings_then_ollama_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "10.0.0.5:11434")
    assert LLMConfig().base_url == "http://10.0.0.5:11434"
    assert LLMConfig(host="https://ollama.example/").base_url == "https://ollama.example"
    assert LLMConfig(provider="openai").base_url == "http://127.0.0.1:8080"  # OLLAMA_HOST is Ollama's


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("0.0.0.0", "http://127.0.0.1:11434"),  # a common OLLAMA_HOST: the server binds everywhere
        ("0.0.0.0:9000", "http://127.0.0.1:9000"),
        ("gpu-box", "http://gpu-box:11434"),
        ("gpu-box:80/ollama/", "http://gpu-box:80/ollama"),
        ("[::1]", "http://[::1]:11434"),
        ("http://gpu-box", "http://gpu-box"),
    ],
)
def test_bare_hosts_read_like_ollama_reads_them(monkeypatch: pytest.MonkeyPatch, host: str, url: str) -> None:
    monkeypatch.setenv("OLLAMA_HOST", host)
    assert LLMConfig().base_url == url
    assert LLMConfig(provider="openai", host=host).base_url == url.replace(":11434", ":8080")


def test_config_reads_the_user_settings_and_hides_the_key() -> None:
    settings = LLMSettings(provider="openai", host="http://localhost:1234", model="qwen", api_key="sk-secret")
    config = LLMConfig.model_validate(settings.model_dump())
    assert (config.provider, config.base_url, config.model) == ("openai", "http://localhost:1234", "qwen")
    assert "sk-secret" not in repr(config)


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValidationError):
        LLMConfig(model="")
    with pytest.raises(ValidationError):
        LLMConfig(max_retries=0)
    with pytest.raises(ValidationError):
        LLMConfig(timeout=0)


def test_messages_have_known_roles() -> None:
    with pytest.raises(ValidationError):
        Message(role="function", content="x")  # type: ignore[arg-type]
    assert Message(role="tool", content="x", tool_call_id="call_1", name="today").role == "tool"  # a tool's result


def test_every_llm_error_is_a_user_error() -> None:
    for error in (LLMError, LLMUnavailable, LLMModelMissing, LLMBadOutput):
        assert issubclass(error, LLMError)
        assert issubclass(error, UserError)
        assert issubclass(error, EngineError)


def test_provider_none_is_never_available() -> None:
    with LLMRouter(LLMConfig(provider="none")) as router:
        assert router.available() is False
        health = router.health()
        assert not health.ok
        assert "No language model is configured" in health.detail
        with pytest.raises(LLMUnavailable, match="No language model is configured"):
            router.complete(HELLO)
        with pytest.raises(LLMUnavailable):
            next(router.stream(HELLO))


def test_refused_connections_back_off_exponentially_then_report_unavailable() -> None:
    url = closed_port_url()
    sleeps: list[float] = []
    with LLMRouter(LLMConfig(host=url), sleep=sleeps.append) as router:
        with pytest.raises(LLMUnavailable) as caught:
            router.complete(HELLO)
    assert sleeps == [0.5, 1.0]  # 3 attempts, the default schedule
    assert url in str(caught.value)
    assert "ollama serve" in str(caught.value)


def test_backoff_and_attempts_are_configurable() -> None:
    sleeps: list[float] = []
    config = LLMConfig(host=closed_port_url(), max_retries=4, backoff=0.1)
    with LLMRouter(config, sleep=sleeps.append) as router, pytest.raises(LLMUnavailable):
        router.complete(HELLO)
    assert sleeps == pytest.approx([0.1, 0.2, 0.4])

    sleeps.clear()
    with LLMRouter(config.model_copy(update={"max_retries": 1}), sleep=sleeps.append) as router:
        with pytest.raises(LLMUnavailable):
            router.complete(HELLO)
    assert sleeps == []


def test_server_down_is_reported_quickly_by_health() -> None:
    url = closed_port_url()
    with LLMRouter(LLMConfig(host=url)) as router:
        started = time.monotonic()
        health = router.health()
        assert time.monotonic() - started < 2
    assert not health.ok
    assert health.detail.startswith(f"Ollama is not running at {url}")


def test_unavailable_openai_server_names_the_address() -> None:
    url = closed_port_url()
    with LLMRouter(LLMConfig(provider="openai", host=url), sleep=lambda _s: None) as router:
        with pytest.raises(LLMUnavailable, match="No language model server is answering at"):
            router.complete(HELLO)
        assert not router.available()
