"""The model-family tool-call formats: each parser on text written the way that family writes calls.

The parsers read the decoded turn, so the tokenizer here is a stand-in whose ``decode`` returns a given text (the
formats' special tokens are not in the tiny test vocabulary); it records whether special tokens were kept.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from verl.experimental.agent_loop.tool_parser import ToolParser, get_tool_parser
from verl.tools.schemas import OpenAIFunctionToolSchema


class TextTokenizer:
    """decode() gives back ``text``; known special tokens have ids."""

    pad_token = "<pad>"
    unk_token_id = 0

    def __init__(self, text: str = "", specials: dict[str, int] | None = None):
        self.text = text
        self.specials = specials or {}
        self.skip_special_tokens: bool | None = None

    def decode(self, ids, skip_special_tokens=False):
        self.skip_special_tokens = skip_special_tokens
        return self.text

    def convert_tokens_to_ids(self, token):
        return self.specials.get(token, self.unk_token_id)


def tool(name: str, properties: dict, required: list[str] | None = None) -> OpenAIFunctionToolSchema:
    return OpenAIFunctionToolSchema.from_dict(
        {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {"type": "object", "properties": properties, "required": required or []},
            },
        }
    )


WEATHER = tool("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}}, ["city"])
SEARCH = tool(
    "search",
    {
        "query": {"type": "string"},
        "top_k": {"type": "number"},
        "filters": {"type": "array"},
        "exact": {"type": "boolean"},
    },
    ["query"],
)


def extract(fmt: str, text: str, tools=None, specials=None):
    tokenizer = TextTokenizer(text, specials)
    content, calls = asyncio.run(get_tool_parser(fmt, tokenizer).extract_tool_calls([1, 2, 3], tools))
    return content, calls, tokenizer


def args(call) -> dict:
    return json.loads(call.arguments)


def test_every_verl_format_is_registered():
    assert {"hermes", "gpt-oss", "qwen3_coder", "glm", "seed", "minimax", "kimi", "deepseek_v4", "gemma4"} <= set(
        ToolParser.names()
    )


def test_qwen3_coder_types_values_by_the_schema_and_keeps_the_text_before_calls():
    text = (
        "I will search.\n<tool_call>\n<function=search>\n<parameter=query>\nverl docs\n</parameter>\n"
        "<parameter=top_k>\n3\n</parameter>\n<parameter=filters>\n['a', 'b']\n</parameter>\n"
        "<parameter=exact>\nTrue\n</parameter>\n</function>\n</tool_call>"
    )
    content, calls, tokenizer = extract("qwen3_coder", text, [SEARCH])
    assert content == "I will search.\n"
    assert [c.name for c in calls] == ["search"]
    assert args(calls[0]) == {"query": "verl docs", "top_k": 3, "filters": ["a", "b"], "exact": True}
    assert tokenizer.skip_special_tokens is True


def test_qwen3_coder_reads_a_call_cut_off_by_the_end_of_the_turn():
    _, calls, _ = extract(
        "qwen3_coder", "<tool_call><function=get_weather><parameter=city>Oslo</parameter><parameter=days>2", [WEATHER]
    )
    assert args(calls[0]) == {"city": "Oslo", "days": 2}


def test_glm_reads_key_value_pairs_and_stops_on_observation():
    text = (
        "<think>plan</think>Checking.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call><|observation|>"
    )
    content, calls, tokenizer = extract("glm", text, specials={"<|observation|>": 77})
    assert content == "Checking." and args(calls[0]) == {"city": "Paris", "days": 3}
    assert tokenizer.skip_special_tokens is False
    assert get_tool_parser("glm", TextTokenizer(specials={"<|observation|>": 77})).stop_token_ids == [77]
    assert get_tool_parser("glm", TextTokenizer()).stop_token_ids == []


def test_seed_and_minimax_read_their_xml():
    seed = (
        "ok<seed:tool_call><function=get_weather>\n<parameter=city>Rome</parameter>\n"
        "<parameter=days>[1, 2]</parameter></function></seed:tool_call>"
    )
    content, calls, _ = extract("seed", seed)
    assert content == "ok" and calls[0].name == "get_weather" and args(calls[0]) == {"city": "Rome", "days": [1, 2]}
    minimax = (
        'x<minimax:tool_call><invoke name="get_weather"><parameter name="city">Lima</parameter></invoke>'
        '<invoke name="search"><parameter name="query">"quoted"</parameter></invoke></minimax:tool_call>'
    )
    content, calls, _ = extract("minimax", minimax)
    assert content == "x" and [c.name for c in calls] == ["get_weather", "search"]
    assert args(calls[1]) == {"query": "quoted"}


@pytest.mark.parametrize(
    ("call_id", "arguments", "name"),
    [
        ("get_weather", {"city": "Oslo"}, "get_weather"),  # an exact name
        ("functions.get_weather:0", {"city": "Oslo"}, "get_weather"),  # the name inside the id
        ("call_7", {"query": "x"}, "search"),  # only search's required arguments are given
        ("call_7", {}, "call_7"),  # nothing to go by: the id stays
    ],
)
def test_kimi_recovers_the_tool_name_and_keeps_the_call_id(call_id, arguments, name):
    text = (
        "Sure.<|tool_calls_section_begin|><|tool_call_begin|>"
        + call_id
        + "<|tool_call_argument_begin|>"
        + json.dumps(arguments)
        + "<|tool_call_end|><|tool_calls_section_end|>"
    )
    content, calls, _ = extract("kimi", text, [WEATHER, SEARCH])
    assert content == "Sure." and calls[0].name == name and calls[0].tool_call_id == call_id
    assert args(calls[0]) == arguments


def test_deepseek_v4_reads_dsml_and_drops_reasoning():
    dsml = "｜DSML｜"
    text = (
        f'thinking</think>Let me look.\n\n<{dsml}tool_calls>\n<{dsml}invoke name="search">\n'
        f'<{dsml}parameter name="query" string="true">42</{dsml}parameter>\n'
        f'<{dsml}parameter name="top_k" string="false">5</{dsml}parameter>\n'
        f"</{dsml}invoke>\n</{dsml}tool_calls><｜end▁of▁sentence｜>"
    )
    content, calls, _ = extract("deepseek_v4", text)
    assert content == "Let me look." and args(calls[0]) == {"query": "42", "top_k": 5}
    assert extract("deepseek_v4", "a</think>just text")[:2] == ("just text", [])


def test_gemma4_reads_its_call_syntax_and_stops_on_the_closing_token():
    text = '<|tool_call>call:get_weather{city:<|"|>New York, NY<|"|>,days:2,exact:true}<tool_call|>'
    content, calls, _ = extract("gemma4", "Hm." + text, specials={"<tool_call|>": 99})
    assert content == "Hm." and args(calls[0]) == {"city": "New York, NY", "days": 2, "exact": True}
    assert get_tool_parser("gemma4", TextTokenizer(specials={"<tool_call|>": 99})).stop_token_ids == [99]


def test_gpt_oss_skips_reasoning_and_passes_arguments_on():
    text = (
        "<|channel|>analysis<|message|>maybe to=functions.search <|constrain|>json<|message|>{}<|call|><|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city": "Tokyo"}<|call|>'
    )
    _, calls, _ = extract("gpt-oss", text)
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", '{"city": "Tokyo"}')]


@pytest.mark.parametrize("fmt", ["qwen3_coder", "glm", "seed", "minimax", "kimi", "deepseek_v4", "gemma4", "gpt-oss"])
def test_plain_text_has_no_calls(fmt):
    content, calls, _ = extract(fmt, "The answer is 4.")
    assert calls == [] and content == "The answer is 4."
