"""@function_tool and load_all_tools: what this package adds to verl's behaviour (the schema/name agreement, a file
that fails half-way, verl-style BaseTool subclasses next to function tools)."""

from __future__ import annotations

import asyncio
import textwrap

import pytest

from verl.tools import function_tool as function_tool_module
from verl.tools.base_tool import BaseTool
from verl.tools.function_tool import FUNCTION_TOOL_REGISTRY, function_tool, load_function_tools_from_path
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.tools.tool_registry import load_all_tools


@pytest.fixture(autouse=True)
def clean_registry():
    saved = dict(FUNCTION_TOOL_REGISTRY), dict(function_tool_module._LOADED_FUNCTION_TOOL_PATHS)
    FUNCTION_TOOL_REGISTRY.clear()
    function_tool_module._LOADED_FUNCTION_TOOL_PATHS.clear()
    yield
    FUNCTION_TOOL_REGISTRY.clear()
    function_tool_module._LOADED_FUNCTION_TOOL_PATHS.clear()
    FUNCTION_TOOL_REGISTRY.update(saved[0])
    function_tool_module._LOADED_FUNCTION_TOOL_PATHS.update(saved[1])


def test_derived_schema_keeps_array_item_types():
    @function_tool
    def total(values: list[int]) -> int:
        """Add numbers.

        Args:
            values: the numbers.
        """
        return sum(values)

    schema = FUNCTION_TOOL_REGISTRY["total"].tool_schema.to_dict()
    assert schema["function"]["parameters"]["properties"]["values"] == {
        "type": "array",
        "items": {"type": "integer"},
        "description": "the numbers.",
    }
    assert asyncio.run(FUNCTION_TOOL_REGISTRY["total"].call({"values": [1, 2]})) == 3


def test_an_explicit_schema_must_carry_the_tool_name():
    schema = {"type": "function", "function": {"name": "other", "description": "d"}}
    with pytest.raises(ValueError, match=r"'mine' .* schema= names the function 'other'"):

        @function_tool("mine", schema=schema)
        def mine() -> str:
            return ""

    assert "mine" not in FUNCTION_TOOL_REGISTRY


def test_a_file_that_fails_half_way_leaves_no_tools_and_names_itself(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text(
        textwrap.dedent('''
        from verl.tools.function_tool import function_tool

        @function_tool
        def first(x: str) -> str:
            """First.

            Args:
                x: x.
            """
            return x

        raise RuntimeError("configuration missing")
    ''')
    )
    with pytest.raises(RuntimeError, match="configuration missing") as info:
        load_function_tools_from_path(path)
    assert any(str(path) in note for note in info.value.__notes__)
    assert FUNCTION_TOOL_REGISTRY == {}
    path.write_text(path.read_text().replace('raise RuntimeError("configuration missing")', ""))
    assert [t.name for t in load_function_tools_from_path(path)] == ["first"]  # the fixed file loads


class SchemaMethodTool(BaseTool):
    """verl's way to give a tool its schema: override get_openai_tool_schema."""

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema(
            **{
                "type": "function",
                "function": {
                    "name": "lookup",
                    "description": "Look up.",
                    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
                },
            }
        )

    async def execute(self, instance_id, parameters, **kwargs):
        state = self.instance_state(instance_id)
        return ToolResponse(text=f"{parameters['key']}={state['create_kwargs'].get('truth')}"), 0.0, {}


def test_verl_style_tools_and_function_tools_load_together(tmp_path):
    yaml_path = tmp_path / "tools.yaml"
    yaml_path.write_text(f"tools:\n  - class_name: {__name__}.SchemaMethodTool\n    config: {{type: native}}\n")
    functions = tmp_path / "functions.py"
    functions.write_text(
        textwrap.dedent('''
        from verl.tools.function_tool import function_tool

        @function_tool
        def shout(text: str) -> str:
            """Upper-case text.

            Args:
                text: the text.
            """
            return text.upper()
    ''')
    )
    tools = {tool.name: tool for tool in load_all_tools(yaml_path, functions)}
    assert set(tools) == {"lookup", "shout"}

    async def use() -> str:
        lookup = tools["lookup"]
        instance_id, _ = await lookup.create(create_kwargs={"truth": 7})  # verl's calling convention
        response, _, _ = await lookup.execute(instance_id, {"key": "a"})
        await lookup.release(instance_id)
        return response.text

    assert asyncio.run(use()) == "a=7"

    bad = tmp_path / "tools_bad.yaml"
    bad.write_text(f"tools:\n  - class_name: {__name__}.SchemaMethodTool\n    config: {{type: mcp}}\n")
    with pytest.raises(ValueError, match=r"tools\[0\].config.type: only 'native' tools are supported"):
        load_all_tools(bad, None)
