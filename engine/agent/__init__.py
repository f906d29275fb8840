"""Agents with typed tools: a bounded loop over the model's native tool calling, one audited dispatcher,
permission levels and confirmation (docs/agents.md).

    agents.py      the part (`engine.agents`): built-in and user-defined agents, the loop
    dispatcher.py  the one door of every tool call: validate, permissions, scope, confirm, audit, timeout
    tools.py       the built-in tools (memory, documents, graph, files, dates)
    mcp_tools.py   tools of other MCP servers, through the official `mcp` client
"""

from .agents import AgentInfo, AgentRun, Agents, AgentStep, ToolInfo, new_run_id
from .dispatcher import ConfirmRequest

__all__ = ["AgentInfo", "AgentRun", "AgentStep", "Agents", "ConfirmRequest", "ToolInfo", "new_run_id"]
