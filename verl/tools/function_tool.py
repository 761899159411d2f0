"""Plain Python functions as tools: ``@function_tool`` and ``rollout.multi_turn.function_tool_path``.

A :class:`BaseTool` has a per-trajectory lifecycle (create / execute / calc_reward / release). Most tools need none
of it: they map arguments to an answer. Those can be written as one typed, documented function::

    @function_tool                      # the tool is named after the function
    def get_weather(city: str) -> dict:
        '''Current weather of a city.

        Args:
            city: the city to look up.
        '''

The schema the model sees is derived from the signature and the Google-style docstring
(``transformers.utils.get_json_schema``), so every parameter needs a type hint and an ``Args:`` line; a function
that lacks them fails when it is decorated, not when the model first calls it. ``schema=`` skips the derivation.

The agent loop calls the function with the model's arguments (a sync function on a worker thread, so it cannot stall
the event loop) and turns what it returns into the tool answer with :func:`normalize_function_tool_return`.
Function tools are stateless: the row's ``tools_kwargs`` do not reach them.

``rollout.multi_turn.function_tool_path`` names a Python file whose decorated functions become the rollout's tools
(next to, and named apart from, the ``tool_config_path`` ones); :func:`load_function_tools_from_path` runs it once
per process.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl.tools.base_tool import DEFAULT_TOOL_TIMEOUT_S
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = [
    "FUNCTION_TOOL_REGISTRY",
    "FunctionTool",
    "function_tool",
    "get_function_tool",
    "load_function_tools_from_path",
    "normalize_function_tool_return",
]

logger = logging.getLogger(__name__)

# tool name -> FunctionTool, for every decorated function of this process
FUNCTION_TOOL_REGISTRY: dict[str, FunctionTool] = {}
# absolute file path -> the tools that file registered (a file runs once per process)
_LOADED_FUNCTION_TOOL_PATHS: dict[str, list[FunctionTool]] = {}


@dataclass
class FunctionTool:
    """A registered function: its tool name, the callable, and the schema the model sees.

    Not a :class:`~verl.tools.base_tool.BaseTool`: the agent loop tells the two kinds apart by type, because a
    function tool has no instance to create or release.
    """

    name: str
    fn: Callable[..., Any]
    tool_schema: OpenAIFunctionToolSchema
    is_async: bool = False
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S

    async def call(self, parameters: dict[str, Any]) -> Any:
        """Run the function on the model's arguments (a sync function runs on a worker thread)."""
        if self.is_async:
            return await self.fn(**parameters)
        return await asyncio.to_thread(self.fn, **parameters)


def _qualified(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _schema_from_function(fn: Callable[..., Any], tool_name: str) -> OpenAIFunctionToolSchema:
    """The tool schema of ``fn``'s signature and docstring, renamed to ``tool_name``."""
    variadic = [
        name
        for name, param in inspect.signature(fn).parameters.items()
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    if variadic:
        raise ValueError(
            f"@function_tool {tool_name!r} ({_qualified(fn)}) has variadic parameter(s) {variadic}: a tool schema "
            "lists fixed, named arguments; declare them explicitly (e.g. 'items: list[str]' for a list)"
        )
    from transformers.utils import get_json_schema

    raw = get_json_schema(fn)
    raw["function"]["name"] = tool_name
    return OpenAIFunctionToolSchema.model_validate(raw)


def _explicit_schema(
    schema: OpenAIFunctionToolSchema | dict[str, Any], tool_name: str, fn: Callable[..., Any]
) -> OpenAIFunctionToolSchema:
    built = schema if isinstance(schema, OpenAIFunctionToolSchema) else OpenAIFunctionToolSchema.model_validate(schema)
    if built.function.name != tool_name:
        raise ValueError(
            f"@function_tool {tool_name!r} ({_qualified(fn)}): schema= names the function "
            f"{built.function.name!r}; the model calls tools by the schema's name, so the two must agree"
        )
    return built


def _register(
    fn: Callable[..., Any], tool_name: str | None, schema: OpenAIFunctionToolSchema | dict[str, Any] | None
) -> Callable[..., Any]:
    if not callable(fn):
        raise TypeError(f"@function_tool decorates functions, got {fn!r}")
    name = tool_name or fn.__name__
    existing = FUNCTION_TOOL_REGISTRY.get(name)
    if existing is not None and existing.fn is not fn:
        raise ValueError(
            f"function tool {name!r} is already registered to {_qualified(existing.fn)}; {_qualified(fn)} cannot "
            "take its name (rename one of them)"
        )
    tool_schema = _schema_from_function(fn, name) if schema is None else _explicit_schema(schema, name, fn)
    FUNCTION_TOOL_REGISTRY[name] = FunctionTool(
        name=name, fn=fn, tool_schema=tool_schema, is_async=inspect.iscoroutinefunction(fn)
    )
    logger.info("registered function tool %r (%s)", name, _qualified(fn))
    return fn


def function_tool(
    name: str | Callable[..., Any] | None = None, *, schema: OpenAIFunctionToolSchema | dict[str, Any] | None = None
) -> Any:
    """Register a function as a tool; returns the function unchanged.

    Forms: ``@function_tool``, ``@function_tool()``, ``@function_tool("tool_name")``,
    ``@function_tool("tool_name", schema={...})``.

    Args:
        name: the tool name the model uses (default: the function's name).
        schema: the complete ``{"type": "function", "function": {...}}`` schema to use instead of deriving one.
    """
    if callable(name) and schema is None:  # bare @function_tool
        return _register(name, None, None)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"@function_tool(name=...) must be a string, got {name!r}")

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        return _register(fn, name, schema)

    return decorator


def get_function_tool(name: str) -> FunctionTool:
    """The registered function tool ``name``."""
    try:
        return FUNCTION_TOOL_REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(FUNCTION_TOOL_REGISTRY)) or "none"
        raise KeyError(
            f"no function tool named {name!r} (registered: {known}); is the file defining it "
            "rollout.multi_turn.function_tool_path?"
        ) from None


