"""The tool-call formats of specific model families (``rollout.multi_turn.format``), besides ``hermes``.

Each parser reads the decoded turn (special tokens kept where the format's markup is made of them), returns the
text before the first call as the content, and one :class:`FunctionCall` per call with JSON-text arguments. A call
too broken to name is skipped (and logged); a value that is not what the tool's schema says is kept as the model
wrote it, for the loop's argument check to report.

============  =====================================================================================  ============
format        markup                                                                                 stop token
============  =====================================================================================  ============
gpt-oss       ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{..}<|call|>``
qwen3_coder   ``<tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>``
glm           ``<tool_call>NAME<arg_key>KEY</arg_key><arg_value>value</arg_value></tool_call>``      <|observation|>
seed          ``<seed:tool_call><function=NAME><parameter=KEY>value</parameter></function>...``
minimax       ``<minimax:tool_call><invoke name="NAME"><parameter name="KEY">v</parameter></invoke>``
kimi          ``<|tool_calls_section_begin|><|tool_call_begin|>ID<|tool_call_argument_begin|>{..}...``  <|im_end|>
deepseek_v4   ``<｜DSML｜tool_calls><｜DSML｜invoke name="NAME"><｜DSML｜parameter name=K string=..>``
gemma4        ``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:5}<tool_call|>``                          <tool_call|>
============  =====================================================================================  ============
"""

from __future__ import annotations

import ast
import json
import logging
import re
from typing import Any

from verl.experimental.agent_loop.tool_parser import FunctionCall, ParsedTurn, TextToolParser, ToolParser
from verl.tools.schemas import OpenAIFunctionToolSchema

__all__ = [
    "DeepSeekV4ToolParser",
    "GLMToolParser",
    "Gemma4ToolParser",
    "GptOssToolParser",
    "KimiToolParser",
    "MiniMaxToolParser",
    "Qwen3XMLToolParser",
    "SeedToolParser",
]

logger = logging.getLogger(__name__)


def _call(name: str, arguments: dict[str, Any], tool_call_id: str | None = None) -> FunctionCall:
    return FunctionCall(name=name, arguments=json.dumps(arguments, ensure_ascii=False), tool_call_id=tool_call_id)


def _json_or_text(raw: str) -> Any:
    """A value written as JSON where it parses (numbers, lists, objects, true/false/null), else the stripped text."""
    value = raw.strip()
    try:
        return json.loads(value)
    except (json.JSONDecodeError, ValueError):
        return value


def _token_id(tokenizer: Any, token: str) -> list[int]:
    """``[id]`` of ``token`` when the tokenizer knows it as one token, else []."""
    if tokenizer is None:
        return []
    token_id = tokenizer.convert_tokens_to_ids(token)
    unk = getattr(tokenizer, "unk_token_id", None)
    if isinstance(token_id, int) and token_id >= 0 and token_id != unk:
        return [token_id]
    return []


def _before(text: str, marker: str) -> str:
    index = text.find(marker)
    return text if index < 0 else text[:index]


def _without(text: str, *tokens: str | None) -> str:
    for token in tokens:
        if token:
            text = text.replace(token, "")
    return text


@ToolParser.register("gpt-oss")
class GptOssToolParser(TextToolParser):
    """OpenAI harmony format (gpt-oss). Analysis-channel reasoning is dropped first: it may mention calls that are
    not calls. Arguments are passed on as written."""

    keep_special_tokens = True
    _analysis = re.compile(r"(?:<\|start\|>assistant)?<\|channel\|>analysis<\|message\|>.*?<\|end\|>", re.DOTALL)
    _call_pattern = re.compile(
        r"(?:<\|start\|>assistant)?<\|channel\|>[^<]*?to=functions\.([^\s<]+)\s*"
        r"(?:<\|constrain\|>\s*json\s*)?<\|message\|>(.*?)<\|call\|>",
        re.DOTALL,
    )

    def parse(self, text: str, tools: list[OpenAIFunctionToolSchema] | None = None) -> ParsedTurn:
        text = self._analysis.sub("", _without(text, getattr(self.tokenizer, "pad_token", None)))
        matches = list(self._call_pattern.finditer(text))
        if not matches:
            return ParsedTurn(text, [])
        calls = [FunctionCall(name=m.group(1), arguments=m.group(2)) for m in matches]
        return ParsedTurn(self._call_pattern.sub("", text), calls)


