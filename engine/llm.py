"""The language-model router: the one place that talks to a model server.

Two providers: a local Ollama (through the official `ollama` client) and any OpenAI-compatible server
(llama.cpp's server, LM Studio, vLLM; through plain `httpx`). Transient failures (HTTP 429/5xx, refused
connections, timeouts) are retried with exponential backoff; structured answers are validated with
pydantic and asked for once more when malformed. Every failure surfaces as an `LLMError` (a
`UserError`) whose text tells a person what to do; no client exception escapes raw.

Privacy: prompts and answers are never logged, only provider, model, status codes, attempts, timings.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import UserError
from .lazy import lazy_module

if TYPE_CHECKING:
    import httpx
    import ollama
else:  # imported when a model server is first asked something (see engine/lazy.py)
    httpx = lazy_module("httpx")
    ollama = lazy_module("ollama")

log = logging.getLogger(__name__)

DEFAULT_OLLAMA_PORT = 11434
DEFAULT_OPENAI_PORT = 8080  # llama.cpp's server
HEALTH_OK_TTL = 300.0  # a healthy server is rechecked rarely; a failed request forgets it at once
HEALTH_FAILED_TTL = 30.0  # so that starting Ollama after the app is noticed soon
CONNECT_TIMEOUT = 5.0  # an unreachable host fails fast even when answers may take a minute
_DETAIL_CHARS = 300

T = TypeVar("T")


# -- errors ----------------------------------------------------------------------------------------


class LLMError(UserError):
    """The language model could not give an answer. The root of every error in this module."""


class LLMUnavailable(LLMError):
    """No model server answers at the configured address, or no provider is configured."""


class LLMModelMissing(LLMError):
    """The server runs, but the configured model is not installed or offered there."""


class LLMBadOutput(LLMError):
    """The model's answer does not fit the requested structure, even when asked twice."""


class _Transient(Exception):
    """A failure worth retrying. Carries the error to raise when the attempts run out."""

    def __init__(self, error: LLMError, reason: str) -> None:
        super().__init__(reason)
        self.error = error
        self.reason = reason  # for the log: a status code or an exception name, never content


# -- data ------------------------------------------------------------------------------------------


class ToolCall(BaseModel):
    """A tool the model asks to run. `invalid` says why the arguments could not be read (then `arguments`
    is empty): the caller tells the model, it is not an error of the server."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    invalid: str | None = None


class ToolSpec(BaseModel):
    """A tool offered to the model: its name, what it does and its arguments (a JSON schema)."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]


class Message(BaseModel):
    """One turn of a conversation. An assistant turn may carry `tool_calls`; a `tool` turn is the result of
    one call (`tool_call_id`, `name`)."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


class ToolTurn(BaseModel):
    """One answer of a model offered tools: its text and the tools it asks to run (maybe none)."""

    text: str
    tool_calls: list[ToolCall] = Field(default_factory=list)
    model: str
    provider: str


TurnEvent = tuple[Literal["text"], str] | tuple[Literal["call"], ToolCall]


class Completion(BaseModel):
    """A whole answer: its text, who wrote it and, when a schema was given, the validated object."""

    text: str
    model: str
    provider: str
    parsed: Any | None = None


class Health(BaseModel):
    """Whether the configured model can answer now; `detail` is written for people."""

    ok: bool
    provider: str
    model: str
    detail: str
    models: tuple[str, ...] = ()  # what the server offers, for a settings picker (may be empty)


class LLMConfig(BaseModel):
    """Which model to use and how patiently. Field names match `engine.config.LLMSettings`."""

    model_config = ConfigDict(frozen=True)

    provider: Literal["ollama", "openai", "none"] = "ollama"
    host: str | None = None  # None: $OLLAMA_HOST or http://127.0.0.1:11434 (ollama), :8080 (openai)
    model: str = Field(default="llama3.2", min_length=1)
    api_key: str | None = Field(default=None, repr=False)
    timeout: float = Field(default=60.0, gt=0)  # seconds to wait for the server to answer (each read)
    max_retries: int = Field(default=3, ge=1)  # attempts per request in total, the first one included
    backoff: float = Field(default=0.5, ge=0)  # seconds before the 2nd attempt; doubles for each next one

    @property
    def base_url(self) -> str:
        """The server address in use, with defaults applied and no trailing slash."""
        port = DEFAULT_OPENAI_PORT if self.provider == "openai" else DEFAULT_OLLAMA_PORT
        host = self.host or (os.environ.get("OLLAMA_HOST") if self.provider == "ollama" else None)
        return _as_url(host or "127.0.0.1", port)


_PORT = re.compile(r":\d+$")
_BIND_ALL = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}  # a server's "every interface" is "this machine"


def _as_url(host: str, default_port: int) -> str:
    """Read `host`, `host:port` or a URL the way Ollama's client reads OLLAMA_HOST: without a scheme,
    http and the provider's port are implied. A bind-all address (0.0.0.0) means this machine."""
    scheme, sep, rest = host.strip().rstrip("/").partition("://")
    if not sep:
        scheme, rest = "http", scheme
    address, slash, path = rest.partition("/")
    if match := _PORT.search(address):
        name, port = address[: match.start()], match.group()
    else:
        name, port = address, "" if sep else f":{default_port}"
    return f"{scheme}://{_BIND_ALL.get(name, name)}{port}{slash}{path}"


