"""Tool-call parsers: find the calls in a model turn, by format (``rollout.multi_turn.format``).

The contract (verl's): ``content, calls = await parser.extract_tool_calls(response_ids, tools)`` where each call is
a :class:`FunctionCall` whose ``arguments`` are the JSON text the model wrote, and ``parser.stop_token_ids`` are
tokens that must end a generation so the parser can run (for models that do not stop after a call by themselves).

A parser never raises on what the model wrote. The built-in ``hermes`` parser goes further: a call it finds but
cannot read is returned as a :class:`FunctionCall` with ``error`` set, in its place among the others, and the agent
loop answers it with that error, so a malformed call costs the model a turn (and shows up in the metrics) instead of
vanishing.

Formats: ``hermes`` (Hermes / Qwen ``<tool_call>{json}</tool_call>``) here; ``gpt-oss``, ``qwen3_coder``, ``glm``,
``seed``, ``minimax``, ``kimi``, ``deepseek_v4`` and ``gemma4`` in :mod:`.tool_parser_formats`. Add one with
``@ToolParser.register("name")`` on a subclass.
"""

from __future__ import annotations

import abc
import asyncio
import json
import re
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

from pydantic import BaseModel, model_validator

from verl.tools.schemas import OpenAIFunctionToolSchema

__all__ = [
    "FunctionCall",
    "HermesToolParser",
    "ParsedTurn",
    "TextToolParser",
    "ToolParser",
    "get_tool_parser",
    "read_call",
]


class FunctionCall(BaseModel):
    """One call found in a model turn.

    Attributes:
        arguments: the arguments as JSON text (not validated: the loop checks them before the tool runs); a dict
            given here is encoded.
        name: the tool the model called.
        tool_call_id: the id the model gave the call, for formats that carry one (echoed in the tool message).
        error: why the call could not be read (a message for the model), or None for a readable call.
    """

    arguments: str
    name: str
    tool_call_id: str | None = None
    error: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _encode_arguments(cls, values: Any) -> Any:
        if isinstance(values, dict) and isinstance(values.get("arguments"), dict):
            values = {**values, "arguments": json.dumps(values["arguments"], ensure_ascii=False)}
        return values

    def parsed_arguments(self) -> dict[str, Any] | None:
        """The arguments as a dict, or None when they are not a JSON object."""
        try:
            value = json.loads(self.arguments)
        except (json.JSONDecodeError, TypeError):
            return None
        return value if isinstance(value, dict) else None


class ParsedTurn(NamedTuple):
    """A model turn split into its text (calls removed) and its calls in order of appearance; unpacks as verl's
    ``(content, tool_calls)`` pair."""

    content: str
    tool_calls: list[FunctionCall]

    @property
    def items(self) -> list[FunctionCall]:
        """Every call, readable or not."""
        return list(self.tool_calls)

    @property
    def calls(self) -> list[FunctionCall]:
        return [call for call in self.tool_calls if call.error is None]

    @property
    def errors(self) -> list[FunctionCall]:
        return [call for call in self.tool_calls if call.error is not None]

    @property
    def has_calls(self) -> bool:
        return bool(self.tool_calls)


class ToolParser(abc.ABC):
    """Base class of the parsers; ``ToolParser.get_tool_parser(name, tokenizer)`` builds the registered one."""

    _registry: ClassVar[dict[str, type[ToolParser]]] = {}

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    @property
    def stop_token_ids(self) -> list[int]:
        """Tokens the loop adds to the request's stop tokens (none: the model ends a calling turn itself)."""
        return []

    @abc.abstractmethod
    async def extract_tool_calls(
        self, responses_ids: list[int], tools: list[OpenAIFunctionToolSchema] | None = None
    ) -> tuple[str, list[FunctionCall]]:
        """The turn's text without its calls, and the calls. ``tools`` lets a format type the arguments."""

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

    @classmethod
    def get_tool_parser(cls, name: str, tokenizer: Any) -> ToolParser:
        """The parser registered as ``name`` (``rollout.multi_turn.format``); unknown names list the known ones."""
        parser_cls = cls._registry.get(name)
        if parser_cls is None:
            raise ValueError(
                f"rollout.multi_turn.format={name!r} is not a registered tool parser; "
                f"registered: {', '.join(cls.names())}"
            )
        return parser_cls(tokenizer)


