"""Tools from other MCP servers the user configured (`settings.agents.mcp_servers`), through the official
`mcp` client over stdio.

Each server is a program started for the occasion, once per run: the run's `Links` opens a session on
first use (listing its tools), keeps it for every call of that run on a background event loop, and
closes it (the program ends) when the run ends. A server that fails is started again at the next call.
A server's tool `lookup` is offered to the model as `SERVER__lookup`; it is `sensitive` (asks
every time) unless the user gave it another level in the server's `permissions`. Its arguments are
checked against the tool's own JSON schema before the call; its answer (text) is what the model reads,
inside `<untrusted_content>` like every tool result.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from ..config import McpServerSettings
from ..errors import UserError
from ..lazy import lazy_module
from .tools import Tool, ToolEnv

if TYPE_CHECKING:
    import anyio
    import jsonschema
else:  # imported when an MCP server's tools are first used
    anyio = lazy_module("anyio")
    jsonschema = lazy_module("jsonschema")

log = logging.getLogger(__name__)

SEPARATOR = "__"
LIST_TIMEOUT = 20.0
RESULT_CHARS = 20_000


class McpArguments(BaseModel):
    """Whatever the server's tool takes; checked against its JSON schema by `check`."""

    model_config = ConfigDict(extra="allow")


class McpResult(BaseModel):
    text: str
    is_error: bool = Field(default=False, description="The server says the call failed")


def _params(server: McpServerSettings) -> Any:
    from mcp import StdioServerParameters

    env = {**os.environ, **server.env} if server.env else None
    return StdioServerParameters(command=server.command, args=list(server.args), env=env)


class Link:
    """One live session with one server: its program runs until `close`. Calls may come from any thread
    (several at once); they run on the link's own event loop thread."""

    def __init__(self, server: McpServerSettings):
        from anyio.from_thread import start_blocking_portal
        from mcp import ClientSession
        from mcp.client.stdio import stdio_client

        self.server = server
        self._stack = contextlib.ExitStack()
        try:
            portal = self._stack.enter_context(start_blocking_portal())
            quiet = self._stack.enter_context(open(os.devnull, "w"))  # the server's stderr may quote data
            read, write = self._stack.enter_context(
                portal.wrap_async_context_manager(stdio_client(_params(server), errlog=quiet)))
            self.session = self._stack.enter_context(portal.wrap_async_context_manager(ClientSession(read, write)))
            self._portal = portal
            self.call(self.session.initialize, timeout=LIST_TIMEOUT)
        except BaseException:
            self.close()
            raise

    def call(self, fn: Any, *args: Any, timeout: float | None = None) -> Any:
        async def run() -> Any:
            if timeout is None:
                return await fn(*args)
            with anyio.fail_after(timeout):
                return await fn(*args)

        return self._portal.call(run)

    def close(self) -> None:
        try:
            self._stack.close()
        except BaseException as e:  # noqa: BLE001 - a server that will not stop cleanly is still gone
            log.info("mcp server %s: closing failed (%s)", self.server.name, type(_flatten(e)).__name__)


class Links:
    """The sessions of one agent run (or one listing), by server name; `close` ends them all."""

    def __init__(self) -> None:
        self._links: dict[str, Link] = {}
        self._lock = threading.Lock()
        self._closed = False

    def get(self, server: McpServerSettings) -> Link:
        with self._lock:
            if self._closed:
                raise UserError("The agent's run has ended; its MCP servers are closed.")
            link = self._links.get(server.name)
            if link is None:
                link = self._links[server.name] = Link(server)
            return link

    def drop(self, server: McpServerSettings) -> None:
        """Forget a failed session: the next call starts the server again."""
        with self._lock:
            link = self._links.pop(server.name, None)
        if link is not None:
            link.close()

    def close(self) -> None:
        with self._lock:
            links, self._links, self._closed = list(self._links.values()), {}, True
        for link in links:
            link.close()

    def __enter__(self) -> Links:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unavailable(server: McpServerSettings, e: BaseException) -> UserError:
    return UserError(f"The MCP server '{server.name}' ({server.command}) could not be used: "
                     f"{type(e).__name__}. Check its command in settings.")


def _text(result: Any) -> str:
    parts = [getattr(c, "text", None) for c in result.content or ()]
    text = "\n".join(p for p in parts if p)
    if not text and result.structured_content is not None:
        import json

        text = json.dumps(result.structured_content, ensure_ascii=False)
    return text[:RESULT_CHARS]


def _flatten(e: BaseException) -> BaseException:
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]
    return e


def server_tools(server: McpServerSettings, links: Links) -> list[Tool]:
    """The tools `server` offers now, as agent tools calling it through `links` (a server that does not
    answer raises UserError)."""
    try:
        link = links.get(server)
        listed = list(link.call(link.session.list_tools, timeout=LIST_TIMEOUT).tools)
    except Exception as e:  # noqa: BLE001 - a server that fails is a sentence, not a crash
        cause = _flatten(e)
        log.warning("mcp server %s: listing failed (%s)", server.name, type(cause).__name__)
        links.drop(server)
        if isinstance(cause, UserError):
            raise cause from None
        raise _unavailable(server, cause) from None
    return [_tool(server, t, links) for t in listed]


def _tool(server: McpServerSettings, listed: Any, links: Links) -> Tool:
    name = str(listed.name)
    schema = dict(listed.input_schema or {"type": "object", "properties": {}})

    def check(arguments: McpArguments, _env: ToolEnv) -> str | None:
        try:
            jsonschema.validate(arguments.model_dump(), schema)
        except jsonschema.ValidationError as e:
            where = "/".join(str(p) for p in e.absolute_path) or "the arguments"
            return f"invalid arguments for {name} ({where}: {e.validator} check failed)"
        except jsonschema.SchemaError:
            return f"the server's schema for {name} is not valid JSON schema"
        return None

    def run(arguments: McpArguments, _env: ToolEnv) -> McpResult:
        try:
            link = links.get(server)
            result = link.call(link.session.call_tool, name, arguments.model_dump())
        except Exception as e:  # noqa: BLE001
            cause = _flatten(e)
            log.warning("mcp server %s: call failed (%s)", server.name, type(cause).__name__)
            links.drop(server)
            if isinstance(cause, UserError):
                raise cause from None
            raise _unavailable(server, cause) from None
        return McpResult(text=_text(result), is_error=bool(result.is_error))

    description = (listed.description or listed.title or name).strip()
    return Tool(name=f"{server.name}{SEPARATOR}{name}"[:64],
                description=f"{description} (from the MCP server '{server.name}')",
                input=McpArguments, output=McpResult,
                permission=server.permissions.get(name, "sensitive"), run=run, check=check, schema=schema)
