"""Tool-call parsing (hermes; the model-family formats are in test_tool_parser_formats.py) and the parser registry;
interaction config loading."""

from __future__ import annotations

import asyncio
import textwrap

import pytest

from verl.experimental.agent_loop.interaction import (
    ScriptedInteraction,
    initialize_interactions_from_config,
    select_interaction,
)
from verl.experimental.agent_loop.tool_parser import (
    FunctionCall,
    HermesToolParser,
    ParsedTurn,
    TextToolParser,
    ToolParser,
    get_tool_parser,
)
from verl.utils.tiny_model import build_tokenizer

TOKENIZER = build_tokenizer()


def parse(text: str) -> ParsedTurn:
    return HermesToolParser(TOKENIZER).parse(text)


def test_calls_are_found_in_order_with_content_kept():
    turn = parse(
        'Let me compute. <tool_call>{"name": "calculator", "arguments": {"expression": "1+2"}}</tool_call>'
        ' and <tool_call>{"name": "search", "arguments": "{\\"q\\": \\"x\\"}"}</tool_call> done'
    )
    assert turn.calls == [
        FunctionCall(name="calculator", arguments={"expression": "1+2"}),
        FunctionCall(name="search", arguments={"q": "x"}),
    ]
    assert turn.calls[0].arguments == '{"expression": "1+2"}', "arguments are JSON text, as verl's parsers give them"
    assert turn.errors == [] and turn.has_calls
    assert turn.content == "Let me compute.  and  done"
    content, calls = turn  # verl's (content, tool_calls) pair
    assert content == turn.content and calls == turn.calls


def test_plain_text_has_no_calls():
    turn = parse("The answer is 391.")
    assert not turn.has_calls and turn.content == "The answer is 391."


@pytest.mark.parametrize(
    "text, message",
    [
        ("<tool_call>{not json}</tool_call>", "tool call 1: invalid JSON (Expecting property name"),
        ("<tool_call>[1, 2]</tool_call>", "tool call 1: expected a JSON object with 'name' and 'arguments', got list"),
        ('<tool_call>{"name": ""}</tool_call>', "tool call 1: 'name' must be a non-empty string, got ''"),
        (
            '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',
            "tool call 1 (f): 'arguments' must be a JSON object",
        ),
        (
            '<tool_call>{"name": "f", "arguments": "{bad"}</tool_call>',
            "tool call 1 (f): 'arguments' is a string that is",
        ),
        ('<tool_call>{"name": "f"', "tool call 1: <tool_call> without </tool_call>"),
    ],
)
def test_unreadable_calls_become_errors_not_exceptions(text, message):
    turn = parse(text)
    assert turn.calls == [] and len(turn.errors) == 1
    assert turn.errors[0].error.startswith(message), turn.errors[0].error


def test_errors_keep_their_place_among_calls():
    turn = parse('<tool_call>{"name": "a"}</tool_call><tool_call>oops</tool_call><tool_call>{"name": "b"}</tool_call>')
    assert [call.error is None for call in turn.items] == [True, False, True]
    assert turn.items[1].error.startswith("tool call 2: invalid JSON") and turn.items[1].arguments == "oops"
    assert turn.calls[0].arguments == "{}"


def test_extract_decodes_token_ids_without_special_tokens():
    ids = TOKENIZER.encode('<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call><eos>', add_special_tokens=False)
    turn = asyncio.run(get_tool_parser("hermes", TOKENIZER).extract_tool_calls(ids))
    assert turn.calls == [FunctionCall(name="a", arguments={"x": 1})] and turn.content == ""


def test_registry_adds_formats_and_names_unknown_ones():
    @ToolParser.register("bracket_test")
    class BracketParser(TextToolParser):
        def parse(self, text, tools=None):
            name = text[text.index("[") + 1 : text.index("]")]
            return ParsedTurn("", [FunctionCall(name=name, arguments={})])

    assert isinstance(get_tool_parser("bracket_test", TOKENIZER), BracketParser)
    assert "hermes" in ToolParser.names()
    with pytest.raises(ValueError, match=r"format='nope' is not a registered tool parser; registered: .*hermes"):
        get_tool_parser("nope", TOKENIZER)
    with pytest.raises(ValueError, match="tool parser 'hermes' is already registered"):
        ToolParser.register("hermes")(BracketParser)


# ---------------------------------------------------------------- interactions


def test_interaction_config_and_selection(tmp_path):
    path = tmp_path / "interaction.yaml"
    path.write_text(
        textwrap.dedent("""
        interaction:
          - name: one
            class_name: verl.experimental.agent_loop.interaction.ScriptedInteraction
            config: {replies: [hi]}
        """)
    )
    interactions = initialize_interactions_from_config(path)
    assert list(interactions) == ["one"] and isinstance(interactions["one"], ScriptedInteraction)
    assert select_interaction(interactions, None) is None
    assert select_interaction(interactions, {"ground_truth": "1"}) is interactions["one"]
    with pytest.raises(ValueError, match="interaction_kwargs.name='two' is not configured"):
        select_interaction(interactions, {"name": "two"})
    with pytest.raises(ValueError, match="configures no interaction"):
        select_interaction({}, {"name": "one"})


@pytest.mark.parametrize(
    "text, error, message",
    [
        ("interaction: 1\n", ValueError, "must be a mapping with an 'interaction' list"),
        ("interaction:\n  - {name: a}\n", ValueError, r"interaction\[0\]: every entry needs 'class_name'"),
        ("interaction:\n  - {name: a, class_name: no.such.Cls}\n", ImportError, r"interaction\[0\]: cannot load"),
        ("interaction:\n  - {name: a, class_name: collections.OrderedDict}\n", TypeError, "not a BaseInteraction"),
    ],
)
def test_bad_interaction_config_names_the_entry(tmp_path, text, error, message):
    path = tmp_path / "interaction.yaml"
    path.write_text(text)
    with pytest.raises(error, match=message):
        initialize_interactions_from_config(path)


def test_scripted_interaction_plays_replies_then_ends():
    interaction = ScriptedInteraction({"replies": ["again?"]})

    async def go():
        instance = await interaction.start_interaction("i")
        first = await interaction.generate_response(instance, [{"role": "assistant", "content": "5"}])
        second = await interaction.generate_response(instance, [{"role": "assistant", "content": "6"}])
        await interaction.finalize_interaction(instance)
        return first, second

    first, second = asyncio.run(go())
    assert first[:3] == (False, "again?", 0.0)
    assert second[:3] == (True, "", 0.0)