def get_tool_parser(name: str, tokenizer: Any) -> ToolParser:
    return ToolParser.get_tool_parser(name, tokenizer)


class TextToolParser(ToolParser):
    """A parser of the decoded text: subclasses implement :meth:`parse`. Decoding runs on a worker thread (a long
    turn takes milliseconds to decode); ``keep_special_tokens`` is for formats whose markup is special tokens."""

    keep_special_tokens: ClassVar[bool] = False

    def decode(self, response_ids: list[int]) -> str:
        return self.tokenizer.decode(response_ids, skip_special_tokens=not self.keep_special_tokens)

    async def extract_tool_calls(
        self, responses_ids: list[int], tools: list[OpenAIFunctionToolSchema] | None = None
    ) -> ParsedTurn:
        text = await asyncio.to_thread(self.decode, list(responses_ids))
        return self.parse(text, tools)

    @abc.abstractmethod
    def parse(self, text: str, tools: list[OpenAIFunctionToolSchema] | None = None) -> ParsedTurn:
        """Split decoded model text into content and calls."""


def _error(index: int, message: str, raw: str, name: str = "") -> FunctionCall:
    return FunctionCall(name=name, arguments=raw, error=f"tool call {index}: {message}")


def read_call(payload: Any, index: int, raw: str = "") -> FunctionCall:
    """One decoded ``{"name": str, "arguments": object | JSON string}`` call object, or an error call."""
    if not isinstance(payload, dict):
        return _error(index, f"expected a JSON object with 'name' and 'arguments', got {type(payload).__name__}", raw)
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return _error(index, f"'name' must be a non-empty string, got {name!r}", raw)
    arguments = payload.get("arguments", {})
    if isinstance(arguments, str):  # some models send the arguments as a JSON-encoded string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as err:
            return FunctionCall(
                name=name,
                arguments=raw,
                error=f"tool call {index} ({name}): 'arguments' is a string that is not valid JSON: {err}",
            )
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return FunctionCall(
            name=name,
            arguments=raw,
            error=f"tool call {index} ({name}): 'arguments' must be a JSON object, got {type(arguments).__name__}",
        )
    return FunctionCall(name=name, arguments=json.dumps(arguments, ensure_ascii=False))


@ToolParser.register("hermes")
class HermesToolParser(TextToolParser):
    """``<tool_call>{json}</tool_call>`` blocks (Hermes / Qwen format). An opening tag without a closing one is an
    error call too: the model meant to call a tool."""

    open_tag = "<tool_call>"
    close_tag = "</tool_call>"

    def parse(self, text: str, tools: list[OpenAIFunctionToolSchema] | None = None) -> ParsedTurn:
        pattern = re.compile(re.escape(self.open_tag) + r"(.*?)" + re.escape(self.close_tag), re.DOTALL)
        calls: list[FunctionCall] = []
        content_parts: list[str] = []
        position = 0
        for index, match in enumerate(pattern.finditer(text), start=1):
            content_parts.append(text[position : match.start()])
            position = match.end()
            raw = match.group(1).strip()
            try:
                payload = json.loads(raw)
            except json.JSONDecodeError as err:
                calls.append(_error(index, f"invalid JSON ({err.msg} at position {err.pos})", raw))
                continue
            calls.append(read_call(payload, index, raw))
        rest = text[position:]
        if self.open_tag in rest:
            before, _, after = rest.partition(self.open_tag)
            content_parts.append(before)
            calls.append(_error(len(calls) + 1, f"{self.open_tag} without {self.close_tag}", after.strip()))
        else:
            content_parts.append(rest)
        return ParsedTurn("".join(content_parts), calls)


# The other formats register themselves on import. Importing the module (not its names) keeps either import order
# working; its classes are reached through __getattr__ below.
from verl.experimental.agent_loop import tool_parser_formats as _formats  # noqa: E402

_FORMAT_CLASSES = frozenset(
    {
        "DeepSeekV4ToolParser",
        "GLMToolParser",
        "Gemma4ToolParser",
        "GptOssToolParser",
        "KimiToolParser",
        "MiniMaxToolParser",
        "Qwen3XMLToolParser",
        "SeedToolParser",
    }
)


def __getattr__(name: str) -> Any:
    if name in _FORMAT_CLASSES:
        return getattr(_formats, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
