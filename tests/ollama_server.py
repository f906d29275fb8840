"""Scriptable stand-ins for a local Ollama server and an OpenAI-compatible server, for tests.

Both run a real HTTP server on 127.0.0.1 (a free port) in a background thread, so the real `ollama`
client and `httpx` talk to them over sockets exactly as they would to the real thing.

    with OllamaTestServer(models=["llama3.2"]) as server:
        server.script(Reply(status=500, times=2), "Hello there")
        ...  # point the code under test at server.url
        assert len(server.chat_requests) == 3

A chat request takes the next scripted `Reply` (a `Reply` with `times=n` answers n requests); when the
script is empty, `reply_fn(request_json)` decides. Every request is recorded in `server.requests`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "OllamaTestServer", "OpenAITestServer", "RecordedRequest", "Reply", "echo_reply", "numbered_turns", "offered_tools",
    "split_tokens", "turn_facts",
]

_TOKEN = re.compile(r"\s*\S+|\s+")
_OLLAMA_VERSION = "0.12.6"


@dataclass
class Reply:
    """One scripted answer to a chat request.

    text:        the assistant's answer (streamed token by token when the client streams).
    json:        a structured payload; sent as the answer's text, serialised with `json.dumps`.
    tokens:      explicit stream pieces (overrides the automatic split of `text`).
    status:      an HTTP status; >= 400 answers with the server's error body instead of an answer.
    error:       the error message (default: a realistic one for `status`). With status 200 on a
                 streaming request, it arrives inside the stream after the tokens (Ollama: an
                 `{"error": ...}` line; OpenAI: an `error` event); non-streaming requests ignore it.
    times:       how many consecutive requests this reply answers.
    delay:       seconds to wait before answering (to provoke client timeouts).
    drop_after:  stream this many tokens, then cut the connection mid-answer.
    tool_calls:  tools the model asks to run, each {"name": ..., "arguments": {...}}; only tools the
                 request offered (`tools`) may be called, else the server answers 400 (a broken script).
                 Ollama sends them in `message.tool_calls` (arguments as an object), after the text when
                 streaming; the OpenAI server as `delta.tool_calls` with the arguments' JSON in pieces.
    """

    text: str | None = None
    json: Any = None
    tokens: list[str] | None = None
    status: int = 200
    error: str | None = None
    times: int = 1
    delay: float = 0.0
    drop_after: int | None = None
    tool_calls: list[dict[str, Any]] | None = None

    def pieces(self) -> list[str]:
        """The answer as stream pieces; joined, they give back the whole answer."""
        if self.tokens is not None:
            return list(self.tokens)
        return split_tokens(self.content())

    def content(self) -> str:
        if self.tokens is not None:
            return "".join(self.tokens)
        if self.json is not None:
            return json.dumps(self.json)
        return self.text or ""


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received: method, path (without query), parsed JSON body (or None), headers."""

    method: str
    path: str
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


ReplyFn = Callable[[dict[str, Any]], "str | Reply"]


def split_tokens(text: str) -> list[str]:
    """Split text into word-sized stream pieces that join back to exactly `text`."""
    return _TOKEN.findall(text)


def echo_reply(request: dict[str, Any]) -> str:
    """The default answer: repeat the last user message."""
    users = [m.get("content", "") for m in request.get("messages") or [] if m.get("role") == "user"]
    return f"You said: {users[-1]}" if users else "Hello."


_TURN = re.compile(r"^(\d+)\. \[[^\]]*\] (.*)$")


def numbered_turns(request: dict[str, Any]) -> list[tuple[int, str]]:
    """The numbered turns of a fact-extraction request (its last user message: `N. [date] text` lines
    inside <untrusted_content>), as (number, text)."""
    users = [m.get("content", "") for m in request.get("messages") or [] if m.get("role") == "user"]
    return [(int(m.group(1)), m.group(2)) for line in (users[-1] if users else "").splitlines()
            if (m := _TURN.match(line.strip()))]