def _property_types(tools: list[OpenAIFunctionToolSchema] | None, name: str) -> dict[str, list[str]] | None:
    """``{parameter: [json type, ...]}`` of the tool ``name``, or None when ``tools`` does not define it."""
    for tool in tools or []:
        if tool.type == "function" and tool.function.name == name:
            types = {}
            for key, prop in tool.function.parameters.properties.items():
                declared = prop.type if prop.type is not None else "string"
                types[key] = [str(t).strip().lower() for t in ([declared] if isinstance(declared, str) else declared)]
            return types
    return None


def _convert_typed(raw: str, types: list[str]) -> Any:
    """A parameter written as plain text, converted to its schema type; the text itself where that fails."""
    if raw.lower() == "null":
        return None
    for kind in [t for t in types if t != "null"] or ["string"]:
        if kind in ("string", "str", "text", "varchar", "char", "enum"):
            return raw
        if kind.startswith(("int", "uint", "long", "short", "unsigned")):
            try:
                return int(raw)
            except ValueError:
                continue
        if kind.startswith(("num", "float", "double")):
            try:
                number = float(raw)
            except ValueError:
                continue
            return int(number) if number.is_integer() and "." not in raw and "e" not in raw.lower() else number
        if kind in ("boolean", "bool", "binary"):
            if raw.lower() in ("true", "false"):
                return raw.lower() == "true"
            continue
        # arrays, objects and unknown types: JSON, then Python literals -- never code (literal_eval only)
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            pass
        try:
            return ast.literal_eval(raw)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return raw


@ToolParser.register("qwen3_coder")
class Qwen3XMLToolParser(TextToolParser):
    """Qwen3-Coder / Qwen3.5 XML calls. Values are plain text, typed by the tool's schema. A call or parameter cut
    off by the end of the turn is read as far as it is complete."""

    start_token = "<tool_call>"
    _tool_call = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)$", re.DOTALL)
    _function = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
    _parameter = re.compile(r"<parameter=(.*?)</parameter>|<parameter=(.*)$", re.DOTALL)

    def _parse_xml_function_call(
        self, function_call_str: str, tools: list[OpenAIFunctionToolSchema] | None
    ) -> FunctionCall | None:
        """``NAME><parameter=KEY>value</parameter>...`` (the inside of ``<function=...>``) as a call; None when
        even the name is cut off."""
        name, sep, body = function_call_str.partition(">")
        if not sep:
            logger.warning("qwen3_coder: skipping a call without a complete function header: %r", function_call_str)
            return None
        types = _property_types(tools, name)
        if types is None and tools:
            logger.warning("qwen3_coder: the model called %r, which is not among the tools", name)
        arguments: dict[str, Any] = {}
        for match in self._parameter.finditer(body):
            text = match.group(1) if match.group(1) is not None else match.group(2)
            key, sep, value = text.partition(">")
            if not sep:
                logger.warning("qwen3_coder: skipping a cut-off parameter of %r: %r", name, text)
                continue
            value = value.removeprefix("\n").removesuffix("\n")
            if types is None or key not in types:
                arguments[key] = None if value.lower() == "null" else value
            else:
                arguments[key] = _convert_typed(value, types[key])
        return _call(name, arguments)

    def _function_bodies(self, text: str) -> list[str]:
        blocks = [m.group(1) if m.group(1) is not None else m.group(2) for m in self._tool_call.finditer(text)]
        bodies = []
        for block in blocks or [text]:
            bodies += [m.group(1) if m.group(1) is not None else m.group(2) for m in self._function.finditer(block)]
        return bodies

    def parse(self, text: str, tools: list[OpenAIFunctionToolSchema] | None = None) -> ParsedTurn:
        if self.start_token not in text:
            return ParsedTurn(text, [])
        calls = [
            call
            for body in self._function_bodies(text)
            if (call := self._parse_xml_function_call(body, tools)) is not None
        ]
        if not calls:
            return ParsedTurn(text, [])
        return ParsedTurn(_before(text, self.start_token), calls)


def _strip_leading_thinking(text: str) -> str:
    text = re.sub(r"^\s*<think>.*?</think>", "", text, flags=re.DOTALL)
    return re.sub(r"^\s*</think>", "", text)


