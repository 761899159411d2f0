"""verl 0.4-0.7's ``verl.tools.utils.tool_registry``: building the tools of a tool config file.

The tools come from :mod:`verl.tools.registry` (``class_name`` / ``config`` / ``tool_schema`` entries, in-process
``native`` tools). verl's MCP tools (``config.type: mcp``, tools listed by an MCP server) are not part of this build:
such an entry is refused by name and :func:`initialize_mcp_tool` raises ``MissingExtraError``.
"""

from __future__ import annotations

from verl.tools.registry import get_tool_class, initialize_tools_from_config
from verl.tools.tool_registry import ToolType
from verl.utils.extras import unavailable_function

__all__ = ["ToolType", "get_tool_class", "initialize_mcp_tool", "initialize_tools_from_config"]

initialize_mcp_tool = unavailable_function(
    "initialize_mcp_tool",
    __name__,
    "MCP (Model Context Protocol) tools",
    reason="tools run in-process here (config.type: native); wrap the MCP call in a BaseTool subclass instead",
)
