"""The loopback HTTP API: FastAPI over the engine facade, for scripts and other local programs.

`create_app(engine, token, allowed_origins)` builds the app (tests and the desktop can mount it);
`serve(port)` is the composition root behind `personal-llm serve`.

Security, outermost first:
  1. Host guard: only loopback Host headers (localhost, 127.0.0.1, [::1]) — defeats DNS rebinding.
  2. CORS: answered only for the origins the user allowed in settings (none by default).
  3. API guard: bearer token on every route except the schema pages, a request-body size limit, a catch-all
     that turns any unexpected error into a generic JSON 500 (traceback to the log, never request text).
Engine calls run on small fixed pools of worker threads, so the event loop never blocks and each worker
keeps its one SQLite connection (a WAL reader of its own) for the life of the server: reads (recall, get,
stats) on one pool, writes (remember, edit, forget) on another, and long work (ingest, ask) on a third, so
a read never waits in a queue behind writes, embedding or a long ingest; writes are serialised by the
store's write lock, and their embedding runs before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hmac
import json
import logging
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from fastapi import FastAPI, File, Form, HTTPException, Query, Request, Security, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPBearer
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import runtime
from .ask import AskResult
from .audit import DOOR, DOORS
from .errors import DiskFull, EngineError, NotFound, StoreLocked, StoreUnavailable, UserError
from .graph import ExtractionReport, GraphView
from .imports import ImportReport
from .ingest import Document, IngestResult, Passage
from .limits import MAX_HITS, MAX_PROJECT_CHARS, MAX_QUERY_CHARS
from .memory_rules import MAX_TEXT_CHARS, MAX_TIME, MIN_TIME
from .models import AuditRun, ForgetResult, HealthReport, Hit, Memory, MemoryPage, RememberResult, Stats
from .pathpolicy import PathPolicy, PathRefused
from .remote import DOOR_HEADER
from .watch import WatchStatus

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
# A refused body is read and dropped before the answer, up to this much and this long (then the connection
# is closed as it is): the client reads a 413 (401, 403) instead of a reset.
DRAIN_MAX_BYTES = 1024 * 1024 * 1024
DRAIN_MAX_SECONDS = 30.0
MAX_MEMORY_CHARS = MAX_TEXT_CHARS  # the engine's own limit, checked here as a 422
WORKERS = 4  # reads at once
WRITE_WORKERS = 2  # writes being prepared (embedded) at once; they commit one at a time
LONG_WORKERS = 2  # ingests and answers at once
TIDY_WORKERS = 2  # tidy-ups at once (POST /consolidate), beside the ingests: each may wait minutes on a model
MCP_WORKERS = 4  # MCP tool calls (over HTTP at MCP_PATH) at once
_POST_ONLY_MEMORY_ROUTES = frozenset({"remember", "batch"})  # under /memory/, beside GET /memory/{id}
# A server of many users (serve --database): PostgreSQL runs the users' transactions side by side (the one
# writer at a time above is a SQLite file's), so reads and writes each get this many at once; one user's
# import in flight then holds one of them, not half of every user's writes (bench/api_load.py --server).
SERVER_WORKERS = 16
MCP_PATH = "/mcp"
MAX_BATCH = 1000  # memories in one POST /memory/batch
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
# Schema pages carry no user data; the Swagger UI has an "Authorize" button for the token. Its scripts and
# styles are served from DOCS_ASSETS (the fastapi-offline package), not fetched from a CDN: the page works
# offline and tells no third party that this server runs.
PUBLIC_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/openapi.json"})
DOCS_ASSETS = "/docs/assets/"

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------------
# request bodies (responses are the engine's models)
# ---------------------------------------------------------------------------------------------------
def epoch(value: datetime) -> float:
    """Seconds since the epoch; ValueError for times the platform cannot represent (year 1, year 9999)."""
    try:
        ts = value.timestamp()
    except (OverflowError, OSError, ValueError) as e:
        raise ValueError("this time is out of the supported range") from e
    if not MIN_TIME <= ts <= MAX_TIME:  # the store's range: refused here, as sent, not later as a number of seconds
        raise ValueError("this time is out of the supported range (the years 1 to 9999)")
    return ts


def _storable(value: datetime | None) -> datetime | None:
    if value is not None:
        epoch(value)
    return value


StoredTime = Annotated[datetime | None, AfterValidator(_storable)]  # a time the store can hold


def shown(path: str) -> str:
    """A request path as a log line may show it: control characters escaped, so a request cannot start a
    line of its own in the log (a forged entry) or put a NUL in it."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in path)


class UpdateRequest(BaseModel):
    """Only the fields sent change. `project: null` clears the project and `at: null` the event time."""

    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not a silent no-op

    text: str | None = Field(default=None, min_length=1, max_length=MAX_MEMORY_CHARS, description="New text")
    kind: Literal["fact", "episodic", "procedural"] | None = None
    project: str | None = Field(default=None, max_length=MAX_PROJECT_CHARS)
    importance: float | None = Field(default=None, ge=0.0, le=1.0)
    at: StoredTime = Field(default=None, description="When it happened (ISO 8601); naive means local")
    archived: bool | None = Field(default=None, description="Archive (true) or restore (false)")

    def changes(self) -> dict[str, Any]:
        """Keyword arguments for `Engine.update`: the fields sent (null only where null means clear)."""
        out: dict[str, Any] = {k: getattr(self, k) for k in ("text", "kind", "importance", "archived")
                               if getattr(self, k) is not None}
        if "project" in self.model_fields_set:
            out["project"] = self.project
        if "at" in self.model_fields_set:
            out["at"] = epoch(self.at) if self.at else None
        return out


class RememberRequest(BaseModel):
    text: str = Field(min_length=1, max_length=MAX_MEMORY_CHARS, description="What to remember")
    id: str | None = Field(default=None, max_length=40,
                           description="An id the client made (mem_…): sent again, the same write (nothing twice)")
    created_at: StoredTime = Field(default=None, description="When it was first stored, where it comes from "
                                                             "(another device, a store pushed here)")
    kind: Literal["fact", "episodic", "procedural"] = "fact"
    project: str | None = Field(default=None, max_length=MAX_PROJECT_CHARS)
    importance: float | None = Field(default=None, ge=0.0, le=1.0, description="0..1; default from kind")
    at: StoredTime = Field(default=None, description="When it happened (ISO 8601); naive means local")


class RememberBatch(BaseModel):
    """Several memories (e.g. the turns of a conversation), stored in one transaction and embedded in one
    batch; each is merged into a near-duplicate as `remember` would."""

    items: list[RememberRequest] = Field(min_length=1, max_length=MAX_BATCH)


def _query_epoch(name: str, value: datetime | None) -> float | None:
    if value is None:
        return None
    try:
        return epoch(value)
    except ValueError as e:
        raise HTTPException(status_code=422, detail=[{"loc": ["query", name], "msg": str(e),
                                                      "type": "value_error"}]) from e


class ImportRequest(BaseModel):
    """A ChatGPT or Claude export (zip or conversations.json), or an Obsidian vault folder, on this machine."""

    path: str = Field(min_length=1, max_length=4096, description="Absolute path (under the folders you allowed)")
    project: str | None = Field(default=None, max_length=MAX_PROJECT_CHARS)


