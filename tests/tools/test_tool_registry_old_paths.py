"""verl 0.4-0.7 paths of the tool-config loader: verl.tools.utils.tool_registry and verl.tools.base_tool."""

from __future__ import annotations

import pytest

from verl.tools.registry import initialize_tools_from_config
from verl.utils.extras import MissingExtraError


def test_old_paths_build_the_same_tools(tmp_path):
    from verl.tools.base_tool import initialize_tools_from_config as from_base_tool
    from verl.tools.utils.tool_registry import ToolType, get_tool_class
    from verl.tools.utils.tool_registry import initialize_tools_from_config as from_utils

    assert from_utils is initialize_tools_from_config and from_base_tool is initialize_tools_from_config
    config = tmp_path / "tools.yaml"
    config.write_text("tools:\n  - class_name: calculator\n    config: {type: native}\n")
    tools = from_utils(str(config))
    assert [tool.name for tool in tools] == ["calculator"]
    assert isinstance(tools[0], get_tool_class("calculator")) and ToolType("native") is ToolType.NATIVE


def test_mcp_tools_are_refused_by_name():
    from verl.tools.utils.tool_registry import initialize_mcp_tool

    with pytest.raises(MissingExtraError, match="MCP"):
        initialize_mcp_tool(object, {"config": {"type": "mcp"}})


def test_base_tool_still_reports_unknown_names():
    import verl.tools.base_tool as base_tool

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        base_tool.nope  # noqa: B018
