"""A small MCP server over stdio, for tests: another program's tools an agent may be given.

    python tests/mcp_tool_server.py

Tools: `forecast(city)` (a made-up forecast, the same for the same city), `send_postcard(to, text)`
(pretends to send; writes one line to $MCP_TOOL_SERVER_LOG when set, so a test can see it ran). With
$MCP_TOOL_SERVER_STARTS set, each start of the program writes its process id there.
"""

from __future__ import annotations

import hashlib
import os

from mcp.server.mcpserver import MCPServer

if os.environ.get("MCP_TOOL_SERVER_STARTS"):
    with open(os.environ["MCP_TOOL_SERVER_STARTS"], "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()}\n")

server = MCPServer("test-tools", log_level="WARNING")

WEATHER = ("sunny", "cloudy", "rainy", "windy")


@server.tool()
def forecast(city: str) -> str:
    """Tomorrow's weather in a city."""
    kind = WEATHER[hashlib.sha256(city.encode()).digest()[0] % len(WEATHER)]
    return f"Tomorrow in {city}: {kind}, 21 °C."


@server.tool()
def send_postcard(to: str, text: str) -> str:
    """Send a postcard to someone."""
    log = os.environ.get("MCP_TOOL_SERVER_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"postcard to {to}\n")
    return f"Sent a postcard to {to}."


if __name__ == "__main__":
    server.run("stdio")