def host_problem(host: str | None, provider: str = "ollama") -> str | None:
    """Why `host` (llm.host: host, host:port or a URL) names no http(s) server, as a sentence; None if it
    does (or is unset: the default). Checked before it is saved, so that a typo is refused there and then
    instead of every answer saying "Ollama is not running at http://not a url:11434"."""
    if host is None or not host.strip():
        return None
    url = LLMConfig(provider="openai" if provider == "openai" else "ollama", host=host).base_url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError when out of range or not a number
    except ValueError:
        parts = None
    if parts is not None and parts.scheme in ("http", "https") and re.fullmatch(r"[\w.:%-]+", parts.hostname or ""):
        return None
    return (f"'{host.strip()}' is not a server address: give host:port or a URL such as http://127.0.0.1:11434. "
            "Nothing was changed.")


# -- providers -------------------------------------------------------------------------------------


def _http_timeout(config: LLMConfig) -> httpx.Timeout:
    return httpx.Timeout(config.timeout, connect=min(CONNECT_TIMEOUT, config.timeout))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"


class _Backend(ABC):
    """What the router needs from a provider. Methods raise `_Transient` or `LLMError` only."""

    name: str  # "ollama" / "openai"
    label: str  # how messages name the server, mid-sentence

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.host = config.base_url

    @abstractmethod
    def chat(self, messages: Sequence[Message], schema: dict[str, Any] | None, temperature: float) -> str:
        """The whole answer; with `schema` (a JSON schema), constrained to it."""

    @abstractmethod
    def stream(self, messages: Sequence[Message], temperature: float) -> Generator[str, None, None]:
        """The answer in non-empty pieces."""

    @abstractmethod
    def stream_tools(self, messages: Sequence[Message], tools: Sequence[ToolSpec],
                     temperature: float) -> Generator[TurnEvent, None, None]:
        """The answer of a model offered `tools`: text pieces and tool calls, as they arrive."""

    @abstractmethod
    def list_models(self) -> list[str]:
        """The models the server offers."""

    @abstractmethod
    def close(self) -> None:
        """Release the connections."""

    @abstractmethod
    def unavailable(self) -> LLMUnavailable:
        """The error for a server that does not answer at all."""

    @abstractmethod
    def model_missing(self) -> LLMModelMissing:
        """The error for a configured model the server does not have."""

    @property
    def subject(self) -> str:
        """The label at the start of a sentence."""
        return self.label[:1].upper() + self.label[1:]

    def has_model(self, models: Sequence[str]) -> bool:
        return self.config.model in models

    def unreadable(self) -> LLMError:
        return LLMError(
            f"{self.subject} at {self.host} sent a reply this app cannot read. Is it the right kind of "
            "server for the provider chosen in settings?"
        )

    def from_status(self, status: int, detail: str) -> Exception:
        """The error (transient or final) for an HTTP error status."""
        detail = _short(detail) or "no details"
        if status == 429 or status >= 500:
            verb = "is busy" if status == 429 else "failed to answer"
            return _Transient(
                LLMError(f"{self.subject} {verb} (HTTP {status}: {detail}). Try again in a moment."),
                f"HTTP {status}",
            )
        if status in (401, 403):
            return LLMError(
                f"{self.subject} at {self.host} refused the request (HTTP {status}: {detail}). "
                "Check the API key in settings."
            )
        return LLMError(f"{self.subject} rejected the request (HTTP {status}: {detail}).")

    @contextmanager
    def transport_errors(self) -> Iterator[None]:
        """Turn connection trouble and unreadable replies into our errors."""
        try:
            yield
        except (ConnectionError, httpx.ConnectError, httpx.ConnectTimeout) as e:
            raise _Transient(self.unavailable(), type(e).__name__) from None
        except httpx.TimeoutException as e:
            error = LLMError(
                f"{self.subject} did not answer within {self.config.timeout:g} seconds. The model may still "
                "be loading: try again, or allow more time in settings."
            )
            raise _Transient(error, type(e).__name__) from None
        except httpx.TransportError as e:
            error = LLMError(f"The connection to {self.label} at {self.host} broke. Try again.")
            raise _Transient(error, type(e).__name__) from None
        except (httpx.HTTPError, ollama.RequestError, ValueError) as e:  # ValueError: bad JSON, bad shape
            log.warning("llm %s: unreadable reply (%s)", self.name, type(e).__name__)
            raise self.unreadable() from None


