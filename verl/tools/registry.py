"""Tools by name and the tool config file (``rollout.multi_turn.tool_config_path``).

YAML format (the verl project's)::

    tools:
      - class_name: verl.tools.calculator_tool.CalculatorTool   # dotted path, file.py:Class, or a short name
        config: {type: native, timeout_s: 5}                     # passed to the tool's constructor
        tool_schema:                                             # optional: the class's default_schema otherwise
          type: function
          function: {name: calculator, description: ..., parameters: {...}}

Short names of the built-in tools: ``calculator``, ``python``; ``@register_tool("name")`` adds more.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verl.tools.base_tool import BaseTool

__all__ = [
    "get_tool_class",
    "initialize_tools_from_config",
    "list_tool_classes",
    "load_tool_config",
    "register_tool",
    "tools_by_name",
]

CONFIG_KEY = "rollout.multi_turn.tool_config_path"

_LAZY: dict[str, str] = {
    "calculator": "verl.tools.calculator_tool:CalculatorTool",
    "python": "verl.tools.python_tool:PythonTool",
}
_REGISTRY: dict[str, type[BaseTool]] = {}


def register_tool(name: str) -> Callable[[type[BaseTool]], type[BaseTool]]:
    """Class decorator: make a BaseTool subclass usable as ``class_name: <name>`` in the tool config."""

    def decorator(cls: type[BaseTool]) -> type[BaseTool]:
        if not (isinstance(cls, type) and issubclass(cls, BaseTool)):
            raise TypeError(f"register_tool({name!r}): {cls!r} is not a BaseTool subclass")
        existing = _REGISTRY.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(f"tool class name {name!r} is already registered to {existing.__qualname__}")
        _REGISTRY[name] = cls
        return cls

    return decorator


def list_tool_classes() -> list[str]:
    return sorted(set(_REGISTRY) | set(_LAZY))


def _import(target: str, where: str) -> Any:
    if ":" in target:
        module_name, attr = target.rsplit(":", 1)
    else:
        module_name, _, attr = target.rpartition(".")
    if not module_name or not attr:
        raise ValueError(
            f"{where}: class_name {target!r} must be a short name ({', '.join(list_tool_classes())}), "
            "'package.module.Class' or 'path/to/file.py:Class'"
        )
    if module_name.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(module_name).stem, module_name)
        if spec is None or not Path(module_name).is_file():
            raise ImportError(f"{where}: class_name {target!r}: no such file {module_name!r}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise ImportError(f"{where}: class_name {target!r}: cannot import {module_name!r}: {err}") from err
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImportError(f"{where}: class_name {target!r}: module {module_name!r} has no {attr!r}") from None


def get_tool_class(class_name: str, where: str = "tool") -> type[BaseTool]:
    """Resolve a short name, dotted path or file path to a BaseTool subclass."""
    if not isinstance(class_name, str) or not class_name:
        raise ValueError(f"{where}: class_name must be a non-empty string, got {class_name!r}")
    if class_name in _REGISTRY:
        return _REGISTRY[class_name]
    target = _LAZY.get(class_name, class_name)
    cls = _import(target, where)
    if not (isinstance(cls, type) and issubclass(cls, BaseTool)):
        raise TypeError(f"{where}: class_name {class_name!r} is {cls!r}, not a BaseTool subclass")
    return cls


def load_tool_config(path: str | Path) -> list[dict[str, Any]]:
    """Read and check the tool config file; returns its entries as plain dicts."""
    from omegaconf import OmegaConf

    file = Path(str(path)).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"{CONFIG_KEY}={str(path)!r}: no such file")
    data = OmegaConf.to_container(OmegaConf.load(file), resolve=True)
    if not isinstance(data, dict) or not isinstance(data.get("tools"), list):
        raise ValueError(f"{CONFIG_KEY}={str(path)!r}: must be a mapping with a 'tools' list")
    entries = []
    for i, entry in enumerate(data["tools"]):
        where = f"{CONFIG_KEY}={str(path)!r} tools[{i}]"
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise ValueError(f"{where}: every entry needs 'class_name', got {entry!r}")
        unknown = set(entry) - {"class_name", "config", "tool_schema"}
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)} (expected class_name, config, tool_schema)")
        if entry.get("config") is not None and not isinstance(entry["config"], dict):
            raise ValueError(f"{where}.config: must be a mapping, got {entry['config']!r}")
        kind = (entry.get("config") or {}).get("type", "native")
        if kind != "native":
            raise ValueError(f"{where}.config.type: only 'native' tools are supported, got {kind!r}")
        entries.append(
            {
                "class_name": entry["class_name"],
                "config": dict(entry.get("config") or {}),
                "tool_schema": entry.get("tool_schema"),
                "where": where,
            }
        )
    return entries


def initialize_tools_from_config(path: str | Path) -> list[BaseTool]:
    """Build every tool the file lists, in file order; tool names must be unique."""
    tools: list[BaseTool] = []
    for entry in load_tool_config(path):
        where = entry["where"]
        cls = get_tool_class(entry["class_name"], where)
        try:
            tool = cls(entry["config"], entry["tool_schema"])
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from err
        tools.append(tool)
    tools_by_name(tools, where=f"{CONFIG_KEY}={str(path)!r}")
    return tools


def tools_by_name(tools: list[BaseTool], where: str = "tools") -> dict[str, BaseTool]:
    """``{tool.name: tool}``; two tools with one name are an error naming it."""
    by_name: dict[str, BaseTool] = {}
    for tool in tools:
        if tool.name in by_name:
            raise ValueError(f"{where}: two tools are named {tool.name!r}")
        by_name[tool.name] = tool
    return by_name