class IngestRequest(BaseModel):
    """Either files/folders on this machine (absolute paths) or a text to store as a document."""

    paths: list[str] = Field(default_factory=list, max_length=1000, description="Absolute paths on this machine")
    text: str | None = Field(default=None, min_length=1, description="Text to store as a document")
    title: str | None = Field(default=None, max_length=500, description="Title of the text (with `text`)")
    project: str | None = Field(default=None, max_length=MAX_PROJECT_CHARS)

    @model_validator(mode="after")
    def _one_source(self) -> IngestRequest:
        if bool(self.paths) == (self.text is not None):
            raise ValueError("give either `paths` or `text` (with an optional `title`), not both or neither")
        for p in self.paths:
            if "\x00" in p or not Path(p).is_absolute():
                raise ValueError(f"paths must be absolute paths on this machine: {p!r}")
        return self


class AskRequest(BaseModel):
    question: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    project: str | None = Field(default=None, max_length=MAX_PROJECT_CHARS)
    verify: bool = Field(default=False, description="Check the answer against its sources (slower)")
    conversation_id: str | None = Field(default=None, max_length=100,
                                        description="Continue this conversation (from an earlier answer)")


class AgentRunRequest(BaseModel):
    task: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="What the agent should do")
    agent: str | None = Field(default=None, max_length=60, description="Which agent (default: Research)")
    project: str | None = Field(default=None, max_length=MAX_PROJECT_CHARS, description="Work within this project only")


class ConfirmAnswer(BaseModel):
    call_id: str = Field(min_length=1, max_length=100, description="The `call_id` of the `confirm` event")
    approve: bool = Field(description="true: run the tool; false: don't")


class ConfirmResult(BaseModel):
    run_id: str
    call_id: str
    approve: bool


class StopResult(BaseModel):
    run_id: str
    stopping: bool


class Entity(BaseModel):
    name: str
    type: str | None = None
    facts: int = Field(description="How many facts name it")


class ResolveRequest(BaseModel):
    keep: str = Field(min_length=1, max_length=100, description="The id of the memory to keep (the other is "
                                                                "archived), or `both`")


class ErrorBody(BaseModel):
    detail: str | list[dict[str, Any]]


class ChangeItem(BaseModel):
    action: str
    memories: list[str] = Field(description="The ids of the memories written ('*': many)")
    documents: list[str] = Field(description="The ids of the documents written ('*': many)")
    graph: bool


class ChangesAnswer(BaseModel):
    token: int = Field(description="Hand it back as `since` next time")
    changes: list[ChangeItem]


MAX_TRANSFER = 1000  # records in one POST /transfer/records


class TransferInfo(BaseModel):
    space: list[str | int] | None = Field(description="The embedding space of the stored vectors (provider, model, "
                                                      "dimension, version); records' vectors must be of it")
    max_records: int = Field(description="Records one POST /transfer/records takes")
    counts: dict[str, int] = Field(description="Records GET /transfer/records gives, by type")


class TransferBatch(BaseModel):
    space: list[str | int] | None = Field(default=None, description="The space of the records' vectors (as GET "
                                                                     "/transfer shows it); needed with vectors")
    records: list[dict[str, Any]] = Field(min_length=1, description="Records of the export format, each with its "
                                                                    "`type`; a memory or passage may carry its "
                                                                    "`vector` (float32 little-endian, base64)")


MAX_KNOWN = 5000  # keys in one POST /transfer/known


class KnownRequest(BaseModel):
    keys: dict[str, list[Annotated[str, Field(max_length=200)]]] = Field(
        description="By type of record (memory, document, chunk, conversation: uids; node: the entity's "
                    "normalised name), the keys to look up")


class KnownAnswer(BaseModel):
    known: dict[str, list[str]] = Field(description="The keys asked about that this account holds, by type")
    turns: dict[str, list[str]] = Field(description="For each conversation held, the keys of its turns "
                                                    "(records.turn_key: role, millisecond and content)")


class TransferPage(BaseModel):
    records: list[dict[str, Any]]
    next: str | None = Field(description="Hand it back as `after` for the next page (null: that was the last)")


