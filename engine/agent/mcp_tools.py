"""Tools from other MCP servers the user configured (`settings.agents.mcp_servers`), through the official
`mcp` client over stdio.

Each server is a program started for the occasion: once to list its tools when a run begins, once per
call. A server's tool `lookup` is offered to the model as `SERVER__lookup`; it is `sensitive` (asks
every time) unless the user gave it another level in the server's `permissions`. Its arguments are
checked against the tool's own JSON schema before the call; its answer (text) is what the model reads,
inside `<untrusted_content>` like every tool result.
"""

from __future__ import annotations

import logging
import os
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


def _run(coro_fn: Any, *args: Any) -> Any:
    """Run an async function to completion on this (worker) thread."""
    return anyio.run(coro_fn, *args)


def _params(server: McpServerSettings) -> Any:
    from mcp import StdioServerParameters

    env = {**os.environ, **server.env} if server.env else None
    return StdioServerParameters(command=server.command, args=list(server.args), env=env)


async def _session(server: McpServerSettings, work: Any) -> Any:
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    with open(os.devnull, "w") as quiet:  # the server's stderr is its own business, and may quote data
        async with stdio_client(_params(server), errlog=quiet) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await work(session)


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


def server_tools(server: McpServerSettings) -> list[Tool]:
    """The tools `server` offers now, as agent tools (a server that does not answer raises UserError)."""

    async def listing() -> list[Any]:
        async def work(session: Any) -> list[Any]:
            return list((await session.list_tools()).tools)

        with anyio.fail_after(LIST_TIMEOUT):
            return await _session(server, work)  # type: ignore[no-any-return]

    try:
        listed = _run(listing)
    except Exception as e:  # noqa: BLE001 - a server that fails is a sentence, not a crash
        cause = _flatten(e)
        log.warning("mcp server %s: listing failed (%s)", server.name, type(cause).__name__)
        raise _unavailable(server, cause) from None
    return [_tool(server, t) for t in listed]


def _tool(server: McpServerSettings, listed: Any) -> Tool:
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
        async def call() -> Any:
            async def work(session: Any) -> Any:
                return await session.call_tool(name, arguments.model_dump())

            return await _session(server, work)

        try:
            result = _run(call)
        except Exception as e:  # noqa: BLE001
            cause = _flatten(e)
            log.warning("mcp server %s: call failed (%s)", server.name, type(cause).__name__)
            raise _unavailable(server, cause) from None
        return McpResult(text=_text(result), is_error=bool(result.is_error))

    description = (listed.description or listed.title or name).strip()
    return Tool(name=f"{server.name}{SEPARATOR}{name}"[:64],
                description=f"{description} (from the MCP server '{server.name}')",
                input=McpArguments, output=McpResult,
                permission=server.permissions.get(name, "sensitive"), run=run, check=check, schema=schema)
