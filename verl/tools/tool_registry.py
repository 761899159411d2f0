"""Every tool a rollout offers, under verl's module path: the ``tool_config_path`` YAML's tools plus the
``function_tool_path`` file's function tools (:func:`load_all_tools`).

The agent-loop worker and the dataset (prompt-length filtering) both call :func:`load_all_tools`, so the schemas
that fill the prompt are the ones the loop dispatches on.
"""

from __future__ import annotations

import os
from enum import Enum

from verl.tools.base_tool import BaseTool
from verl.tools.function_tool import FunctionTool, load_function_tools_from_path
from verl.tools.registry import get_tool_class, initialize_tools_from_config

__all__ = ["ToolType", "get_tool_class", "initialize_tools_from_config", "load_all_tools"]


class ToolType(Enum):
    """The ``config.type`` of a tool config entry; only in-process (native) tools exist."""

    NATIVE = "native"


def load_all_tools(
    tool_config_path: str | os.PathLike | None, function_tool_path: str | os.PathLike | None
) -> list[BaseTool | FunctionTool]:
    """The YAML tools (built fresh on each call), then the function tools (one set per file and process).

    A tool name must be unique across both sources; every clash is reported at once.
    """
    native: list[BaseTool] = initialize_tools_from_config(tool_config_path) if tool_config_path else []
    functions: list[FunctionTool] = load_function_tools_from_path(function_tool_path) if function_tool_path else []
    taken = {tool.name for tool in native}
    collisions = sorted(tool.name for tool in functions if tool.name in taken)
    if collisions:
        raise ValueError(
            f"function tool name(s) {collisions} of rollout.multi_turn.function_tool_path="
            f"{str(function_tool_path)!r} collide with tools of rollout.multi_turn.tool_config_path="
            f"{str(tool_config_path)!r}; a tool name must be unique across both, rename one of them"
        )
    return [*native, *functions]
