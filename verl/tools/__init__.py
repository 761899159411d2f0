"""Tools the model can call from the tool agent loop: BaseTool (stateful, per trajectory), ``@function_tool``
(plain functions), the YAML tool config, a calculator and a sandboxed Python interpreter. See docs/tools.md.

``verl.tools.function_tool`` is the module (as in verl); import the decorator from it.
"""

from verl.tools.base_tool import BaseTool
from verl.tools.function_tool import FunctionTool, load_function_tools_from_path
from verl.tools.registry import (
    get_tool_class,
    initialize_tools_from_config,
    list_tool_classes,
    load_tool_config,
    register_tool,
    tools_by_name,
)
from verl.tools.schemas import (
    OpenAIFunctionParametersSchema,
    OpenAIFunctionPropertySchema,
    OpenAIFunctionSchema,
    OpenAIFunctionToolSchema,
    ToolResponse,
)
from verl.tools.tool_registry import load_all_tools

__all__ = [
    "BaseTool",
    "FunctionTool",
    "OpenAIFunctionParametersSchema",
    "OpenAIFunctionPropertySchema",
    "OpenAIFunctionSchema",
    "OpenAIFunctionToolSchema",
    "ToolResponse",
    "get_tool_class",
    "initialize_tools_from_config",
    "list_tool_classes",
    "load_all_tools",
    "load_function_tools_from_path",
    "load_tool_config",
    "register_tool",
    "tools_by_name",
]