@ToolParser.register("glm")
class GLMToolParser(TextToolParser):
    """GLM-4.5+ calls. GLM ends a calling turn with ``<|observation|>``, which is therefore a stop token."""

    keep_special_tokens = True
    start_token, end_token = "<tool_call>", "</tool_call>"
    _block = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
    _pair = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)

    @property
    def stop_token_ids(self) -> list[int]:
        return _token_id(self.tokenizer, "<|observation|>")

    def parse(self, text: str, tools: list[OpenAIFunctionToolSchema] | None = None) -> ParsedTurn:
        if self.start_token not in text or self.end_token not in text:
            return ParsedTurn(text, [])
        calls = []
        for block in self._block.findall(text):
            name, _, _ = block.partition("<arg_key>")
            if not name.strip():
                logger.warning("glm: skipping a call without a name: %r", block)
                continue
            calls.append(_call(name.strip(), {k.strip(): _json_or_text(v) for k, v in self._pair.findall(block)}))
        return ParsedTurn(_strip_leading_thinking(_before(text, self.start_token)), calls)


@ToolParser.register("seed")
class SeedToolParser(TextToolParser):
    """ByteDance Seed calls."""

    keep_special_tokens = True
    start_token, end_token = "<seed:tool_call>", "</seed:tool_call>"
    _block = re.compile(r"<seed:tool_call>(.*?)</seed:tool_call>", re.DOTALL)
    _function = re.compile(r"<function=([^>\n]+)>\s*(.*?)</function>", re.DOTALL)
    _parameter = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)

    def parse(self, text: str, tools: list[OpenAIFunctionToolSchema] | None = None) -> ParsedTurn:
        if self.start_token not in text or self.end_token not in text:
            return ParsedTurn(text, [])
        calls = []
        for block in self._block.findall(text):
            match = self._function.search(block)
            if match is None:
                logger.warning("seed: skipping a call block without <function=...>: %r", block)
                continue
            arguments = {k.strip(): _json_or_text(v) for k, v in self._parameter.findall(match.group(2))}
            calls.append(_call(match.group(1).strip(), arguments))
        return ParsedTurn(_before(text, self.start_token), calls)


@ToolParser.register("minimax")
class MiniMaxToolParser(TextToolParser):
    """MiniMax calls; one block may hold several ``<invoke>``."""

    keep_special_tokens = True
    start_token, end_token = "<minimax:tool_call>", "</minimax:tool_call>"
    _block = re.compile(r"<minimax:tool_call>(.*?)</minimax:tool_call>", re.DOTALL)
    _invoke = re.compile(r'<invoke name="([^"]+)">\s*(.*?)</invoke>', re.DOTALL)
    _parameter = re.compile(r'<parameter name="([^"]+)">(.*?)</parameter>', re.DOTALL)

    def parse(self, text: str, tools: list[OpenAIFunctionToolSchema] | None = None) -> ParsedTurn:
        if self.start_token not in text or self.end_token not in text:
            return ParsedTurn(text, [])
        calls = [
            _call(name.strip(), {k.strip(): _json_or_text(v) for k, v in self._parameter.findall(body)})
            for block in self._block.findall(text)
            for name, body in self._invoke.findall(block)
        ]
        return ParsedTurn(_before(text, self.start_token), calls)


@ToolParser.register("kimi")
class KimiToolParser(TextToolParser):
    """Kimi K2 calls. The model writes an id (``functions.get_weather:0``, ``call-get_weather-0``...) where other
    formats write the name; it is kept as ``tool_call_id`` and the tool name is recovered from it -- an exact name, a
    tool name inside the id, or the only tool whose required arguments the call supplies."""

    keep_special_tokens = True
    section_start = "<|tool_calls_section_begin|>"
    _call_pattern = re.compile(
        r"<\|tool_call_begin\|>(.*?)<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>", re.DOTALL
    )

    @property
    def stop_token_ids(self) -> list[int]:
        return _token_id(self.tokenizer, "<|im_end|>")

    @staticmethod
    def _arguments(raw: str) -> dict[str, Any]:
        try:
            value = json.loads(raw.strip())
        except json.JSONDecodeError:
            logger.warning("kimi: call arguments are not valid JSON; using {}: %r", raw)
            return {}
        return value if isinstance(value, dict) else {}

    @staticmethod
    def _tool_name(call_id: str, arguments: dict[str, Any], tools: list[OpenAIFunctionToolSchema] | None) -> str:
        names = [tool.function.name for tool in tools or [] if tool.type == "function"]
        if not names or call_id in names:
            return call_id
        normalized = call_id.lower().replace("-", "_")
        inside = [name for name in names if name.lower() in normalized]
        if len(inside) == 1:
            return inside[0]
        fitting = [
            tool.function.name
            for tool in tools or []
            if tool.type == "function"
            and tool.function.parameters.required
            and set(tool.function.parameters.required) <= set(arguments)
        ]
        return fitting[0] if len(fitting) == 1 else call_id

    def parse(self, text: str, tools: list[OpenAIFunctionToolSchema] | None = None) -> ParsedTurn:
        if self.section_start not in text:
            return ParsedTurn(text, [])
        calls = []
        for raw_id, raw_arguments in self._call_pattern.findall(text):
            call_id = raw_id.strip()
            arguments = self._arguments(raw_arguments)
            calls.append(_call(self._tool_name(call_id, arguments, tools), arguments, tool_call_id=call_id))
        return ParsedTurn(_before(text, self.section_start), calls)


