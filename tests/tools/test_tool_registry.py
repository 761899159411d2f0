import textwrap

import pytest

from verl.tools import BaseTool, ToolResponse, get_tool_class, initialize_tools_from_config, register_tool
from verl.tools.calculator_tool import CalculatorTool
from verl.tools.python_tool import PythonTool


@register_tool("echo_for_registry_test")
class EchoTool(BaseTool):
    default_schema = {
        "type": "function",
        "function": {
            "name": "echo",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        },
    }

    async def execute(self, instance_id, parameters, **kwargs):
        return ToolResponse(text=parameters["text"]), 0.0, {}


def _write(tmp_path, text):
    path = tmp_path / "tools.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_yaml_config_builds_tools_in_order(tmp_path):
    path = _write(
        tmp_path,
        """
        tools:
          - class_name: verl.tools.calculator_tool.CalculatorTool
            config: {timeout_s: 3}
          - class_name: python
            config: {wall_timeout_s: 2, memory_mb: 256}
            tool_schema:
              type: function
              function:
                name: run_python
                description: run code
                parameters: {type: object, properties: {code: {type: string}}, required: [code]}
          - class_name: echo_for_registry_test
        """,
    )
    tools = initialize_tools_from_config(path)
    assert [type(t) for t in tools] == [CalculatorTool, PythonTool, EchoTool]
    assert [t.name for t in tools] == ["calculator", "run_python", "echo"]
    assert tools[0].timeout_s == 3.0
    assert tools[1].limits.memory_mb == 256 and tools[1].timeout_s == 7.0


def test_file_path_class_name(tmp_path):
    module = tmp_path / "my_tools.py"
    module.write_text(
        textwrap.dedent("""
        from verl.tools import BaseTool, ToolResponse

        class Shout(BaseTool):
            default_schema = {"type": "function", "function": {"name": "shout"}}

            async def execute(self, instance_id, parameters, **kwargs):
                return ToolResponse(text="HI"), 0.0, {}
        """)
    )
    path = _write(tmp_path, f"tools:\n  - class_name: {module}:Shout\n")
    (tool,) = initialize_tools_from_config(path)
    assert tool.name == "shout"


@pytest.mark.parametrize(
    "text, error, message",
    [
        ("tools: 3\n", ValueError, "must be a mapping with a 'tools' list"),
        ("tools:\n  - config: {}\n", ValueError, r"tools\[0\]: every entry needs 'class_name'"),
        ("tools:\n  - {class_name: calculator, cfg: {}}\n", ValueError, r"tools\[0\]: unknown keys \['cfg'\]"),
        (
            "tools:\n  - {class_name: no.such.module.Tool}\n",
            ImportError,
            r"tools\[0\]: class_name 'no.such.module.Tool'",
        ),
        ("tools:\n  - {class_name: collections.OrderedDict}\n", TypeError, "not a BaseTool subclass"),
        (
            "tools:\n  - {class_name: calculator}\n  - {class_name: calculator}\n",
            ValueError,
            "two tools are named 'calculator'",
        ),
        (
            "tools:\n  - {class_name: calculator, config: {timeout_s: -1}}\n",
            ValueError,
            r"tools\[0\]: tool CalculatorTool config.timeout_s: must be a positive number",
        ),
        ("tools:\n  - {class_name: python, config: {memory_mb: 0}}\n", ValueError, "SandboxLimits.memory_mb"),
    ],
)
def test_bad_config_names_the_entry(tmp_path, text, error, message):
    path = _write(tmp_path, text)
    with pytest.raises(error, match=message):
        initialize_tools_from_config(path)


def test_missing_file_names_the_config_key(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"rollout.multi_turn.tool_config_path=.*no such file"):
        initialize_tools_from_config(tmp_path / "nope.yaml")


def test_class_without_schema_is_refused():
    class NoSchema(BaseTool):
        async def execute(self, instance_id, parameters, **kwargs):
            return ToolResponse(), 0.0, {}

    with pytest.raises(ValueError, match="tool .*NoSchema: no tool_schema given, and the class has neither"):
        NoSchema({})


def test_short_names_resolve():
    assert get_tool_class("calculator") is CalculatorTool
    assert get_tool_class("python") is PythonTool
    with pytest.raises(ValueError, match="must be a short name"):
        get_tool_class("nodots")