# ---------------------------------------------------------------------------------------------------
# middleware (pure ASGI: runs before routing, so no route can forget it)
# ---------------------------------------------------------------------------------------------------
async def _send_json(send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    data = json.dumps(body).encode("utf-8")
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", []):
        if k == name:
            return v.decode("latin-1")
    return None


def host_is_loopback(host: str | None) -> bool:
    """True for localhost, 127.0.0.1 and [::1], with or without a port."""
    if not host:
        return False
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8765
        name, _, rest = host[1:].partition("]")
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return False
    else:
        name, sep, port = host.partition(":")
        if sep and not port.isdigit():
            return False
    return name.rstrip(".") in LOOPBACK_HOSTS


async def _drain(scope: Scope, receive: Receive, limit: int = DRAIN_MAX_BYTES) -> None:
    """Read and drop what is left of a request body the server refuses before answering, so that a client
    still sending it reads the answer instead of a connection reset (closing a socket with unread data
    resets it). At most `limit` bytes and DRAIN_MAX_SECONDS; a client that asked to wait before sending
    (Expect: 100-continue) is answered at once and sends nothing."""
    if (_header(scope, b"expect") or "").lower() == "100-continue":
        return

    async def drop() -> None:
        size = 0
        while size <= limit:
            message = await receive()
            if message["type"] != "http.request":
                return
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(drop(), DRAIN_MAX_SECONDS)


def _door(scope: Scope) -> str | None:
    """The door a request to a server came through, for its user's activity log (engine/audit.py): MCP at
    MCP_PATH; else the program the client names in DOOR_HEADER (the app, the CLI…: one of DOORS, anything
    else is the HTTP API itself). Only a label: the token alone says whose the request is and what it may do."""
    if scope["path"] == MCP_PATH:
        return "mcp"
    said = (_header(scope, DOOR_HEADER.lower().encode("latin-1")) or "").strip().lower()
    return said if said in DOORS else None


class HostGuard:
    """Refuse requests whose Host is not a loopback name (a DNS-rebinding page would send its own)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not host_is_loopback(_header(scope, b"host")):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await _drain(scope, receive)
            await _send_json(send, 403, {"detail": "This API only answers requests addressed to localhost."})
            return
        await self.app(scope, receive, send)


class NulGuard:
    """A path holding NUL (sent as %00, or %2500) is a 404 before any route: no id or name holds NUL, and
    PostgreSQL cannot even compare one (it was the database's error). Pure ASGI: Starlette's function
    middleware ran every request through a task group and a memory stream (~0.7 ms of CPU a request)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope.get("root_path", "") + scope["path"]
            if "\x00" in path or "%00" in path:
                await JSONResponse({"detail": "No such item"}, status_code=404)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _BodyTooLarge(Exception):
    pass


CURRENT_ENGINE: contextvars.ContextVar[Any] = contextvars.ContextVar("personal_llm_engine")


SCOPE_USER = "personal_llm.engine"  # the ASGI scope's key for the request's user's engine (a server's)


class UserEngine:
    """The engine of the request's user, on a server of many (`create_app(authenticate=…)`): the routes use it
    as they use a desktop profile's one engine; the API guard sets it from the request's token."""

    profile = None  # a server's user has no desktop profile (paths on the server are never read for them)

    def __getattr__(self, name: str) -> Any:
        return getattr(CURRENT_ENGINE.get(), name)


class ApiGuard:
    """Bearer token, body-size limit, access log (no query strings) and the last-resort error handler."""

    def __init__(self, app: ASGIApp, *, token: str | None, max_body_bytes: int,
                 authenticate: Callable[[str], Any] | None = None):
        self.app = app
        self.token = token.encode("utf-8") if token else None
        self.authenticate = authenticate  # a server's: a token -> its user's engine (None: no such user)
        self.max_body = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = {"code": 0}

        async def send_tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self._handle(scope, receive, send_tracked)
        except Exception as e:
            # Type and frames only: an exception's message can quote the request (a memory's text).
            log.error("%s %s failed: %s\n%s", scope["method"], shown(scope["path"]), type(e).__name__,
                      "".join(traceback.format_tb(e.__traceback__)))
            if status["code"] == 0:
                await _send_json(send_tracked, 500, {"detail": "Internal error; details are in the server log."})
        finally:
            log.info("%s %s %s %.0fms", scope["method"], shown(scope["path"]), status["code"],
                     (time.perf_counter() - t0) * 1000)

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        public = path in PUBLIC_PATHS or path.startswith(DOCS_ASSETS)
        user = None
        if not public and self.authenticate is not None:
            user = await asyncio.get_running_loop().run_in_executor(None, self.authenticate, self._bearer(scope))
        if not public and (user is None if self.authenticate is not None else not self._authorized(scope)):
            await _drain(scope, receive)
            await _send_json(send, 401, {"detail": "Missing or wrong API token. Send 'Authorization: Bearer "
                                                   "<token>'; `personal-llm token` prints it."},
                             {"WWW-Authenticate": "Bearer"})
            return
        declared = _header(scope, b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            await _drain(scope, receive)
            await self._too_large(send)
            return
        try:
            body = await self._read_body(receive)
        except _BodyTooLarge:
            await _drain(scope, receive)
            await self._too_large(send)
            return
        if user is not None:
            CURRENT_ENGINE.set(user)  # the request's user, for the routes (UserEngine)
            DOOR.set(_door(scope))  # and the program it came from, for their log
            scope[SCOPE_USER] = user  # and for MCP's messages, which carry their request (mcp.create_server)
        await self.app(scope, self._replay(body, receive), send)

    @staticmethod
    def _bearer(scope: Scope) -> str:
        value = _header(scope, b"authorization") or ""
        scheme, _, given = value.partition(" ")
        return given.strip() if scheme.lower() == "bearer" else ""

    def _authorized(self, scope: Scope) -> bool:
        given = self._bearer(scope)
        return self.token is not None and bool(given) and hmac.compare_digest(given.encode("utf-8"), self.token)

    async def _too_large(self, send: Send) -> None:
        mb = self.max_body / (1024 * 1024)
        await _send_json(send, 413, {"detail": f"The request body is larger than the limit of {mb:g} MB. "
                                               "Ingest big files by path instead of uploading them (from a "
                                               "folder allowed with `personal-llm folders allow`)."})

    async def _read_body(self, receive: Receive) -> bytes:
        """Read the whole body (at most max_body bytes), so an oversized chunked upload is refused too."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise _BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    @staticmethod
    def _replay(body: bytes, receive: Receive) -> Receive:
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later: wait for the disconnect

        return replay


# ---------------------------------------------------------------------------------------------------
# errors: the engine's exceptions as clear JSON
# ---------------------------------------------------------------------------------------------------
def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # loc/msg/type only: `input` would echo (possibly huge, private) request text back.
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
                  for e in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": errors})

    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(StarletteHTTPException)
    async def no_route(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """No endpoint answers this path or method: say which ones exist (the others pass through)."""
        if exc.status_code == 405 or (exc.status_code == 404 and request.scope.get("route") is None):
            if exc.status_code == 404:
                what = f"No such endpoint: {request.method} {request.url.path}."
            else:
                allowed = {k.lower(): v for k, v in (exc.headers or {}).items()}.get("allow", "")
                what = f"{request.url.path} does not take {request.method}" + (f" (it takes {allowed})." if allowed else ".")
            detail = f"{what} The endpoints are listed at /docs (e.g. POST /memory/remember, GET /memory/recall?q=…)."
            return JSONResponse(status_code=exc.status_code, content={"detail": detail}, headers=exc.headers)
        return JSONResponse(status_code=exc.status_code, content={"detail": exc.detail}, headers=exc.headers)

    @app.exception_handler(NotFound)
    async def not_found(_: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": str(exc)})

    @app.exception_handler(PathRefused)
    async def refused(request: Request, exc: PathRefused) -> JSONResponse:
        log.info("%s %s: a path was refused by the ingest policy", request.method, shown(request.url.path))
        return JSONResponse(status_code=403, content={"detail": str(exc)})

    @app.exception_handler(StoreLocked)
    async def locked(_: Request, exc: StoreLocked) -> JSONResponse:
        return JSONResponse(status_code=503, content={"detail": str(exc)}, headers={"Retry-After": "1"})

    @app.exception_handler(StoreUnavailable)
    async def unavailable(request: Request, exc: StoreUnavailable) -> JSONResponse:
        """The disk is full or read-only, or the store is damaged: the server works, the store can't."""
        log.warning("%s %s: store unavailable: %s", request.method, shown(request.url.path), type(exc).__name__)
        return JSONResponse(status_code=507 if isinstance(exc, DiskFull) else 503, content={"detail": str(exc)})

    from .llm import LLMError

    @app.exception_handler(LLMError)
    async def llm_error(request: Request, exc: LLMError) -> JSONResponse:
        """The language model was reached but failed: a bad gateway, with whatever can still be shown."""
        log.info("%s %s: language model failed: %s", request.method, shown(request.url.path), type(exc).__name__)
        content: dict[str, Any] = {"detail": str(exc)}
        sources = getattr(exc, "sources", None)
        if sources:
            content["sources"] = [s.model_dump(mode="json") if isinstance(s, BaseModel) else s for s in sources]
        return JSONResponse(status_code=502, content=content)

    @app.exception_handler(UserError)
    async def user_error(request: Request, exc: UserError) -> JSONResponse:
        log.info("%s %s refused: %s", request.method, shown(request.url.path), type(exc).__name__)
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    @app.exception_handler(EngineError)
    async def engine_error(request: Request, exc: EngineError) -> JSONResponse:
        log.error("%s %s engine error: %s\n%s", request.method, shown(request.url.path), type(exc).__name__,
                  "".join(traceback.format_tb(exc.__traceback__)))
        return JSONResponse(status_code=500, content={"detail": "Internal error; details are in the server log."})


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "The engine refused the request (message says why)"},
    401: {"model": ErrorBody, "description": "Missing or wrong bearer token"},
    403: {"model": ErrorBody, "description": "Host not loopback, or a path outside the folders allowed for ingest"},
    413: {"model": ErrorBody, "description": "Request body too large"},
    422: {"model": ErrorBody, "description": "Invalid input"},
    503: {"model": ErrorBody, "description": "The store is busy in another program (retry), read-only or damaged"},
    507: {"model": ErrorBody, "description": "The disk holding the store is full"},
}


# ---------------------------------------------------------------------------------------------------
# the app
# ---------------------------------------------------------------------------------------------------
def _bind_user(request: Any) -> bool:
    """Make the user of the HTTP request that carried an MCP message the one its tools act as."""
    user = request.scope.get(SCOPE_USER) if request is not None else None
    if user is None:
        return False
    CURRENT_ENGINE.set(user)
    DOOR.set("mcp")
    return True


def _mcp_manager(engine: Any, pool: ThreadPoolExecutor, *, many_users: bool) -> Any:
    """The MCP server's tools over streamable HTTP (the same tools as `personal-llm mcp`), for MCP_PATH.
    Stateless: every POST stands alone and is answered with JSON, so no session outlives its request and
    each message acts as the user of the token that came with it. The Host check is HostGuard's."""
    from mcp.server.transport_security import TransportSecuritySettings

    from .mcp import create_server

    server = create_server(engine, pool, bind_user=_bind_user if many_users else None)
    server.streamable_http_app(stateless_http=True, json_response=True, streamable_http_path=MCP_PATH,
                               transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    return server.session_manager  # its app is not used: the route below hands requests to the manager


def create_app(engine: Any, token: str | None, allowed_origins: list[str] | None = None, *,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, workers: int = WORKERS,
               authenticate: Callable[[str], Any] | None = None, loopback: bool = True) -> FastAPI:
    """The HTTP API over one open engine (with its `token`), or, on a server of many users, over the engine
    `authenticate(token)` gives each request (`engine` is then a UserEngine). The caller owns the engines (and
    closes them). `loopback`: answer only requests addressed to localhost (a server elsewhere answers its
    own name, with TLS)."""
    if not token and authenticate is None:
        raise ValueError("the API needs a token")
    many = authenticate is not None
    pools = {"read": ThreadPoolExecutor(max_workers=SERVER_WORKERS if many else workers, thread_name_prefix="api-read"),
             "write": ThreadPoolExecutor(max_workers=SERVER_WORKERS if many else WRITE_WORKERS,
                                         thread_name_prefix="api-write"),
             "long": ThreadPoolExecutor(max_workers=LONG_WORKERS, thread_name_prefix="api-long"),
             "tidy": ThreadPoolExecutor(max_workers=TIDY_WORKERS, thread_name_prefix="api-tidy"),
             "mcp": ThreadPoolExecutor(max_workers=MCP_WORKERS, thread_name_prefix="api-mcp")}
    mcp_manager = _mcp_manager(engine, pools["mcp"], many_users=many)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        try:
            async with mcp_manager.run():
                yield
        finally:
            for pool in pools.values():
                pool.shutdown(wait=True, cancel_futures=True)

    async def call(fn: Callable[..., T], *args: Any, pool: str = "read", **kwargs: Any) -> T:
        """Run an engine call on a worker pool (the engine is synchronous and thread-safe): "read", "write"
        or "long". An error of the store's disk that reached here unmapped (a read that found it full, the
        file damaged, …) is answered like the engine's own (503/507); anything else is a bug (the API
        guard's 500)."""
        loop = asyncio.get_running_loop()
        try:
            # in the request's context: its door (engine/audit.py) goes with it to the worker
            return await loop.run_in_executor(pools[pool], contextvars.copy_context().run,
                                              functools.partial(fn, *args, **kwargs))
        except EngineError:
            raise
        except Exception as e:
            from .engine import Engine

            mapped = Engine.explain(e)
            if mapped is None:
                raise
            raise mapped from e

    from .version import __version__

    app = FastAPI(
        title="Personal LLM",
        version=__version__,
        description="Your local memory over HTTP (127.0.0.1 only). Every route needs "
                    "`Authorization: Bearer <token>`; `personal-llm token` prints the token.",
        lifespan=lifespan,
        docs_url=None,  # served by _add_docs, from files of our own
        redoc_url=None,
        redirect_slashes=False,  # "/memory/x/" is a JSON 404, not a bodiless 307 to another URL
        dependencies=[Security(HTTPBearer(auto_error=False, description="`personal-llm token`"))],
        responses=_ERRORS,
    )
    _install_error_handlers(app)

    app.add_middleware(NulGuard)  # type: ignore[arg-type]
    _add_routes(app, engine, call)
    _transfer_routes(app, engine, call)
    _answer_directly(app, "/memory/recall")
    _add_docs(app)
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
    from starlette.routing import Route

    app.router.routes.append(Route(MCP_PATH, StreamableHTTPASGIApp(mcp_manager), include_in_schema=False))
    app.add_middleware(ApiGuard, token=token, max_body_bytes=max_body_bytes,  # type: ignore[arg-type]
                       authenticate=authenticate)
    if allowed_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(allowed_origins),  # type: ignore[arg-type]
                           allow_methods=["GET", "POST", "PATCH", "DELETE"],
                           allow_headers=["Authorization", "Content-Type"], max_age=600)
    if loopback:
        app.add_middleware(HostGuard)  # type: ignore[arg-type]
    return app


def _answer_directly(app: FastAPI, path: str) -> None:
    """GET `path` answered without FastAPI's per-request work (solving the route's dependencies and checking
    its query parameters one by one: ~0.9 ms of the event loop's CPU a request, where a recall at 10k memories
    costs ~25). A route of its own, in front of the FastAPI one, checks the query in one go with a model made
    of that route's parameters, calls its endpoint and serialises the answer with its response field: the
    same answers, the same 422s, and the FastAPI route still makes the schema (and answers other methods:
    405). The route must take query parameters only."""
    from fastapi.routing import APIRoute, serialize_response
    from pydantic import ValidationError, create_model
    from starlette.responses import Response
    from starlette.routing import Route

    routes = app.router.routes
    at, route = next((i, r) for i, r in enumerate(routes) if isinstance(r, APIRoute) and r.path == path
                     and "GET" in (r.methods or ()))
    dep = route.dependant
    # the app's HTTPBearer only documents the token (ApiGuard checks it): it refuses nothing
    documents_only = all(isinstance(d.call, HTTPBearer) and not d.call.auto_error for d in dep.dependencies)
    if dep.path_params or dep.header_params or dep.cookie_params or dep.body_params or not documents_only:
        raise ValueError(f"{path}: only a route of query parameters can be answered directly")
    names = {p.name: p.alias for p in dep.query_params}
    query: type[BaseModel] = create_model(  # type: ignore[call-overload]
        f"{route.name}_query", __config__=ConfigDict(populate_by_name=True),
        **{p.name: (p.field_info.annotation, p.field_info) for p in dep.query_params})
    response_field = route.response_field

    async def endpoint(request: Request) -> Response:
        given = request.query_params
        try:
            values = query.model_validate({name: given[alias] for name, alias in names.items() if alias in given})
        except ValidationError as e:
            raise RequestValidationError([{**err, "loc": ("query", names.get(str(err["loc"][0]), err["loc"][0]),
                                                          *err["loc"][1:])} for err in e.errors()]) from None
        answer = await route.endpoint(**{name: getattr(values, name) for name in names})
        body = await serialize_response(field=response_field, response_content=answer, dump_json=True,
                                        by_alias=route.response_model_by_alias,
                                        exclude_unset=route.response_model_exclude_unset,
                                        exclude_defaults=route.response_model_exclude_defaults,
                                        exclude_none=route.response_model_exclude_none)
        return Response(body, media_type="application/json")

    direct = Route(path, endpoint, methods=["GET"], name=f"{route.name}_directly", include_in_schema=False)
    direct.methods = {"GET"}  # not HEAD, which Starlette adds: the FastAPI route answers it (405), as before
    routes.insert(at, direct)


CONFIRM_TIMEOUT = 300.0  # seconds a confirmation waits for its answer; then the call is declined
_END = object()


class _Pending:
    """A confirmation waiting for the client's answer."""

    def __init__(self) -> None:
        self.answered = threading.Event()
        self.approve = False


class _AgentRuns:
    """The agent runs streaming now: their Stop flags, the confirmations waiting for an answer, and whose they
    are (on a server of many users, only the user who started a run may answer or stop it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancel: dict[str, threading.Event] = {}
        self._owner: dict[str, Any] = {}
        self._pending: dict[tuple[str, str], _Pending] = {}

    def start(self, run_id: str) -> threading.Event:
        with self._lock:
            cancel = self._cancel[run_id] = threading.Event()
            self._owner[run_id] = CURRENT_ENGINE.get(None)  # the request's user (None: a desktop's one engine)
            return cancel

    def _theirs(self, run_id: str) -> bool:
        return run_id in self._owner and self._owner[run_id] is CURRENT_ENGINE.get(None)

    def end(self, run_id: str) -> None:
        with self._lock:
            self._owner.pop(run_id, None)
            cancel = self._cancel.pop(run_id, None)
            waiting = [k for k in self._pending if k[0] == run_id]
            for key in waiting:
                self._pending.pop(key).answered.set()  # declined
        if cancel is not None:
            cancel.set()

    def expect(self, run_id: str, call_id: str) -> _Pending:
        """Make ready for the answer (before the client is told, so that a quick answer finds it)."""
        pending = _Pending()
        with self._lock:
            self._pending[(run_id, call_id)] = pending
        return pending

    def wait(self, run_id: str, call_id: str, pending: _Pending, cancel: threading.Event) -> bool:
        """Block (on the run's worker thread) until the client answers, the run stops, or time runs out."""
        deadline = time.monotonic() + CONFIRM_TIMEOUT
        try:
            while not pending.answered.wait(0.1):
                if cancel.is_set() or time.monotonic() > deadline:
                    return False
            return pending.approve
        finally:
            with self._lock:
                self._pending.pop((run_id, call_id), None)

    def answer(self, run_id: str, call_id: str, approve: bool) -> bool:
        with self._lock:
            pending = self._pending.get((run_id, call_id)) if self._theirs(run_id) else None
        if pending is None:
            return False
        pending.approve = approve
        pending.answered.set()
        return True

    def stop(self, run_id: str) -> bool:
        with self._lock:
            cancel = self._cancel.get(run_id) if self._theirs(run_id) else None
        if cancel is None:
            return False
        cancel.set()
        return True


EXPORT_PIECE = 1 << 16  # bytes of an export sent at a time
EXPORT_AHEAD = 16  # pieces made ahead of the client: a slow client holds the export back, not the memory


def _export_routes(app: FastAPI, eng: Any, call: Callable[..., Any]) -> None:
    """`GET /export` and `POST /import`: this app's export files, for a desktop profile or a server's user."""
    from .errors import Cancelled
    from .transfer import ImportResult

    @app.get("/export", tags=["documents"], response_class=StreamingResponse,
             summary="Everything you own, as this app's export file (JSON Lines, from one snapshot)",
             responses={200: {"content": {"application/x-ndjson": {}},
                              "description": "The export: a header line (with the count of each type of record), "
                                             "then the records (docs/api.md); not encrypted: the client's to protect"}})
    async def export_all() -> StreamingResponse:
        import queue

        loop = asyncio.get_running_loop()
        pieces: queue.Queue[bytes] = queue.Queue(maxsize=EXPORT_AHEAD)
        gone = threading.Event()  # the client went away: the export stops
        export_to = eng.export_to  # the request's user's engine (looked up in the request's context)
        buffer = bytearray()

        def put(piece: bytes) -> None:
            while not gone.is_set():
                try:
                    pieces.put(piece, timeout=0.25)
                    return
                except queue.Full:
                    continue
            raise Cancelled("The client stopped reading the export.")

        def write(data: bytes) -> None:
            buffer.extend(data)
            if len(buffer) >= EXPORT_PIECE:
                put(bytes(buffer))
                buffer.clear()

        def run() -> dict[str, int]:
            counts = export_to(write)
            if buffer:
                put(bytes(buffer))
            return counts

        def take() -> bytes | None:
            try:
                return pieces.get(timeout=0.25)
            except queue.Empty:
                return None

        job = asyncio.ensure_future(call(run, pool="long"))
        job.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved: logged below
        first = None
        while first is None and not (job.done() and pieces.empty()):  # nothing sent yet: an error is a status
            first = await loop.run_in_executor(None, take)
        if first is None:
            job.result()  # raises the export's error (answered as any route's), else nothing to send
            first = b""

        async def stream() -> Any:
            try:
                yield first
                while True:
                    piece = await loop.run_in_executor(None, take)
                    if piece is not None:
                        yield piece
                    elif job.done() and pieces.empty():
                        break
                if job.exception() is not None:  # cut short: the header's counts tell the client
                    e = job.exception()
                    log.error("GET /export failed while sending: %s", type(e).__name__)
            finally:
                gone.set()

        return StreamingResponse(stream(), media_type="application/x-ndjson",
                                 headers={"Content-Disposition": 'attachment; filename="personal-llm-export.jsonl"'})

    @app.post("/import", response_model=ImportResult, tags=["documents"],
              summary="Merge an export of this app (or JSON Lines of memories) whose bytes the client sends "
                      "(multipart form: `file`; `passphrase` for an encrypted one)")
    async def import_export(file: Annotated[UploadFile, File(description="The export file (.jsonl or encrypted)")],
                            passphrase: Annotated[str | None, Form(max_length=1024)] = None) -> ImportResult:
        data = await file.read()
        return await call(eng.import_upload, data, file.filename or "the file", passphrase=passphrase, pool="long")


def _agent_routes(app: FastAPI, eng: Any, call: Callable[..., Any]) -> None:
    from .agent import AgentInfo, ConfirmRequest, new_run_id
    from .errors import Cancelled

    runs = _AgentRuns()

    @app.get("/agents", response_model=list[AgentInfo], tags=["agents"],
             summary="The agents a run may name (built in and the settings' own), with their tools")
    async def agents() -> list[AgentInfo]:
        return await call(eng.list_agents)

    @app.post("/agent/run", tags=["agents"], summary="Run an agent on a task, streaming its steps (NDJSON)",
              response_class=StreamingResponse,
              responses={200: {"content": {"application/x-ndjson": {}},
                               "description": "One JSON object a line: start, step…, confirm…, then done, "
                                              "stopped or error (docs/api.md)"},
                         404: {"model": ErrorBody, "description": "No such agent"},
                         409: {"model": ErrorBody, "description": "No language model can answer now"}})
    async def agent_run(body: AgentRunRequest) -> StreamingResponse:
        from .llm import LLMModelMissing, LLMUnavailable

        try:  # 404 (no such agent), 400 (project outside its scope), 409 (no model) before the stream starts
            name = await call(eng.prepare_agent, body.agent, body.project)
        except (LLMUnavailable, LLMModelMissing) as e:
            raise HTTPException(status_code=409, detail=str(e)) from None
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        run_id = new_run_id()
        cancel = runs.start(run_id)

        def put(item: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def confirm(request: ConfirmRequest) -> bool:
            pending = runs.expect(run_id, request.call_id)
            put({"event": "confirm", **request.model_dump(mode="json")})
            return runs.wait(run_id, request.call_id, pending, cancel)

        job = asyncio.ensure_future(call(
            eng.agent_run, body.task, agent=name, project=body.project, run_id=run_id, cancel=cancel,
            on_step=lambda step: put({"event": "step", **step.model_dump(mode="json", exclude_none=True)}),
            confirm=confirm))
        job.add_done_callback(lambda _job: queue.put_nowait(_END))

        def line(item: dict[str, Any]) -> bytes:
            return (json.dumps(item, ensure_ascii=False) + "\n").encode("utf-8")

        async def stream() -> Any:
            try:
                yield line({"event": "start", "run_id": run_id, "agent": name})
                while (item := await queue.get()) is not _END:
                    yield line(item)
                try:
                    result = job.result()
                except Cancelled:
                    yield line({"event": "stopped", "run_id": run_id})
                except UserError as e:
                    log.info("POST /agent/run: %s", type(e).__name__)
                    yield line({"event": "error", "run_id": run_id, "detail": str(e)})
                except Exception as e:  # noqa: BLE001 - the stream has started: the error is its last line
                    log.error("POST /agent/run failed: %s\n%s", type(e).__name__,
                              "".join(traceback.format_tb(e.__traceback__)))
                    yield line({"event": "error", "run_id": run_id,
                                "detail": "Internal error; details are in the server log."})
                else:
                    yield line({"event": "done", "run_id": run_id, "result": result.model_dump(mode="json")})
            finally:
                runs.end(run_id)  # a client that hung up stops the run

        return StreamingResponse(stream(), media_type="application/x-ndjson")

    @app.post("/agent/run/{run_id}/confirm", response_model=ConfirmResult, tags=["agents"],
              summary="Answer a `confirm` event: run the tool (approve) or not",
              responses={404: {"model": ErrorBody, "description": "No such run, or it is not asking about this call"}})
    async def agent_confirm(run_id: str, body: ConfirmAnswer) -> ConfirmResult:
        if not runs.answer(run_id, body.call_id, body.approve):
            raise HTTPException(status_code=404, detail=f"The run {run_id} is not waiting for an answer about "
                                                        f"{body.call_id}.")
        return ConfirmResult(run_id=run_id, call_id=body.call_id, approve=body.approve)

    @app.post("/agent/run/{run_id}/stop", response_model=StopResult, tags=["agents"],
              summary="Stop a run (its stream ends with a `stopped` event)",
              responses={404: {"model": ErrorBody, "description": "No such run"}})
    async def agent_stop(run_id: str) -> StopResult:
        if not runs.stop(run_id):
            raise HTTPException(status_code=404, detail=f"There is no run {run_id} going on.")
        return StopResult(run_id=run_id, stopping=True)


def _add_docs(app: FastAPI) -> None:
    """The interactive reference at /docs: Swagger UI 5 (it reads OpenAPI 3.1), its scripts and styles from
    the installed fastapi-offline package."""
    from importlib.resources import files

    from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
    from starlette.staticfiles import StaticFiles

    assets = str(files("fastapi_offline").joinpath("static"))
    app.mount(DOCS_ASSETS.rstrip("/"), StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> Any:
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title=f"{app.title} – API", oauth2_redirect_url="/docs/oauth2-redirect",
            swagger_js_url=DOCS_ASSETS + "swagger-ui-bundle.js", swagger_css_url=DOCS_ASSETS + "swagger-ui.css",
            swagger_favicon_url=DOCS_ASSETS + "favicon.png")

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    def docs_redirect() -> Any:
        return get_swagger_ui_oauth2_redirect_html()


def _add_routes(app: FastAPI, eng: Any, call: Callable[..., Any]) -> None:
    from .consolidation import ConflictPair, ConsolidationReport, Resolution

    _agent_routes(app, eng, call)
    _export_routes(app, eng, call)

    @app.post("/ingest", response_model=list[IngestResult], tags=["documents"],
              summary="Ingest files or folders under the folders you allowed, or a text (one result per file)")
    async def ingest(body: IngestRequest) -> list[IngestResult]:
        if body.text is not None:
            result = await call(eng.ingest_text, body.text, body.title or "Untitled", project=body.project,
                                pool="long")
            return [result]
        if eng.profile is None:  # a server's files are not its users' to read
            raise PathRefused("This server reads no paths of its own: upload the file (POST /ingest/upload).")
        policy = PathPolicy.for_engine(eng)
        policy.check_request(body.paths)  # 403 for a path named outside the policy; inside a walk: failed results
        return await call(eng.ingest, [Path(p) for p in body.paths], project=body.project, allow=policy, pool="long")

    @app.get("/documents", response_model=list[Document], tags=["documents"],
             summary="Documents, newest first (failed=true: those that could not be ingested, and why)")
    async def documents(project: Annotated[str | None, Query(max_length=MAX_PROJECT_CHARS)] = None,
                        failed: Annotated[bool, Query(description="List failed documents instead")] = False,
                        ) -> list[Document]:
        return await call(eng.list_documents, project, failed=failed)

    @app.get("/watch", response_model=WatchStatus, tags=["documents"],
             summary="The watched folders and their status (read-only; `personal-llm watch` changes them)")
    async def watched() -> WatchStatus:
        return await call(eng.watch_status)

    @app.post("/ingest/upload", response_model=list[IngestResult], tags=["documents"],
              summary="Ingest a file whose bytes the client sends (multipart form: `file`, optional `project`)")
    async def ingest_upload(file: Annotated[UploadFile, File(description="The document; its name gives its type")],
                            project: Annotated[str | None, Form(max_length=MAX_PROJECT_CHARS)] = None) -> list[IngestResult]:
        data = await file.read()
        return [await call(eng.ingest_upload, data, file.filename or "", project=project, pool="long")]

    @app.post("/import/{source}", response_model=ImportReport, tags=["documents"],
              summary="Import a ChatGPT or Claude export, or an Obsidian vault, from under the folders you allowed")
    async def import_source(source: Literal["chatgpt", "claude", "obsidian"], body: ImportRequest) -> ImportReport:
        if eng.profile is None:
            raise PathRefused("This server reads no paths of its own: an import names a file on the server's disk, "
                              "which it does not read for its users.")
        policy = PathPolicy.for_engine(eng)
        policy.check_request([body.path])
        if source == "obsidian":
            return await call(eng.import_obsidian, Path(body.path), project=body.project, allow=policy)
        method = eng.import_chatgpt if source == "chatgpt" else eng.import_claude
        return await call(method, Path(body.path), project=body.project)

    @app.post("/import/{source}/upload", response_model=ImportReport, tags=["documents"],
              summary="Import a ChatGPT or Claude export whose bytes the client sends (multipart form: `file`, "
                      "its zip or conversations.json; optional `project`)")
    async def import_upload(source: Literal["chatgpt", "claude"],
                            file: Annotated[UploadFile, File(description="The export's zip or conversations.json")],
                            project: Annotated[str | None, Form(max_length=MAX_PROJECT_CHARS)] = None) -> ImportReport:
        data = await file.read()
        return await call(eng.import_chats_upload, source, data, file.filename or "", project=project, pool="long")

    @app.get("/graph/entities", response_model=list[Entity], tags=["graph"],
             summary="The best-connected entities of the knowledge graph, to start browsing from")
    async def graph_entities(limit: Annotated[int, Query(ge=1, le=500)] = 30) -> list[Entity]:
        found = await call(eng.graph_entities, limit)
        return [Entity(name=name, type=kind, facts=facts) for name, kind, facts in found]

    @app.get("/graph/neighbours", response_model=GraphView, tags=["graph"],
             summary="An entity and what is within 1 or 2 hops of it, each fact with the ids it came from",
             responses={404: {"model": ErrorBody, "description": "No such entity"}})
    async def graph_neighbours(entity: Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARS)],
                               hops: Annotated[int, Query(ge=1, le=2)] = 1) -> GraphView:
        return await call(eng.neighbours, entity, hops)

    @app.get("/memory/{id}/graph", response_model=GraphView, tags=["graph"],
             summary="The entities a memory is about and their neighbours",
             responses={404: {"model": ErrorBody, "description": "No such memory"}})
    async def graph_of_memory(id: str, hops: Annotated[int, Query(ge=1, le=2)] = 1) -> GraphView:
        return await call(eng.graph_around_memory, id, hops)

    @app.post("/graph/extract", response_model=ExtractionReport, tags=["graph"],
              summary="Read facts (entity, relation, entity) from the memories and passages not read yet, with "
                      "the language model")
    async def graph_extract(limit: Annotated[int | None, Query(ge=1, le=10_000)] = None) -> ExtractionReport:
        return await call(eng.extract_pending, limit, pool="long")

    @app.post("/ask", response_model=AskResult, tags=["ask"],
              summary="A grounded answer from memory, with numbered sources")
    async def ask(body: AskRequest) -> AskResult:
        extra = {"conversation_id": body.conversation_id} if body.conversation_id else {}
        return await call(eng.ask, body.question, project=body.project, verify=body.verify, pool="long", **extra)

    @app.post("/memory/remember", response_model=RememberResult, tags=["memory"], summary="Store a memory")
    async def remember(body: RememberRequest) -> RememberResult:
        return await call(eng.remember, body.text, kind=body.kind, project=body.project,
                          importance=body.importance, at=epoch(body.at) if body.at else None, embed="auto",
                          uid=body.id, created=epoch(body.created_at) if body.created_at else None, pool="write")

    @app.post("/memory/batch", response_model=list[RememberResult], tags=["memory"],
              summary="Store several memories (e.g. a conversation's turns) in one transaction, one result each")
    async def remember_batch(body: RememberBatch) -> list[RememberResult]:
        from .memories import Remembered

        items = [Remembered(i.text, kind=i.kind, project=i.project, importance=i.importance,
                            at=epoch(i.at) if i.at else None, uid=i.id,
                            created=epoch(i.created_at) if i.created_at else None) for i in body.items]
        return await call(eng.remember_many, items, embed="auto", pool="write")

    @app.get("/memory/recall", response_model=list[Hit], tags=["memory"],
             summary="Search memory by words and meaning")
    async def recall(
        q: Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARS, description="What to look for")],
        k: Annotated[int, Query(ge=1, le=MAX_HITS, description="How many results")] = 10,
        project: Annotated[str | None, Query(max_length=MAX_PROJECT_CHARS, description="Only this project")] = None,
        kind: Literal["fact", "episodic", "procedural", "chunk"] | None = None,
        since: Annotated[datetime | None, Query(description="Only things from this time on (ISO 8601)")] = None,
        until: Annotated[datetime | None, Query(description="Only things up to this time (ISO 8601)")] = None,
        used: Annotated[bool, Query(description="Count the memories returned as used by your user (a recall "
                                                 "alone is not a use; see POST /memory/{id}/used)")] = False,
        archived: Annotated[bool, Query(description="Include archived memories")] = False,
        unscoped: Annotated[bool, Query(description="With project: also memories without a project")] = False,
    ) -> list[Hit]:
        return await call(eng.recall, q, k=k, project=project, kind=kind,
                          since=_query_epoch("since", since), until=_query_epoch("until", until), record_access=used,
                          include_archived=archived, include_unscoped=unscoped)

    @app.post("/memory/{id}/used", response_model=Memory, tags=["memory"],
              summary="Tell the engine your user used this memory (it ranks a little higher among equals)",
              responses={404: {"model": ErrorBody, "description": "No such memory"}})
    async def mark_used(id: str) -> Memory:
        def run() -> Memory:
            memory = eng.get(id)  # 404 for an unknown id
            eng.mark_used([memory.id], how="client")
            return eng.get(id)

        return await call(run, pool="write")

    @app.get("/memories", response_model=MemoryPage, tags=["memory"],
             summary="Memories, newest first, a page at a time (hand `next` back as `after`)")
    async def list_memories(
        kind: Literal["fact", "episodic", "procedural"] | None = None,
        project: Annotated[str | None, Query(max_length=MAX_PROJECT_CHARS)] = None,
        archived: bool = False, activity: bool = False,
        limit: Annotated[int, Query(ge=1, le=MAX_BATCH)] = 50,
        after: Annotated[str | None, Query(max_length=200)] = None,
    ) -> MemoryPage:
        return await call(eng.memory_page, kind=kind, project=project, archived=archived, activity=activity,
                          limit=limit, after=after)

    @app.get("/memory/{id}", response_model=Memory, tags=["memory"], summary="One memory",
             responses={404: {"model": ErrorBody, "description": "No such memory"},
                        405: {"model": ErrorBody, "description": "/memory/remember and /memory/batch take POST"}})
    async def get_memory(id: str) -> Memory:
        if id in _POST_ONLY_MEMORY_ROUTES:  # GET /memory/remember read "No memory with id remember."
            raise HTTPException(status_code=405, headers={"Allow": "POST"})
        return await call(eng.get, id)

    @app.patch("/memory/{id}", response_model=Memory, tags=["memory"],
               summary="Edit a memory; new text drops at once what was made from the old words",
               responses={404: {"model": ErrorBody, "description": "No such memory"}})
    async def update_memory(id: str, body: UpdateRequest) -> Memory:
        return await call(eng.update, id, pool="write", **body.changes())

    @app.delete("/memory/{id}", response_model=ForgetResult, tags=["memory"],
                summary="Forget a memory (mem_…), a document (doc_…) or a conversation (cnv_…) and everything "
                        "derived from it",
                responses={404: {"model": ErrorBody, "description": "No such memory or document"}})
    async def forget(id: str) -> ForgetResult:
        return await call(eng.forget, id, pool="write")

    @app.get("/stats", response_model=Stats, tags=["memory"], summary="Counts and model status")
    async def stats() -> Stats:
        return await call(eng.stats)

    @app.get("/projects", response_model=list[str], tags=["memory"], summary="The projects memories are kept in")
    async def projects() -> list[str]:
        return await call(eng.projects)

    @app.get("/health", response_model=HealthReport, tags=["memory"],
             summary="What works: the search model and the language model answers are written with")
    async def health() -> HealthReport:
        return await call(eng.health)

    @app.get("/activity", response_model=list[AuditRun], tags=["memory"],
             summary="The log of what changed in your memory, newest first, in runs of one kind of write (ids and "
                     "counts, never text)")
    async def activity(limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> list[AuditRun]:
        return await call(eng.audit_runs, limit=limit)

    tidying: set[int] = set()  # the engines tidying up now: one run at a time for each (a user's, on a server)
    tidying_lock = threading.Lock()

    @app.post("/consolidate", response_model=ConsolidationReport, tags=["memory"],
              summary="Tidy up now: decay and archive, roll events up into facts, extract the graph, and flag "
                      "facts that contradict each other (GET /conflicts lists them); the steps that need the "
                      "language model wait without one",
              responses={409: {"model": ErrorBody, "description": "A tidy-up of this memory is running already"}})
    async def consolidate() -> ConsolidationReport:
        run = eng.consolidate  # the request's user's engine (looked up in the request's context)
        key = id(getattr(run, "__self__", run))
        with tidying_lock:
            if key in tidying:
                raise HTTPException(status_code=409, detail="Your memory is being tidied up already (from another "
                                                            "device, or on a schedule); try again when it ends.")
            tidying.add(key)
        try:
            return await call(run, pool="tidy")
        finally:
            with tidying_lock:
                tidying.discard(key)

    @app.get("/conflicts", response_model=list[ConflictPair], tags=["memory"],
             summary="Pairs of facts found to disagree, for you to resolve")
    async def conflicts() -> list[ConflictPair]:
        return await call(eng.conflicts)

    @app.post("/conflicts/{id}/resolve", response_model=Resolution, tags=["memory"],
              summary="Resolve a flagged memory's conflict: keep one (the other is archived) or both",
              responses={404: {"model": ErrorBody, "description": "No such memory"}})
    async def resolve(id: str, body: ResolveRequest) -> Resolution:
        return await call(eng.resolve, id, body.keep, pool="write")

    @app.get("/documents/{id}", response_model=Document, tags=["documents"], summary="One document",
             responses={404: {"model": ErrorBody, "description": "No such document"}})
    async def get_document(id: str) -> Document:
        return await call(eng.get_document, id)

    @app.get("/documents/{id}/passages", response_model=list[Passage], tags=["documents"],
             summary="A document's passages in reading order, each with where it is (page, heading)",
             responses={404: {"model": ErrorBody, "description": "No such document"}})
    async def passages(id: str, limit: Annotated[int, Query(ge=1, le=5000)] = 2000) -> list[Passage]:
        return await call(eng.document_passages, id, limit=limit)

    @app.get("/passage/{id}", response_model=Passage, tags=["documents"],
             summary="One passage (chk_…) with its document",
             responses={404: {"model": ErrorBody, "description": "No such passage"}})
    async def passage(id: str) -> Passage:
        return await call(eng.get_passage, id)

    @app.get("/changes", response_model=ChangesAnswer, tags=["memory"],
             summary="What was written after a token, by any program or device (omit `since`: the current token)")
    async def changes(since: Annotated[int | None, Query(ge=0)] = None) -> ChangesAnswer:
        found = await call(eng.changes_since, since, everyone=True)
        return ChangesAnswer(token=found.token, changes=[
            ChangeItem(action=c.action, memories=sorted(c.memories), documents=sorted(c.documents), graph=c.graph)
            for c in found.changes])


def _transfer_routes(app: FastAPI, eng: Any, call: Callable[..., Any]) -> None:
    """Moving a whole store in and out (a push, a pull: engine/remote.py): records with their vectors."""
    from .transfer import MergeReport, RecordsRefused, SpaceDiffers

    @app.get("/transfer", response_model=TransferInfo, tags=["transfer"],
             summary="What a push must match (the embedding space) and what a pull will bring")
    async def transfer_info() -> TransferInfo:
        space, transfer = eng.space, eng.transfer  # the request's user's (a context variable, not the pool's)

        def run() -> TransferInfo:
            space.ensure()
            return TransferInfo(space=transfer.vector_space(), max_records=MAX_TRANSFER, counts=transfer.counts())

        return await call(run)

    @app.post("/transfer/records", response_model=MergeReport, tags=["transfer"],
              summary="Merge a batch of records (a push) in one transaction: a record already here by its uid is "
                      "not stored again",
              responses={409: {"model": ErrorBody, "description": "Vectors of another embedding space"}})
    async def transfer_records(body: TransferBatch) -> MergeReport:
        if len(body.records) > MAX_TRANSFER:
            raise HTTPException(413, f"A batch holds at most {MAX_TRANSFER} records ({len(body.records)} were sent): "
                                     "send them in several batches.")
        try:
            return await call(eng.transfer.merge, body.records, space=body.space, action="push", pool="write")
        except SpaceDiffers as e:
            raise HTTPException(409, str(e)) from e
        except RecordsRefused as e:
            raise HTTPException(422, str(e)) from e

    @app.post("/transfer/known", response_model=KnownAnswer, tags=["transfer"],
              summary="Which of these records the account holds already (a push sends only the rest)")
    async def transfer_known(body: KnownRequest) -> KnownAnswer:
        asked = sum(len(v) for v in body.keys.values())
        if asked > MAX_KNOWN:
            raise HTTPException(413, f"Ask about at most {MAX_KNOWN} records at once ({asked} were sent).")
        known, turns = await call(eng.transfer.known, body.keys)
        return KnownAnswer(known=known, turns=turns)

    @app.get("/transfer/records", response_model=TransferPage, tags=["transfer"],
             summary="The records of this memory a page at a time (a pull), in dependency order")
    async def transfer_page(after: Annotated[str | None, Query(max_length=100)] = None,
                            limit: Annotated[int, Query(ge=1, le=MAX_TRANSFER)] = 500,
                            vectors: Annotated[bool, Query(description="With the stored vectors")] = True) -> TransferPage:
        found, nxt = await call(eng.transfer.page, after, limit, vectors=vectors)
        return TransferPage(records=found, next=nxt)


# ---------------------------------------------------------------------------------------------------
# composition root
# ---------------------------------------------------------------------------------------------------
def bind_socket(port: int, host: str = HOST) -> socket.socket:
    """A listening socket on loopback (port 0 picks a free port). Made with IPPROTO_TCP named: asyncio turns
    Nagle's algorithm off (TCP_NODELAY) only on sockets whose `proto` says TCP, and connections accepted
    from a socket made with proto 0 kept it on — a response's body then waited for the client's delayed ACK
    of its headers, 40 ms on every request of a kept-alive connection (docs/performance.md)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise UserError(f"Port {port} on {host} is not available ({e.strerror}); choose another with --port.") from e
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _max_body_mb(settings: Any) -> float:
    """$PERSONAL_LLM_API_MAX_BODY_MB, else settings.api_max_body_mb (when the setting exists), else 10."""
    raw = os.environ.get("PERSONAL_LLM_API_MAX_BODY_MB")
    if raw:
        try:
            return float(raw)
        except ValueError as e:
            raise UserError(f"PERSONAL_LLM_API_MAX_BODY_MB must be a number of megabytes, not {raw!r}.") from e
    return float(getattr(settings, "api_max_body_mb", DEFAULT_MAX_BODY_BYTES / 2**20))


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def serve(port: int | None = None, *, max_body_mb: float | None = None,
          announce: Callable[[str], None] | None = None) -> None:
    """Open the profile and serve the API on 127.0.0.1 until interrupted (`personal-llm serve`)."""
    import uvicorn

    from .engine import Engine
    from .logs import setup_logging

    setup_logging("api")
    if threading.current_thread() is threading.main_thread():
        # a SIGTERM (the app stopping its API, a service manager) ends the process through its `finally`s: the
        # store closed, the server file withdrawn. Without a handler of ours, uvicorn raised it again after its
        # graceful shutdown and the default action ended the process right there.
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with Engine.open(actor="api") as eng:
        settings = eng.settings
        port = settings.api_port if port is None else port
        if max_body_mb is None:
            max_body_mb = _max_body_mb(settings)
        app = create_app(eng, eng.api_token(), settings.api_allowed_origins,
                         max_body_bytes=int(max_body_mb * 1024 * 1024))
        sock = bind_socket(port)
        eng.start_background()  # load the embedding model off-thread; backfill vectors
        eng.start_watching()  # the watched folders, unless another program of this profile watches them
        url = f"http://{HOST}:{sock.getsockname()[1]}"
        log.info("serving the API on %s", url)
        # the profile's other programs find this server here (the CLI's recall asks it instead of loading the model)
        runtime.announce(eng.home, sock.getsockname()[1])
        if announce:
            announce(url)
        config = uvicorn.Config(app, access_log=False, log_level="warning", server_header=False,
                                proxy_headers=False, timeout_graceful_shutdown=10)
        try:
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            runtime.withdraw(eng.home)
            sock.close()
