"""Tools the model can call from the tool agent loop: BaseTool, the tool registry / YAML config, a calculator and a
sandboxed Python interpreter. See docs/tools.md."""

from verl.tools.base_tool import BaseTool
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
    OpenAIFunctionSchema,
    OpenAIFunctionToolSchema,
    ToolResponse,
)

__all__ = [
    "BaseTool",
    "OpenAIFunctionParametersSchema",
    "OpenAIFunctionSchema",
    "OpenAIFunctionToolSchema",
    "ToolResponse",
    "get_tool_class",
    "initialize_tools_from_config",
    "list_tool_classes",
    "load_tool_config",
    "register_tool",
    "tools_by_name",
]
