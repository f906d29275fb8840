"""The router against real HTTP servers that speak Ollama's and OpenAI's protocols.

The real `ollama` client and `httpx` do the talking; only the servers are stand-ins
(tests/ollama_server.py). Backoff sleeps are recorded instead of slept, so failures test fast.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import httpx
import ollama
import pytest
from pydantic import BaseModel

from engine.llm import (
    LLMBadOutput,
    LLMConfig,
    LLMError,
    LLMModelMissing,
    LLMRouter,
    LLMUnavailable,
    Message,
)
from tests.ollama_server import OllamaTestServer, OpenAITestServer, Reply

QUESTION = [
    Message(role="system", content="Answer briefly."),
    Message(role="user", content="What did I write about the garden?"),
]


class Note(BaseModel):
    title: str
    tags: list[str]


@pytest.fixture
def server() -> Iterator[OllamaTestServer]:
    with OllamaTestServer(models=["llama3.2", "nomic-embed-text"]) as s:
        yield s


@pytest.fixture
def openai_server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer(models=["qwen2.5-7b-instruct"], api_key="sk-local") as s:
        yield s


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def make_router(sleeps: list[float]) -> Iterator[Callable[..., LLMRouter]]:
    """Routers whose backoff sleeps are recorded, not slept; all closed after the test."""
    routers: list[LLMRouter] = []

    def make(url: str, **config: object) -> LLMRouter:
        router = LLMRouter(LLMConfig(host=url, **config), sleep=sleeps.append)  # type: ignore[arg-type]
        routers.append(router)
        return router

    yield make
    for router in routers:
        router.close()


@pytest.fixture
def router(server: OllamaTestServer, make_router: Callable[..., LLMRouter]) -> LLMRouter:
    return make_router(server.url)


@pytest.fixture
def openai_router(openai_server: OpenAITestServer, make_router: Callable[..., LLMRouter]) -> LLMRouter:
    return make_router(openai_server.url, provider="openai", model="qwen2.5-7b-instruct", api_key="sk-local")


def tags_requests(server: OllamaTestServer) -> int:
    return sum(1 for r in server.requests if r.path == "/api/tags")


# -- the stand-in server itself --------------------------------------------------------------------


def test_the_stand_in_speaks_ollama_to_the_official_client(server: OllamaTestServer) -> None:
    with ollama.Client(host=server.url) as client:
        assert [m.model for m in client.list().models] == ["llama3.2:latest", "nomic-embed-text:latest"]
        assert client.show("llama3.2").capabilities == ["completion", "tools"]
        vectors = client.embed(model="nomic-embed-text", input=["a", "b"]).embeddings
        assert len(vectors) == 2 and len(vectors[0]) == server.embedding_dim
        with pytest.raises(ollama.ResponseError) as caught:
            client.chat(model="mistral", messages=[{"role": "user", "content": "hi"}])
        assert caught.value.status_code == 404
        assert caught.value.error == 'model "mistral" not found, try pulling it first'
    assert httpx.get(f"{server.url}/api/version").json()["version"]
    assert server.requests[0].headers["user-agent"].startswith("ollama-python/")


# -- Ollama: answers -------------------------------------------------------------------------------


def test_stream_yields_tokens_in_order(server: OllamaTestServer, router: LLMRouter) -> None:
    server.script(Reply(tokens=["The ", "roses ", "need ", "water", "."]))
    assert list(router.stream(QUESTION)) == ["The ", "roses ", "need ", "water", "."]
    request = server.chat_requests[-1]
    assert request["stream"] is True
    assert request["model"] == "llama3.2"
    assert request["messages"] == [m.model_dump(include={"role", "content"}) for m in QUESTION]  # plain turns: no tool fields
    assert request["options"] == {"temperature": 0.0}


def test_complete_returns_the_whole_answer(server: OllamaTestServer, router: LLMRouter) -> None:
    server.script("You planted roses in May.")
    completion = router.complete(QUESTION, temperature=0.3)
    assert completion.text == "You planted roses in May."
    assert (completion.model, completion.provider, completion.parsed) == ("llama3.2", "ollama", None)
    request = server.chat_requests[-1]
    assert request["stream"] is False
    assert "format" not in request
    assert request["options"] == {"temperature": 0.3}


def test_structured_output_sends_the_schema_and_parses_the_answer(
    server: OllamaTestServer, router: LLMRouter
) -> None:
    server.script(Reply(json={"title": "Garden", "tags": ["roses", "spring"]}))
    completion = router.complete(QUESTION, Note)
    assert completion.parsed == Note(title="Garden", tags=["roses", "spring"])
    assert server.chat_requests[-1]["format"] == Note.model_json_schema()


def test_malformed_structured_answer_is_asked_for_once_more(
    server: OllamaTestServer, router: LLMRouter
) -> None:
    server.script("Sure! Here is the note: garden", Reply(json={"title": "Garden", "tags": []}))
    assert router.complete(QUESTION, Note).parsed == Note(title="Garden", tags=[])
    assert len(server.chat_requests) == 2


def test_malformed_structured_answer_twice_is_bad_output(server: OllamaTestServer, router: LLMRouter) -> None:
    server.script(Reply(text="{not json", times=1), Reply(json={"title": 3}))
    with pytest.raises(LLMBadOutput, match="does not fit the expected format"):
        router.complete(QUESTION, Note)
    assert len(server.chat_requests) == 2


# -- Ollama: failures ------------------------------------------------------------------------------


def test_server_errors_are_retried_with_backoff(
    server: OllamaTestServer, router: LLMRouter, sleeps: list[float]
) -> None:
    server.script(Reply(status=500, times=2), "Third time lucky.")
    assert router.complete(QUESTION).text == "Third time lucky."
    assert len(server.chat_requests) == 3
    assert sleeps == [0.5, 1.0]


def test_server_error_every_time_gives_up_after_three_attempts(
    server: OllamaTestServer, router: LLMRouter
) -> None:
    server.script(Reply(status=500, times=5))
    with pytest.raises(LLMError, match=r"HTTP 500: llama runner process has terminated") as caught:
        router.complete(QUESTION)
    assert type(caught.value) is LLMError
    assert len(server.chat_requests) == 3


def test_busy_server_is_retried_but_a_bad_request_is_not(server: OllamaTestServer, router: LLMRouter) -> None:
    server.script(Reply(status=429), "Done.")
    assert router.complete(QUESTION).text == "Done."
    assert len(server.chat_requests) == 2

    server.clear()
    server.script(Reply(status=400, error="invalid options"))
    with pytest.raises(LLMError, match=r"rejected the request \(HTTP 400: invalid options\)"):
        router.complete(QUESTION)
    assert len(server.chat_requests) == 1


def test_missing_model_names_the_fix(server: OllamaTestServer, make_router: Callable[..., LLMRouter]) -> None:
    router = make_router(server.url, model="mistral")
    with pytest.raises(LLMModelMissing, match="ollama pull mistral"):
        router.complete(QUESTION)
    assert len(server.chat_requests) == 1  # not retried
    with pytest.raises(LLMModelMissing):
        next(router.stream(QUESTION))


def test_server_down_is_unavailable_fast(make_router: Callable[..., LLMRouter]) -> None:
    with OllamaTestServer() as gone:
        url = gone.url
    router = make_router(url)
    started = time.monotonic()
    with pytest.raises(LLMUnavailable, match="ollama serve") as caught:
        router.complete(QUESTION)
    assert url in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    health = router.health()
    assert time.monotonic() - started < 2
    assert not health.ok and not router.available()
    assert health.detail == str(caught.value)


def test_timeouts_are_retried(
    server: OllamaTestServer, make_router: Callable[..., LLMRouter], sleeps: list[float]
) -> None:
    router = make_router(server.url, timeout=0.8)
    server.script(Reply(text="Too late.", delay=5), "In time.")
    assert router.complete(QUESTION).text == "In time."
    assert len(server.chat_requests) == 2
    assert sleeps == [0.5]


def test_timeouts_every_time_say_what_to_do(
    server: OllamaTestServer, make_router: Callable[..., LLMRouter]
) -> None:
    router = make_router(server.url, timeout=0.2, max_retries=2)
    server.script(Reply(text="Too late.", delay=3, times=2))
    with pytest.raises(LLMError, match="did not answer within 0.2 seconds"):
        router.complete(QUESTION)
    assert len(server.chat_requests) == 2


def test_stream_failing_before_the_first_token_is_retried(
    server: OllamaTestServer, router: LLMRouter
) -> None:
    server.script(Reply(status=503), Reply(text="Fine now."))
    assert "".join(router.stream(QUESTION)) == "Fine now."
    assert len(server.chat_requests) == 2


def test_stream_broken_midway_raises_after_the_pieces_already_given(
    server: OllamaTestServer, router: LLMRouter
) -> None:
    server.script(Reply(tokens=["One ", "two ", "three"], drop_after=2))
    received: list[str] = []
    with pytest.raises(LLMError, match="connection to Ollama"):
        for piece in router.stream(QUESTION):
            received.append(piece)
    assert received == ["One ", "two "]
    assert len(server.chat_requests) == 1


def test_stream_error_line_becomes_an_llm_error(server: OllamaTestServer, router: LLMRouter) -> None:
    server.script(Reply(tokens=["Partial"], error="model runner crashed"))
    with pytest.raises(LLMError, match="Ollama stopped with an error: model runner crashed"):
        list(router.stream(QUESTION))


def test_abandoned_stream_releases_the_connection(server: OllamaTestServer, router: LLMRouter) -> None:
    server.script(Reply(tokens=["a", "b", "c"]), "Next answer.")
    pieces = router.stream(QUESTION)
    assert next(pieces) == "a"
    pieces.close()
    assert router.complete(QUESTION).text == "Next answer."


def test_wrong_kind_of_server_is_explained(make_router: Callable[..., LLMRouter]) -> None:
    with OpenAITestServer() as not_ollama:
        health = make_router(not_ollama.url).health()
    assert not health.ok
    assert "cannot read" in health.detail and "right kind of server" in health.detail


def test_prompts_and_answers_never_reach_the_log(
    server: OllamaTestServer, router: LLMRouter, caplog: pytest.LogCaptureFixture
) -> None:
    secret_prompt = [Message(role="user", content="my bank PIN is 4921")]
    server.script(Reply(status=500), "Your PIN is 4921", Reply(tokens=["PIN ", "4921"]))
    with caplog.at_level(logging.DEBUG):
        router.complete(secret_prompt)
        list(router.stream(secret_prompt))
        router.health()
    assert caplog.records, "the router should log what it does"
    assert all("4921" not in record.getMessage() for record in caplog.records)


# -- Ollama: health --------------------------------------------------------------------------------


def test_health_is_checked_once_and_cached(server: OllamaTestServer, router: LLMRouter) -> None:
    health = router.health()
    assert health.ok and router.available()
    assert health.models == ("llama3.2:latest", "nomic-embed-text:latest")
    assert server.url in health.detail
    assert tags_requests(server) == 1
    router.health()
    router.available()
    assert tags_requests(server) == 1
    router.health(refresh=True)
    assert tags_requests(server) == 2


def test_failed_health_is_rechecked_after_a_short_while(server: OllamaTestServer) -> None:
    now = [1000.0]
    server.set_models([])
    with LLMRouter(LLMConfig(host=server.url), clock=lambda: now[0]) as router:
        health = router.health()
        assert not health.ok
        assert "ollama pull llama3.2" in health.detail
        server.set_models(["llama3.2"])
        now[0] += 10
        assert not router.available()  # still cached
        assert tags_requests(server) == 1
        now[0] += 30
        assert router.available()
        assert tags_requests(server) == 2


def test_a_request_that_finds_the_model_gone_forgets_good_health(
    server: OllamaTestServer, router: LLMRouter
) -> None:
    assert router.available()
    server.set_models([])
    with pytest.raises(LLMModelMissing):
        router.complete(QUESTION)
    assert not router.available()
    assert tags_requests(server) == 2


def test_a_successful_request_forgets_failed_health(server: OllamaTestServer, router: LLMRouter) -> None:
    server.set_models([])
    assert not router.available()
    server.set_models(["llama3.2"])
    router.complete(QUESTION)
    assert router.available()


# -- OpenAI-compatible servers ---------------------------------------------------------------------


def test_openai_stream(openai_server: OpenAITestServer, openai_router: LLMRouter) -> None:
    openai_server.script(Reply(tokens=["Roses ", "in ", "May", "."]))
    assert list(openai_router.stream(QUESTION)) == ["Roses ", "in ", "May", "."]
    request = openai_server.chat_requests[-1]
    assert request["stream"] is True
    assert request["model"] == "qwen2.5-7b-instruct"
    assert request["messages"] == [m.model_dump(include={"role", "content"}) for m in QUESTION]  # plain turns: no tool fields
    assert openai_server.requests[-1].headers["authorization"] == "Bearer sk-local"


def test_openai_complete(openai_server: OpenAITestServer, openai_router: LLMRouter) -> None:
    openai_server.script("You planted roses in May.")
    completion = openai_router.complete(QUESTION, temperature=0.5)
    assert (completion.text, completion.provider) == ("You planted roses in May.", "openai")
    request = openai_server.chat_requests[-1]
    assert (request["stream"], request["temperature"]) == (False, 0.5)
    assert "response_format" not in request


def test_openai_structured_output(openai_server: OpenAITestServer, openai_router: LLMRouter) -> None:
    openai_server.script(Reply(json={"title": "Garden", "tags": ["roses"]}))
    assert openai_router.complete(QUESTION, Note).parsed == Note(title="Garden", tags=["roses"])
    assert openai_server.chat_requests[-1]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Note", "schema": Note.model_json_schema()},
    }


def test_openai_json_in_a_code_fence_is_accepted(
    openai_server: OpenAITestServer, openai_router: LLMRouter
) -> None:
    openai_server.script('```json\n{"title": "Garden", "tags": []}\n```')
    assert openai_router.complete(QUESTION, Note).parsed == Note(title="Garden", tags=[])


def test_openai_retries_server_errors(
    openai_server: OpenAITestServer, openai_router: LLMRouter, sleeps: list[float]
) -> None:
    openai_server.script(Reply(status=503, times=2), "Back.")
    assert openai_router.complete(QUESTION).text == "Back."
    assert len(openai_server.chat_requests) == 3
    assert sleeps == [0.5, 1.0]


def test_openai_wrong_key_is_not_retried(
    openai_server: OpenAITestServer, make_router: Callable[..., LLMRouter]
) -> None:
    router = make_router(openai_server.url, provider="openai", model="qwen2.5-7b-instruct", api_key="wrong")
    with pytest.raises(LLMError, match=r"HTTP 401: Invalid API Key\). Check the API key"):
        router.complete(QUESTION)
    assert len(openai_server.requests) == 1


def test_openai_health_and_missing_model(
    openai_server: OpenAITestServer, make_router: Callable[..., LLMRouter]
) -> None:
    good = make_router(
        f"{openai_server.url}/v1/", provider="openai", model="qwen2.5-7b-instruct", api_key="sk-local"
    )
    health = good.health()
    assert health.ok and health.models == ("qwen2.5-7b-instruct",)

    missing = make_router(openai_server.url, provider="openai", model="llama3.2", api_key="sk-local")
    assert not missing.available()
    assert "does not offer the model 'llama3.2'" in missing.health().detail
    with pytest.raises(LLMModelMissing):
        missing.complete(QUESTION)


def test_openai_stream_error_event_and_broken_stream(
    openai_server: OpenAITestServer, openai_router: LLMRouter
) -> None:
    openai_server.script(Reply(tokens=["Half"], error="context length exceeded"))
    with pytest.raises(LLMError, match="stopped with an error: context length exceeded"):
        list(openai_router.stream(QUESTION))

    openai_server.script(Reply(tokens=["a", "b", "c"], drop_after=1))
    received: list[str] = []
    with pytest.raises(LLMError, match="connection to"):
        for piece in openai_router.stream(QUESTION):
            received.append(piece)
    assert received == ["a"]