@ToolParser.register("deepseek_v4")
class DeepSeekV4ToolParser(TextToolParser):
    """DeepSeek-V4 DSML calls: ``string="true"`` marks a raw string value, ``string="false"`` a JSON value. Reasoning
    (everything up to the last ``</think>``) is not content."""

    keep_special_tokens = True
    dsml = "｜DSML｜"
    eos_token = "<｜end▁of▁sentence｜>"

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        tag = re.escape(self.dsml)
        self.start_token = f"<{self.dsml}tool_calls>"
        self._block = re.compile(rf"<{tag}tool_calls>(.*?)</{tag}tool_calls>", re.DOTALL)
        self._invoke = re.compile(rf'<{tag}invoke name="(.*?)">(.*?)</{tag}invoke>', re.DOTALL)
        self._parameter = re.compile(
            rf'<{tag}parameter name="(.*?)" string="(true|false)">(.*?)</{tag}parameter>', re.DOTALL
        )

    def _arguments(self, name: str, body: str) -> dict[str, Any]:
        arguments: dict[str, Any] = {}
        for key, is_string, value in self._parameter.findall(body):
            if is_string == "true":
                arguments[key] = value
                continue
            try:
                arguments[key] = json.loads(value)
            except json.JSONDecodeError:
                logger.warning(
                    "deepseek_v4: parameter %r of %r is marked non-string but is not JSON; kept as text", key, name
                )
                arguments[key] = value
        return arguments

    def parse(self, text: str, tools: list[OpenAIFunctionToolSchema] | None = None) -> ParsedTurn:
        text = _without(text, getattr(self.tokenizer, "pad_token", None), self.eos_token)
        if self.start_token not in text:
            return ParsedTurn(text.rpartition("</think>")[2], [])
        calls = [
            _call(name, self._arguments(name, body))
            for block in self._block.findall(text)
            for name, body in self._invoke.findall(block)
        ]
        content = _before(text, self.start_token).rpartition("</think>")[2]
        return ParsedTurn(content.removesuffix("\n\n"), calls)


@ToolParser.register("gemma4")
class Gemma4ToolParser(TextToolParser):
    """Gemma 4 calls. Gemma keeps generating after ``<tool_call|>``, so that token is a stop token. Values are
    ``<|"|>text<|"|>`` strings or bare numbers / booleans / null."""

    keep_special_tokens = True
    start_token = "<|tool_call>"
    _call_pattern = re.compile(r"<\|tool_call>call:(\w+)\{(.*?)\}<tool_call\|>", re.DOTALL)
    _argument = re.compile(r'(\w+):(?:<\|"\|>(.*?)<\|"\|>|([^,}]*))', re.DOTALL)

    @property
    def stop_token_ids(self) -> list[int]:
        return _token_id(self.tokenizer, "<tool_call|>")

    @staticmethod
    def _bare(value: str) -> Any:
        value = value.strip()
        lowered = value.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        if lowered == "null":
            return None
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                pass
        return value

    def _arguments(self, raw: str) -> dict[str, Any]:
        return {
            m.group(1): m.group(2) if m.group(2) is not None else self._bare(m.group(3))
            for m in self._argument.finditer(raw)
        }

    def parse(self, text: str, tools: list[OpenAIFunctionToolSchema] | None = None) -> ParsedTurn:
        text = _without(text, getattr(self.tokenizer, "pad_token", None))
        matches = self._call_pattern.findall(text) if self.start_token in text else []
        if not matches:
            return ParsedTurn(text, [])
        return ParsedTurn(_before(text, self.start_token), [_call(name, self._arguments(raw)) for name, raw in matches])