def _module_name(abs_path: str) -> str:
    # unique per file and importable by siblings that do ``from <module> import ...`` through sys.modules
    return "_verl_function_tools_" + "".join(c if c.isalnum() else "_" for c in abs_path)


def load_function_tools_from_path(path: str | os.PathLike) -> list[FunctionTool]:
    """Run the Python file at ``path`` once per process and return the function tools it registered.

    A relative path is taken from the working directory. Calling it again for the same file returns the same tools
    without running the file again (the decorator would refuse the new function objects).
    """
    abs_path = os.path.abspath(os.fspath(path))
    if not os.path.isfile(abs_path):
        raise FileNotFoundError(f"function_tool_path does not exist: {os.fspath(path)} (resolved to {abs_path})")
    if abs_path in _LOADED_FUNCTION_TOOL_PATHS:
        return _LOADED_FUNCTION_TOOL_PATHS[abs_path]
    before = set(FUNCTION_TOOL_REGISTRY)
    module_name = _module_name(abs_path)
    spec = importlib.util.spec_from_file_location(module_name, abs_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"function_tool_path {os.fspath(path)!r}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as err:
        sys.modules.pop(module_name, None)
        for name in set(FUNCTION_TOOL_REGISTRY) - before:  # a half-run file leaves no tools behind
            del FUNCTION_TOOL_REGISTRY[name]
        err.add_note(f"while running function_tool_path {abs_path}")
        raise
    added = sorted(set(FUNCTION_TOOL_REGISTRY) - before)
    if not added:
        logger.warning("function_tool_path %r ran, but no @function_tool decorators found in it", os.fspath(path))
    tools = [FUNCTION_TOOL_REGISTRY[name] for name in added]
    _LOADED_FUNCTION_TOOL_PATHS[abs_path] = tools
    return tools


def _as_response(value: Any) -> ToolResponse:
    if isinstance(value, ToolResponse):
        return value
    if isinstance(value, str):
        return ToolResponse(text=value)
    if isinstance(value, dict):
        return ToolResponse(text=json.dumps(value, ensure_ascii=False))
    return ToolResponse(text=str(value))


def normalize_function_tool_return(ret: Any) -> tuple[ToolResponse, float, dict[str, Any]]:
    """A function tool's return value as ``(ToolResponse, reward, metrics)``.

    ``ToolResponse`` as is; ``str`` as its text; ``dict`` as JSON text; a tuple ``(response,)``,
    ``(response, reward)`` or ``(response, reward, metrics)`` (a None reward is 0.0, None metrics are {}); anything
    else as ``str(ret)``. Tuples of another length are refused: they are almost always a bug in the tool, and the
    model should not read a stringified tuple.
    """
    if not isinstance(ret, tuple):
        return _as_response(ret), 0.0, {}
    if not 1 <= len(ret) <= 3:
        raise TypeError(
            f"a @function_tool returned a tuple of length {len(ret)} ({ret!r:.200}); return length 1, 2, or 3: "
            "(response,), (response, reward) or (response, reward, metrics)"
        )
    reward = ret[1] if len(ret) > 1 else None
    metrics = ret[2] if len(ret) > 2 else None
    return _as_response(ret[0]), 0.0 if reward is None else float(reward), {} if metrics is None else dict(metrics)
