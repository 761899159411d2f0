"""Tool-call parsers: find the calls in a model turn, by format (``rollout.multi_turn.format``).

A parser never raises on what the model wrote: a call it cannot read becomes a :class:`ToolCallError` the agent
loop reports back to the model, so a malformed call costs the model a turn, not the run.

Built in: ``hermes`` -- ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, any number per turn.
Add a format with ``@ToolParser.register("name")`` on a subclass.
"""

from __future__ import annotations

import abc
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["FunctionCall", "HermesToolParser", "ParsedTurn", "ToolCallError", "ToolParser", "get_tool_parser"]


@dataclass(frozen=True)
class FunctionCall:
    """One call: the tool's name and its arguments (a JSON object)."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolCallError:
    """A call the parser found but could not read; ``message`` is written for the model."""

    message: str
    raw: str = ""


@dataclass
class ParsedTurn:
    """A model turn split into its text (calls removed) and its calls -- readable or not -- in order of appearance
    (the loop answers them in that order)."""

    content: str
    items: list[FunctionCall | ToolCallError] = field(default_factory=list)

    @property
    def calls(self) -> list[FunctionCall]:
        return [item for item in self.items if isinstance(item, FunctionCall)]

    @property
    def errors(self) -> list[ToolCallError]:
        return [item for item in self.items if isinstance(item, ToolCallError)]

    @property
    def has_calls(self) -> bool:
        return bool(self.items)


class ToolParser(abc.ABC):
    """Base class of the parsers; ``get_tool_parser(name, tokenizer)`` builds the registered one."""

    _registry: ClassVar[dict[str, type[ToolParser]]] = {}

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    @classmethod
    def register(cls, name: str) -> Callable[[type[ToolParser]], type[ToolParser]]:
        def decorator(subclass: type[ToolParser]) -> type[ToolParser]:
            existing = cls._registry.get(name)
            if existing is not None and existing is not subclass:
                raise ValueError(f"tool parser {name!r} is already registered to {existing.__qualname__}")
            cls._registry[name] = subclass
            return subclass

        return decorator

    @classmethod
    def names(cls) -> list[str]:
        return sorted(cls._registry)

    def decode(self, response_ids: list[int]) -> str:
        return self.tokenizer.decode(response_ids, skip_special_tokens=True)

    async def extract_tool_calls(self, response_ids: list[int]) -> ParsedTurn:
        """Decode one model turn and parse it (async so that a parser may call out; the built-ins do not)."""
        return self.parse(self.decode(response_ids))

    @abc.abstractmethod
    def parse(self, text: str) -> ParsedTurn:
        """Split decoded model text into content, calls and unreadable calls."""


def get_tool_parser(name: str, tokenizer: Any) -> ToolParser:
    """The parser registered as ``name`` (``rollout.multi_turn.format``); unknown names list the known ones."""
    parser_cls = ToolParser._registry.get(name)
    if parser_cls is None:
        raise ValueError(f"rollout.multi_turn.format={name!r} is not a registered tool parser; "
                         f"registered: {', '.join(ToolParser.names())}")
    return parser_cls(tokenizer)


def read_call(payload: Any, index: int) -> FunctionCall | ToolCallError:
    """Check one decoded ``{"name": str, "arguments": object | JSON string}`` call object."""
    where = f"tool call {index}"
    if not isinstance(payload, dict):
        return ToolCallError(f"{where}: expected a JSON object with 'name' and 'arguments', got "
                             f"{type(payload).__name__}")
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return ToolCallError(f"{where}: 'name' must be a non-empty string, got {name!r}")
    arguments = payload.get("arguments", {})
    if isinstance(arguments, str):  # some models send the arguments as a JSON-encoded string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as err:
            return ToolCallError(f"{where} ({name}): 'arguments' is a string that is not valid JSON: {err}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ToolCallError(f"{where} ({name}): 'arguments' must be a JSON object, got {type(arguments).__name__}")
    return FunctionCall(name=name, arguments=arguments)


@ToolParser.register("hermes")
class HermesToolParser(ToolParser):
    """``<tool_call>{json}</tool_call>`` blocks (Hermes / Qwen format). An opening tag without a closing one is an
    error too: the model meant to call a tool."""

    open_tag = "<tool_call>"
    close_tag = "</tool_call>"

    def parse(self, text: str) -> ParsedTurn:
        pattern = re.compile(re.escape(self.open_tag) + r"(.*?)" + re.escape(self.close_tag), re.DOTALL)
        items: list[FunctionCall | ToolCallError] = []
        content_parts: list[str] = []
        position = 0
        for index, match in enumerate(pattern.finditer(text), start=1):
            content_parts.append(text[position:match.start()])
            position = match.end()
            raw = match.group(1).strip()
            try:
                payload = json.loads(raw)
            except json.JSONDecodeError as err:
                items.append(ToolCallError(f"tool call {index}: invalid JSON ({err.msg} at position {err.pos})", raw))
                continue
            result = read_call(payload, index)
            items.append(result if isinstance(result, FunctionCall) else ToolCallError(result.message, raw))
        rest = text[position:]
        if self.open_tag in rest:
            before, _, after = rest.partition(self.open_tag)
            content_parts.append(before)
            items.append(ToolCallError(f"tool call {len(items) + 1}: {self.open_tag} without {self.close_tag}",
                                       after.strip()))
        else:
            content_parts.append(rest)
        return ParsedTurn(content="".join(content_parts).strip(), items=items)