def turn_facts(request: dict[str, Any], fact: Callable[[str], str | None]) -> Reply:
    """An answer to the fact-extraction prompt, as a model asked for `{"facts": [{"fact", "turns"}]}` with
    a JSON schema gives it: `fact(turn text)` says what a turn states (None: nothing durable), and each
    fact names the turn it comes from."""
    facts = [{"fact": said, "turns": [n]} for n, text in numbered_turns(request) if (said := fact(text))]
    return Reply(json={"facts": facts})


def offered_tools(request: dict[str, Any]) -> list[str]:
    """The names of the tools a chat request offers."""
    return [str((t.get("function") or {}).get("name")) for t in request.get("tools") or []]


def _tools_problem(body: dict[str, Any], reply: Reply, strict: bool = True) -> str | None:
    """What is wrong with a request's `tools` and messages (as Ollama's server checks them), or with a
    scripted reply calling a tool the request did not offer."""
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return "json: cannot unmarshal tools: expected an array"
        for t in tools:
            function = t.get("function") if isinstance(t, dict) else None
            if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(function, dict) \
                    or not function.get("name") or not isinstance(function.get("parameters", {}), dict):
                return "invalid tool: expected {type: function, function: {name, description, parameters}}"
    for m in body.get("messages") or []:
        if m.get("role") not in ("system", "user", "assistant", "tool"):
            return f"invalid role: {m.get('role')}"
        for call in m.get("tool_calls") or []:
            arguments = (call.get("function") or {}).get("arguments")
            if not isinstance(arguments, dict):
                return ("json: cannot unmarshal string into Go struct field .messages.tool_calls.function."
                        "arguments of type api.ToolCallFunctionArguments")
    offered = offered_tools(body)
    for call in reply.tool_calls or [] if strict else []:
        if call.get("name") not in offered:
            return f"test script: the model calls {call.get('name')!r}, which the request does not offer"
    return None