class _OllamaBackend(_Backend):
    name = "ollama"
    label = "Ollama"

    def __init__(self, config: LLMConfig) -> None:
        super().__init__(config)
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else None
        self._client = ollama.Client(host=self.host, timeout=_http_timeout(config), headers=headers)

    def close(self) -> None:
        self._client.close()

    def unavailable(self) -> LLMUnavailable:
        return LLMUnavailable(
            f"Ollama is not running at {self.host}: start it with `ollama serve`, "
            "or choose another provider in settings."
        )

    def model_missing(self) -> LLMModelMissing:
        model = self.config.model
        return LLMModelMissing(
            f"The model '{model}' is not installed in Ollama: run `ollama pull {model}`, "
            "or choose another model in settings."
        )

    @staticmethod
    def _canonical(name: str) -> str:
        """Ollama's full name: `llama3.2` is `llama3.2:latest`."""
        return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"

    def has_model(self, models: Sequence[str]) -> bool:
        return self._canonical(self.config.model) in {self._canonical(m) for m in models}

    @contextmanager
    def _errors(self, *, names_model: bool = True) -> Iterator[None]:
        """Map the client's exceptions; `names_model`: a 404 here means the model is missing."""
        try:
            with self.transport_errors():
                yield
        except ollama.ResponseError as e:
            message = str(e.error).lower()
            if e.status_code == 404 and names_model and "model" in message and "not found" in message:
                raise self.model_missing() from None
            if e.status_code == 404:
                raise self.unreadable() from None
            if e.status_code == -1:  # an error line in the middle of a streamed answer
                raise LLMError(f"Ollama stopped with an error: {_short(str(e.error))}") from None
            raise self.from_status(e.status_code, str(e.error)) from None

    @staticmethod
    def _wire(m: Message) -> dict[str, Any]:
        """A message as Ollama reads it: tool calls with their arguments as an object, a tool result
        named by `tool_name`."""
        out: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            out["tool_calls"] = [{"function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls]
        if m.role == "tool" and m.name:
            out["tool_name"] = m.name
        return out

    def _request(self, messages: Sequence[Message], temperature: float) -> dict[str, Any]:
        return {
            "model": self.config.model,
            "messages": [self._wire(m) for m in messages],
            "options": {"temperature": temperature},
        }

    def chat(self, messages: Sequence[Message], schema: dict[str, Any] | None, temperature: float) -> str:
        with self._errors():
            reply = self._client.chat(**self._request(messages, temperature), format=schema, stream=False)
            return reply.message.content or ""

    def stream(self, messages: Sequence[Message], temperature: float) -> Generator[str, None, None]:
        with self._errors():
            for part in self._client.chat(**self._request(messages, temperature), stream=True):
                if part.message.content:
                    yield part.message.content

    def stream_tools(self, messages: Sequence[Message], tools: Sequence[ToolSpec],
                     temperature: float) -> Generator[TurnEvent, None, None]:
        offered = [{"type": "function", "function": t.model_dump()} for t in tools]
        count = 0
        with self._errors():
            for part in self._client.chat(**self._request(messages, temperature), tools=offered or None,
                                          stream=True):
                if part.message.content:
                    yield "text", part.message.content
                for call in part.message.tool_calls or ():
                    count += 1
                    arguments = call.function.arguments
                    if isinstance(arguments, dict):
                        yield "call", ToolCall(id=f"call_{count}", name=call.function.name,
                                               arguments=dict(arguments))
                    else:
                        yield "call", ToolCall(id=f"call_{count}", name=call.function.name,
                                               invalid="the arguments are not a JSON object")

    def list_models(self) -> list[str]:
        with self._errors(names_model=False):
            return [m.model for m in self._client.list().models if m.model]


class _OpenAIBackend(_Backend):
    name = "openai"
    label = "the language model server"

    def __init__(self, config: LLMConfig) -> None:
        super().__init__(config)
        self.host = self.host.removesuffix("/v1")  # accept both http://host:port and http://host:port/v1
        headers = {"Accept": "application/json"}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self._client = httpx.Client(base_url=self.host, timeout=_http_timeout(config), headers=headers)

    def close(self) -> None:
        self._client.close()

    def unavailable(self) -> LLMUnavailable:
        return LLMUnavailable(
            f"No language model server is answering at {self.host}: start it (llama.cpp server, "
            "LM Studio, vLLM...), or choose another provider in settings."
        )

    def model_missing(self) -> LLMModelMissing:
        return LLMModelMissing(
            f"The server at {self.host} does not offer the model '{self.config.model}': load it there, "
            "or choose another model in settings."
        )

    @contextmanager
    def _errors(self) -> Iterator[None]:
        with self.transport_errors():
            yield

    @staticmethod
    def _detail(response: httpx.Response) -> str:
        """The error message from an OpenAI-style, vLLM-style or plain body."""
        try:
            body = response.json()
        except ValueError:
            return response.text
        if isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict):
                return str(error.get("message") or error)
            return str(error or body.get("message") or body.get("detail") or body)
        return str(body)

    def _check(self, response: httpx.Response) -> None:
        if response.is_success:
            return
        response.read()
        detail = self._detail(response)
        if response.status_code == 404 and "model" in detail.lower():
            raise self.model_missing()
        if response.status_code == 404:
            raise LLMError(f"There is no OpenAI-compatible API at {self.host} (HTTP 404). Check the address.")
        raise self.from_status(response.status_code, detail)

    @staticmethod
    def _wire(m: Message) -> dict[str, Any]:
        """A message as the OpenAI API reads it: tool calls with their arguments as a JSON string, a tool
        result answering its call by id."""
        out: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            out["content"] = m.content or None
            out["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                                 for c in m.tool_calls]
        if m.role == "tool":
            out["tool_call_id"] = m.tool_call_id
        return out

    def _request(
        self,
        messages: Sequence[Message],
        temperature: float,
        *,
        stream: bool,
        schema: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": [self._wire(m) for m in messages],
            "temperature": temperature,
            "stream": stream,
        }
        if schema is not None:
            name = str(schema.get("title") or "answer")
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
        return body

    def chat(self, messages: Sequence[Message], schema: dict[str, Any] | None, temperature: float) -> str:
        with self._errors():
            response = self._client.post(
                "/v1/chat/completions", json=self._request(messages, temperature, stream=False, schema=schema)
            )
            self._check(response)
            data = response.json()
        try:
            content = data["choices"][0]["message"].get("content")
        except (LookupError, TypeError, AttributeError):
            raise self.unreadable() from None
        if content is not None and not isinstance(content, str):
            raise self.unreadable()
        return content or ""

    def stream(self, messages: Sequence[Message], temperature: float) -> Generator[str, None, None]:
        body = self._request(messages, temperature, stream=True)
        with self._errors(), self._client.stream("POST", "/v1/chat/completions", json=body) as response:
            self._check(response)
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators, comments, event names
                data = line.removeprefix("data:").strip()
                if data == "[DONE]":
                    return
                chunk = json.loads(data)
                if not isinstance(chunk, dict):
                    raise self.unreadable()
                if chunk.get("error"):
                    error = chunk["error"]
                    message = error.get("message") if isinstance(error, dict) else error
                    raise LLMError(f"{self.subject} stopped with an error: {_short(str(message))}")
                for choice in chunk.get("choices") or ():
                    piece = choice.get("delta", {}).get("content") if isinstance(choice, dict) else None
                    if isinstance(piece, str) and piece:
                        yield piece

    def stream_tools(self, messages: Sequence[Message], tools: Sequence[ToolSpec],
                     temperature: float) -> Generator[TurnEvent, None, None]:
        body = self._request(messages, temperature, stream=True)
        if tools:
            body["tools"] = [{"type": "function", "function": t.model_dump()} for t in tools]
        calls: dict[int, dict[str, str]] = {}  # by index: id, name, the arguments' JSON as it arrives
        with self._errors(), self._client.stream("POST", "/v1/chat/completions", json=body) as response:
            self._check(response)
            for chunk in self._chunks(response):
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") if isinstance(choice, dict) else None
                    if not isinstance(delta, dict):
                        continue
                    piece = delta.get("content")
                    if isinstance(piece, str) and piece:
                        yield "text", piece
                    for part in delta.get("tool_calls") or ():
                        if not isinstance(part, dict):
                            raise self.unreadable()
                        call = calls.setdefault(int(part.get("index") or 0), {"id": "", "name": "", "arguments": ""})
                        function = part.get("function") or {}
                        call["id"] = part.get("id") or call["id"]
                        call["name"] += function.get("name") or ""
                        call["arguments"] += function.get("arguments") or ""
        for index, call in sorted(calls.items()):
            uid = call["id"] or f"call_{index + 1}"
            try:
                arguments = json.loads(call["arguments"] or "{}")
            except ValueError:
                arguments = None
            if isinstance(arguments, dict):
                yield "call", ToolCall(id=uid, name=call["name"], arguments=arguments)
            else:
                yield "call", ToolCall(id=uid, name=call["name"], invalid="the arguments are not a JSON object")

    def _chunks(self, response: httpx.Response) -> Iterator[dict[str, Any]]:
        """The JSON chunks of a streamed answer, until `[DONE]`; an error event raises."""
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line.removeprefix("data:").strip()
            if data == "[DONE]":
                return
            chunk = json.loads(data)
            if not isinstance(chunk, dict):
                raise self.unreadable()
            if chunk.get("error"):
                error = chunk["error"]
                message = error.get("message") if isinstance(error, dict) else error
                raise LLMError(f"{self.subject} stopped with an error: {_short(str(message))}")
            yield chunk

    def list_models(self) -> list[str]:
        with self._errors():
            response = self._client.get("/v1/models")
            self._check(response)
            data = response.json()
        try:
            return [str(m["id"]) for m in data.get("data") or ()]
        except (LookupError, TypeError, AttributeError):
            raise self.unreadable() from None


# -- the router ------------------------------------------------------------------------------------


NO_PROVIDER = (
    "No language model is configured. Choose Ollama or an OpenAI-compatible server in settings to get "
    "answers written for you."
)
BAD_OUTPUT = (
    "The language model returned an answer that does not fit the expected format (twice). Try another model."
)


class LLMRouter:
    """Sends conversations to the configured model; thread-safe; close it (or use `with`) when done.

    `sleep` and `clock` exist for tests (backoff and health-cache timing).
    """

    def __init__(
        self,
        config: LLMConfig | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or LLMConfig()
        self._sleep = sleep
        self._clock = clock
        self._lock = threading.Lock()
        self._health: Health | None = None
        self._health_until = 0.0
        backends: dict[str, type[_Backend]] = {"ollama": _OllamaBackend, "openai": _OpenAIBackend}
        backend_type = backends.get(self.config.provider)
        self._backend = backend_type(self.config) if backend_type else None
        # The connections go when the last call holding this router returns (or at close()): a settings
        # change drops the router while another thread may still be asking through it.
        self._release = weakref.finalize(self, self._backend.close) if self._backend is not None else None

    def __enter__(self) -> LLMRouter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the HTTP connections now (only when no call uses this router any more)."""
        if self._release is not None:
            self._release()

    # -- answers -----------------------------------------------------------------------------------

    def complete(
        self,
        messages: Sequence[Message],
        schema: type[BaseModel] | None = None,
        *,
        temperature: float = 0.0,
    ) -> Completion:
        """The model's whole answer. With `schema`, the answer is constrained to it and `parsed` holds
        the validated instance; a malformed answer is asked for once more, then `LLMBadOutput`."""
        backend = self._require_backend()
        json_schema = schema.model_json_schema() if schema is not None else None
        for attempt in (1, 2):
            started = self._clock()
            text = self._call(lambda: backend.chat(messages, json_schema, temperature), "complete")
            log.info("llm %s/%s answered in %.2fs", backend.name, self.config.model, self._clock() - started)
            if schema is None:
                return self._completion(text)
            try:
                parsed = schema.model_validate_json(_strip_code_fence(text))
            except ValidationError:
                log.warning(
                    "llm %s/%s: answer does not fit %s (try %d/2)",
                    backend.name,
                    self.config.model,
                    schema.__name__,
                    attempt,
                )
                continue
            return self._completion(text, parsed)
        raise LLMBadOutput(BAD_OUTPUT)

    def stream(self, messages: Sequence[Message], *, temperature: float = 0.0) -> Generator[str, None, None]:
        """The answer in pieces as the model writes them. Failures before the first piece are retried;
        once text has been handed out, a failure raises (the caller keeps what it has)."""
        backend = self._require_backend()
        started = self._clock()

        def first_piece() -> tuple[Generator[str, None, None], str | None]:
            pieces = backend.stream(messages, temperature)
            return pieces, next(pieces, None)

        pieces, first = self._call(first_piece, "stream")
        if first is None:
            return
        try:
            yield first
            yield from pieces
        except _Transient as failure:
            log.warning("llm %s/%s: stream broke (%s)", backend.name, self.config.model, failure.reason)
            self._forget_health()
            raise failure.error from None
        finally:
            pieces.close()
        log.info("llm %s/%s streamed in %.2fs", backend.name, self.config.model, self._clock() - started)

    def chat_tools(self, messages: Sequence[Message], tools: Sequence[ToolSpec], *,
                   on_text: Callable[[str], None] | None = None, temperature: float = 0.0) -> ToolTurn:
        """One turn of a model offered `tools` (its native tool calling: Ollama's `tools`, the OpenAI
        API's `tools`): the text, streamed to `on_text` as it is written, and the tool calls it asks for.
        Failures before anything arrived are retried; after that they raise."""
        backend = self._require_backend()
        started = self._clock()

        def first_event() -> tuple[Generator[TurnEvent, None, None], TurnEvent | None]:
            events = backend.stream_tools(messages, tools, temperature)
            return events, next(events, None)

        events, first = self._call(first_event, "tools")
        pieces: list[str] = []
        calls: list[ToolCall] = []
        try:
            event = first
            while event is not None:
                if event[0] == "text":
                    pieces.append(event[1])
                    if on_text is not None:
                        on_text(event[1])
                else:
                    calls.append(event[1])
                event = next(events, None)
        except _Transient as failure:
            log.warning("llm %s/%s: stream broke (%s)", backend.name, self.config.model, failure.reason)
            self._forget_health()
            raise failure.error from None
        finally:
            events.close()
        log.info("llm %s/%s: a turn with %d tool calls in %.2fs", backend.name, self.config.model, len(calls),
                 self._clock() - started)
        return ToolTurn(text="".join(pieces), tool_calls=calls, model=self.config.model,
                        provider=self.config.provider)

    def _completion(self, text: str, parsed: BaseModel | None = None) -> Completion:
        return Completion(text=text, model=self.config.model, provider=self.config.provider, parsed=parsed)

    def _require_backend(self) -> _Backend:
        if self._backend is None:
            raise LLMUnavailable(NO_PROVIDER)
        return self._backend

    def _call(self, call: Callable[[], T], what: str) -> T:
        """Run `call`, retrying transient failures with exponential backoff."""
        attempts = self.config.max_retries
        provider, model = self.config.provider, self.config.model
        attempt = 1
        while True:
            try:
                result = call()
            except _Transient as failure:
                log.warning(
                    "llm %s/%s %s: attempt %d/%d failed (%s)",
                    provider,
                    model,
                    what,
                    attempt,
                    attempts,
                    failure.reason,
                )
                if attempt >= attempts:
                    if isinstance(failure.error, LLMUnavailable):
                        self._forget_health()
                    raise failure.error from None
            except (LLMUnavailable, LLMModelMissing):
                self._forget_health()
                raise
            else:
                self._forget_failed_health()
                return result
            self._sleep(self.config.backoff * 2 ** (attempt - 1))
            attempt += 1

    # -- health ------------------------------------------------------------------------------------

    def health(self, *, refresh: bool = False) -> Health:
        """Can the configured model answer? Checked once, then cached (failures for 30 s, success for
        5 minutes or until a request finds the server or model gone); `refresh` checks again now."""
        with self._lock:
            now = self._clock()
            if self._health is not None and not refresh and now < self._health_until:
                return self._health
            health = self._check_health()
            self._health = health
            self._health_until = now + (HEALTH_OK_TTL if health.ok else HEALTH_FAILED_TTL)
            return health

    def available(self) -> bool:
        """True when the configured model can answer (cached; see `health`)."""
        return self.health().ok

    def _forget_health(self) -> None:
        """A request found the server or model gone: the next `health()` checks again."""
        with self._lock:
            self._health = None

    def _forget_failed_health(self) -> None:
        """A request succeeded: a cached failure is out of date."""
        with self._lock:
            if self._health is not None and not self._health.ok:
                self._health = None

    def _check_health(self) -> Health:
        config = self.config
        backend = self._backend
        if backend is None:
            return Health(ok=False, provider=config.provider, model=config.model, detail=NO_PROVIDER)
        started = self._clock()
        try:
            models = backend.list_models()
        except _Transient as failure:
            log.info("llm %s health: down (%s)", backend.name, failure.reason)
            return Health(ok=False, provider=config.provider, model=config.model, detail=str(failure.error))
        except LLMError as error:
            log.info("llm %s health: unusable (%s)", backend.name, type(error).__name__)
            return Health(ok=False, provider=config.provider, model=config.model, detail=str(error))
        log.info(
            "llm %s health: %d models listed in %.2fs", backend.name, len(models), self._clock() - started
        )
        if not backend.has_model(models):
            return Health(
                ok=False,
                provider=config.provider,
                model=config.model,
                detail=str(backend.model_missing()),
                models=tuple(models),
            )
        return Health(
            ok=True,
            provider=config.provider,
            model=config.model,
            detail=f"{backend.subject} at {backend.host} is ready with {config.model}.",
            models=tuple(models),
        )


def _strip_code_fence(text: str) -> str:
    """Some servers ignore the schema and wrap JSON in a Markdown code fence; unwrap it."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) >= 6:
        body = stripped[3:-3]
        first_line, _, rest = body.partition("\n")
        return rest if first_line.strip().isalpha() or not first_line.strip() else body
    return stripped