def _now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _installed_name(name: str) -> str:
    """Ollama's canonical model name: `llama3.2` is `llama3.2:latest`."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


class _Handler(BaseHTTPRequestHandler):
    """Routes to the owning test server; speaks HTTP/1.1 with keep-alive like the real servers."""

    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read `requests`, not stderr."""

    def _dispatch(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
            bad_json = True
        else:
            bad_json = False
        path = self.path.split("?", 1)[0]
        owner = self.server.owner
        owner._record(RecordedRequest(method, path, body, {k.lower(): v for k, v in self.headers.items()}))
        if bad_json or (raw and not isinstance(body, dict)):
            owner._error(self, 400, "invalid request body")
            return
        owner._route(self, method, path, body or {})

    # -- writing helpers used by the servers --------------------------------------------------------

    def send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_text(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_chunked(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def cut(self) -> None:
        """Drop the connection mid-response, as a crashed server would."""
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: _ScriptedServer) -> None:
        self.owner = owner
        self.open_sockets: set[socket.socket] = set()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        self.open_sockets.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.open_sockets.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (timeout, abandoned stream, test over) is normal; other errors print."""
        if not self.owner.closed and not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _ScriptedServer:
    """Shared machinery: the thread, the script, the recording, the installed models."""

    def __init__(self, *, models: Iterable[str] = ("llama3.2",), reply_fn: ReplyFn = echo_reply) -> None:
        self.reply_fn: ReplyFn = reply_fn
        self.strict_tools = True  # a scripted call of a tool the request did not offer is answered 400
        self.closed = False
        self._lock = threading.Lock()
        self._script: deque[list[Any]] = deque()  # [Reply, remaining uses]
        self._requests: list[RecordedRequest] = []
        self._models: list[str] = []
        self._closing = threading.Event()
        self.set_models(models)
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=type(self).__name__,
            daemon=True,
        )
        self._thread.start()

    # -- public --------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:54321 (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def models(self) -> list[str]:
        with self._lock:
            return list(self._models)

    def set_models(self, names: Iterable[str]) -> None:
        """Replace the installed models."""
        with self._lock:
            self._models = [self._canonical(n) for n in names]

    def script(self, *replies: str | Reply) -> None:
        """Queue answers for the next chat requests; a plain string is `Reply(text=...)`."""
        with self._lock:
            for reply in replies:
                item = reply if isinstance(reply, Reply) else Reply(text=reply)
                if item.times > 0:
                    self._script.append([item, item.times])

    @property
    def pending(self) -> int:
        """How many scripted answers are still unused."""
        with self._lock:
            return sum(remaining for _, remaining in self._script)

    def clear(self) -> None:
        """Forget the recorded requests and the remaining script."""
        with self._lock:
            self._requests.clear()
            self._script.clear()

    def close(self) -> None:
        """Stop serving and cut every open connection (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self._closing.set()
        self._httpd.shutdown()
        for sock in list(self._httpd.open_sockets):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> _ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- for subclasses ------------------------------------------------------------------------------

    def _canonical(self, name: str) -> str:
        return name

    def _has_model(self, name: str) -> bool:
        return self._canonical(name) in self.models

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_reply(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            if self._script:
                entry = self._script[0]
                entry[1] -= 1
                if entry[1] <= 0:
                    self._script.popleft()
                return entry[0]
        reply = self.reply_fn(request)
        return reply if isinstance(reply, Reply) else Reply(text=reply)

    def _wait(self, seconds: float) -> bool:
        """Sleep, but wake up early when the server closes. True if the server is still running."""
        return not self._closing.wait(seconds) if seconds > 0 else not self.closed

    def _route(self, handler: _Handler, method: str, path: str, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def _error(self, handler: _Handler, status: int, message: str) -> None:
        raise NotImplementedError

    @staticmethod
    def _default_error(status: int) -> str:
        """A realistic message for a scripted error status."""
        known = {
            429: "server busy, please try again.  maximum pending requests exceeded",
            500: "llama runner process has terminated: exit status 2",
            503: "server busy, please try again.  maximum pending requests exceeded",
        }
        if status in known:
            return known[status]
        try:
            return HTTPStatus(status).phrase.lower()
        except ValueError:
            return "error"

    def _serve_reply(self, handler: _Handler, reply: Reply) -> bool:
        """Common preamble: delay and error statuses. False when the reply has been fully handled."""
        if reply.delay and not self._wait(reply.delay):
            return False
        if reply.status >= 400:
            self._error(handler, reply.status, reply.error or self._default_error(reply.status))
            return False
        return True


class OllamaTestServer(_ScriptedServer):
    """A fake Ollama: /api/tags, /api/version, /api/show, /api/chat (streamed or not), /api/embed.

    Chats with a model that is not installed get Ollama's 404 `model "x" not found, try pulling it
    first`. `options.num_predict` truncates the answer (done_reason "length"); `format` must be "json"
    or a JSON schema object, as in Ollama.

    /api/embed takes `input` as a string or a list of strings and answers `embeddings`, one list of floats
    per input (none for an empty list), unit length, `embedding_dim` long. A vector is the input's words
    hashed into the dimensions (texts sharing words are close, as with a real model, deterministically).
    An input longer than `context_length` tokens (a token here: a word) is cut to its first tokens with
    `truncate` true (the default), and refused with Ollama's 400 `input length exceeds maximum context
    length` when it is false. A model not installed gets the 404 chat gets; an input that is not text, 400.
    `embed_down` makes /api/embed answer 500 as a crashed runner does (the rest keeps working).
    """

    def __init__(
        self,
        *,
        models: Iterable[str] = ("llama3.2",),
        reply_fn: ReplyFn = echo_reply,
        embedding_dim: int = 8,
        context_length: int = 2048,
    ) -> None:
        self.embedding_dim = embedding_dim
        self.context_length = context_length
        self.embed_down = False
        super().__init__(models=models, reply_fn=reply_fn)

    def __enter__(self) -> OllamaTestServer:
        return self

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """JSON bodies of the /api/chat requests, oldest first."""
        return [r.body for r in self.requests if r.path == "/api/chat"]

    def _canonical(self, name: str) -> str:
        return _installed_name(name)

    def _error(self, handler: _Handler, status: int, message: str) -> None:
        handler.send_json(status, {"error": message})

    def _route(self, handler: _Handler, method: str, path: str, body: dict[str, Any]) -> None:
        routes: dict[tuple[str, str], Callable[[_Handler, dict[str, Any]], None]] = {
            ("GET", "/"): lambda h, _b: h.send_text(200, "Ollama is running"),
            ("GET", "/api/version"): lambda h, _b: h.send_json(200, {"version": _OLLAMA_VERSION}),
            ("GET", "/api/tags"): self._tags,
            ("POST", "/api/show"): self._show,
            ("POST", "/api/chat"): self._chat,
            ("POST", "/api/embed"): self._embed,
        }
        route = routes.get((method, path))
        if route is None:
            handler.send_text(404, "404 page not found")
        else:
            route(handler, body)

    def _model_entry(self, name: str) -> dict[str, Any]:
        digest = hashlib.sha256(name.encode()).hexdigest()
        return {
            "name": name,
            "model": name,
            "modified_at": "2025-01-15T10:20:30.123456789+01:00",
            "size": 2019393189,
            "digest": digest,
            "details": self._details(),
        }

    @staticmethod
    def _details() -> dict[str, Any]:
        return {
            "parent_model": "",
            "format": "gguf",
            "family": "llama",
            "families": ["llama"],
            "parameter_size": "3.2B",
            "quantization_level": "Q4_K_M",
        }

    def _tags(self, handler: _Handler, _body: dict[str, Any]) -> None:
        handler.send_json(200, {"models": [self._model_entry(n) for n in self.models]})

    def _show(self, handler: _Handler, body: dict[str, Any]) -> None:
        name = str(body.get("model") or body.get("name") or "")
        if not self._has_model(name):
            self._error(handler, 404, f"model '{name}' not found")
            return
        handler.send_json(
            200,
            {
                "modelfile": f"FROM {self._canonical(name)}\n",
                "parameters": 'stop "<|eot_id|>"',
                "template": "{{ .Prompt }}",
                "details": self._details(),
                "model_info": {"general.architecture": "llama", "llama.context_length": 131072},
                "capabilities": ["completion", "tools"],
                "modified_at": "2025-01-15T10:20:30.123456789+01:00",
            },
        )

    def _check_model(self, handler: _Handler, body: dict[str, Any]) -> str | None:
        name = body.get("model")
        if not name:
            self._error(handler, 400, "model is required")
            return None
        if not self._has_model(str(name)):
            self._error(handler, 404, f'model "{name}" not found, try pulling it first')
            return None
        return str(name)

    def _chat(self, handler: _Handler, body: dict[str, Any]) -> None:
        fmt = body.get("format")
        if fmt not in (None, "", "json") and not isinstance(fmt, dict):
            self._error(handler, 400, 'invalid format: expected "json" or a valid JSON schema')
            return
        model = self._check_model(handler, body)
        if model is None:
            return
        reply = self._next_reply(body)
        if (problem := _tools_problem(body, reply, self.strict_tools)) is not None:
            self._error(handler, 400, problem)
            return
        if not self._serve_reply(handler, reply):
            return
        pieces = reply.pieces()
        done_reason = "stop"
        limit = (body.get("options") or {}).get("num_predict")
        if isinstance(limit, int) and 0 <= limit < len(pieces):
            pieces, done_reason = pieces[:limit], "length"
        stats = self._stats(len(pieces), body)
        if body.get("stream", True):
            self._stream_chat(handler, model, pieces, reply, done_reason, stats)
        else:
            message: dict[str, Any] = {"role": "assistant", "content": "".join(pieces)}
            if reply.tool_calls:
                message["tool_calls"] = self._calls(reply)
            handler.send_json(
                200,
                {
                    "model": model,
                    "created_at": _now_iso(),
                    "message": message,
                    "done_reason": done_reason,
                    "done": True,
                    **stats,
                },
            )

    def _stream_chat(
        self,
        handler: _Handler,
        model: str,
        pieces: list[str],
        reply: Reply,
        done_reason: str,
        stats: dict[str, int],
    ) -> None:
        def line(payload: dict[str, Any]) -> None:
            handler.write_chunk(json.dumps(payload).encode() + b"\n")

        handler.start_chunked("application/x-ndjson")
        for index, piece in enumerate(pieces):
            if reply.drop_after is not None and index >= reply.drop_after:
                break
            line(
                {
                    "model": model,
                    "created_at": _now_iso(),
                    "message": {"role": "assistant", "content": piece},
                    "done": False,
                }
            )
        if reply.error is not None:
            line({"error": reply.error})
            handler.end_chunked()
            return
        if reply.drop_after is not None and reply.drop_after < len(pieces):
            handler.cut()
            return
        if reply.tool_calls:  # Ollama sends the calls in one chunk of their own, after the text
            line(
                {
                    "model": model,
                    "created_at": _now_iso(),
                    "message": {"role": "assistant", "content": "", "tool_calls": self._calls(reply)},
                    "done": False,
                }
            )
        line(
            {
                "model": model,
                "created_at": _now_iso(),
                "message": {"role": "assistant", "content": ""},
                "done_reason": done_reason,
                "done": True,
                **stats,
            }
        )
        handler.end_chunked()

    @staticmethod
    def _calls(reply: Reply) -> list[dict[str, Any]]:
        return [{"function": {"index": i, "name": c["name"], "arguments": dict(c.get("arguments") or {})}}
                for i, c in enumerate(reply.tool_calls or [])]

    @staticmethod
    def _stats(eval_count: int, body: dict[str, Any]) -> dict[str, int]:
        prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages") or [])
        return {
            "total_duration": 5_000_000 + eval_count * 1_000_000,
            "load_duration": 1_000_000,
            "prompt_eval_count": max(1, prompt_chars // 4),
            "prompt_eval_duration": 2_000_000,
            "eval_count": eval_count,
            "eval_duration": eval_count * 1_000_000,
        }

    @property
    def embed_requests(self) -> list[dict[str, Any]]:
        """JSON bodies of the /api/embed requests, oldest first."""
        return [r.body for r in self.requests if r.path == "/api/embed"]

    def _embed(self, handler: _Handler, body: dict[str, Any]) -> None:
        model = self._check_model(handler, body)
        if model is None:
            return
        inputs = body.get("input", [])
        if isinstance(inputs, str):
            texts = [inputs]
        elif isinstance(inputs, list) and all(isinstance(t, str) for t in inputs):
            texts = list(inputs)
        else:
            self._error(handler, 400, "invalid input type")
            return
        if self.embed_down:
            self._error(handler, 500, self._default_error(500))
            return
        truncate = body.get("truncate", True)
        kept = []
        for text in texts:
            tokens = text.split()
            if len(tokens) > self.context_length:
                if truncate is False:
                    self._error(handler, 400, "input length exceeds maximum context length")
                    return
                tokens = tokens[: self.context_length]
            kept.append(tokens)
        handler.send_json(
            200,
            {
                "model": model,
                "embeddings": [self._vector(tokens) for tokens in kept],
                "total_duration": 1_000_000,
                "load_duration": 100_000,
                "prompt_eval_count": sum(max(1, len(tokens)) for tokens in kept),
            },
        )

    def _vector(self, tokens: list[str]) -> list[float]:
        raw = [0.0] * self.embedding_dim
        for token in tokens or [""]:
            word = "".join(ch for ch in token.lower() if ch.isalnum())
            digest = hashlib.sha256(word.encode()).digest()
            raw[int.from_bytes(digest[:4], "big") % self.embedding_dim] += 1.0 if digest[4] & 1 else -1.0
            raw[int.from_bytes(digest[5:9], "big") % self.embedding_dim] += 0.5
        norm = math.sqrt(sum(x * x for x in raw)) or 1.0
        return [x / norm for x in raw]


def _openai_as_ollama(body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat request with its tool calls' arguments parsed, so one check serves both servers
    (the OpenAI API sends them as JSON strings; a string that is not a JSON object fails the check)."""
    messages = []
    for m in body.get("messages") or []:
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                function = dict(call.get("function") or {})
                try:
                    function["arguments"] = json.loads(function.get("arguments") or "")
                except (TypeError, ValueError):
                    function["arguments"] = None
                calls.append({**call, "function": function})
            m["tool_calls"] = calls
        messages.append(m)
    return {**body, "messages": messages}


class OpenAITestServer(_ScriptedServer):
    """A fake OpenAI-compatible server (llama.cpp, LM Studio, vLLM): /v1/models, /v1/chat/completions.

    Streams as server-sent events (`data: {...}` chunks, then `data: [DONE]`). With `api_key` set, a
    request without `Authorization: Bearer <api_key>` gets 401. Unknown models get 404 with
    `code: model_not_found`, as vLLM answers.
    """

    def __init__(
        self,
        *,
        models: Iterable[str] = ("llama3.2",),
        reply_fn: ReplyFn = echo_reply,
        api_key: str | None = None,
    ) -> None:
        self.api_key = api_key
        super().__init__(models=models, reply_fn=reply_fn)

    def __enter__(self) -> OpenAITestServer:
        return self

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """JSON bodies of the /v1/chat/completions requests, oldest first."""
        return [r.body for r in self.requests if r.path == "/v1/chat/completions"]

    def _error(self, handler: _Handler, status: int, message: str) -> None:
        kind = "invalid_request_error" if status < 500 else "server_error"
        handler.send_json(status, {"error": {"message": message, "type": kind, "code": status}})

    def _route(self, handler: _Handler, method: str, path: str, body: dict[str, Any]) -> None:
        if self.api_key and handler.headers.get("Authorization") != f"Bearer {self.api_key}":
            self._error(handler, 401, "Invalid API Key")
        elif (method, path) == ("GET", "/v1/models"):
            data = [
                {"id": n, "object": "model", "created": 1736935230, "owned_by": "test"} for n in self.models
            ]
            handler.send_json(200, {"object": "list", "data": data})
        elif (method, path) == ("POST", "/v1/chat/completions"):
            self._chat(handler, body)
        else:
            self._error(handler, 404, f"File Not Found: {path}")

    def _chat(self, handler: _Handler, body: dict[str, Any]) -> None:
        model = str(body.get("model") or "")
        if not self._has_model(model):
            handler.send_json(
                404,
                {
                    "error": {
                        "message": f"The model `{model}` does not exist.",
                        "type": "NotFoundError",
                        "code": "model_not_found",
                    }
                },
            )
            return
        reply = self._next_reply(body)
        if (problem := _tools_problem(_openai_as_ollama(body), reply, self.strict_tools)) is not None:
            self._error(handler, 400, problem)
            return
        if not self._serve_reply(handler, reply):
            return
        pieces = reply.pieces()
        finish = "tool_calls" if reply.tool_calls else "stop"
        calls = [{"id": f"call_{uuid.uuid4().hex[:8]}", "type": "function",
                  "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments") or {})}}
                 for c in reply.tool_calls or []]
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        usage = {"prompt_tokens": 10, "completion_tokens": len(pieces), "total_tokens": 10 + len(pieces)}
        if not body.get("stream"):
            handler.send_json(
                200,
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "".join(pieces),
                                        **({"tool_calls": calls} if calls else {})},
                            "finish_reason": finish,
                        }
                    ],
                    "usage": usage,
                },
            )
            return

        def event(delta: dict[str, Any], finish: str | None = None) -> None:
            chunk = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            handler.write_chunk(f"data: {json.dumps(chunk)}\n\n".encode())

        handler.start_chunked("text/event-stream")
        event({"role": "assistant", "content": ""})
        for index, piece in enumerate(pieces):
            if reply.drop_after is not None and index >= reply.drop_after:
                handler.cut()
                return
            event({"content": piece})
        for index, call in enumerate(calls):  # as vLLM streams them: id and name first, the arguments in pieces
            arguments = call["function"]["arguments"]
            half = len(arguments) // 2
            event({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                   "function": {"name": call["function"]["name"], "arguments": arguments[:half]}}]})
            event({"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]})
        if reply.error is not None:
            handler.write_chunk(f"data: {json.dumps({'error': {'message': reply.error}})}\n\n".encode())
        else:
            event({}, finish)
        handler.write_chunk(b"data: [DONE]\n\n")
        handler.end_chunked()
