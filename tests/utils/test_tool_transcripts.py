"""The SFT transcripts are token for token what ToolAgentLoop produces for the tiny model's chat template."""

from __future__ import annotations

import asyncio
import json

import pyarrow.parquet as pq
import pytest

from verl.experimental.agent_loop.tool_parser import FunctionCall, get_tool_parser
from verl.tools.calculator_tool import CalculatorTool
from verl.utils.tiny_model import build_tokenizer
from verl.utils.tool_transcripts import (
    calculator_call_text,
    default_tool_schemas,
    load_tool_schemas,
    make_transcript_rows,
    tool_system_text,
    transcript_response,
    write_tool_sft_files,
)

TOKENIZER = build_tokenizer()
SHORT_SCHEMA_YAML = """tools:
  - class_name: calculator
    tool_schema:
      type: function
      function:
        name: calculator
        description: Add things.
        parameters: {type: object, properties: {expression: {type: string}}, required: [expression]}
"""


def render(messages, **kwargs) -> list[int]:
    return list(TOKENIZER.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs))


def test_response_is_the_loop_trajectory_and_the_call_parses():
    response, answer = transcript_response("23*17")
    assert answer == "391"
    ids = TOKENIZER(response, add_special_tokens=False)["input_ids"]
    eos = ids.index(TOKENIZER.eos_token_id)
    turn1, rest = ids[: eos + 1], ids[eos + 1 :]
    # the model's first turn: one readable calculator call (the parser reads the decoded turn as the loop does)
    parsed = asyncio.run(get_tool_parser("hermes", TOKENIZER).extract_tool_calls(turn1))
    assert parsed.items == [FunctionCall(name="calculator", arguments={"expression": "23*17"})]
    assert parsed.content == ""
    # then the tool turn the loop inserts (template render of a tool message + generation prompt, prefix stripped)
    delta = render([{"role": "tool", "content": "391"}], add_generation_prompt=True)[len(render([{}])) :]
    assert rest[: len(delta)] == delta
    # then the final answer; main_sft appends the closing eos
    assert TOKENIZER.decode(rest[len(delta) :]) == "391"


def test_call_text_equals_the_template_rendering_of_a_tool_call():
    response, _ = transcript_response("10-45")
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "10-45"}}}
    rendered = TOKENIZER.apply_chat_template(
        [{"role": "assistant", "content": "", "tool_calls": [call]}], tokenize=False
    )
    assert rendered == "<bos><|assistant|>" + response.split("<eos>")[0] + "<eos>"


@pytest.mark.parametrize("schemas_from", ["default", "yaml"])
def test_sft_prompt_renders_like_the_loop_prompt_with_tools(tmp_path, schemas_from):
    if schemas_from == "yaml":
        path = tmp_path / "tools.yaml"
        path.write_text(SHORT_SCHEMA_YAML)
        schemas = load_tool_schemas(path)
        assert "Add things." in tool_system_text(schemas)
    else:
        schemas = default_tool_schemas()
    for row in make_transcript_rows(5, seed=3, tool_schemas=schemas):
        user_only = [m for m in row["prompt"] if m["role"] == "user"]
        assert render(row["prompt"], add_generation_prompt=True) == render(
            user_only,
            tools=[CalculatorTool.default_schema] if schemas_from == "default" else schemas,
            add_generation_prompt=True,
        )
        assert row["response"].endswith(row["extra_info"]["answer"])


def test_rows_are_deterministic_and_answers_correct():
    rows = make_transcript_rows(30, seed=1)
    assert rows == make_transcript_rows(30, seed=1)
    assert rows != make_transcript_rows(30, seed=2)
    for row in rows:
        a, op, b = (
            row["extra_info"]["expression"][:2],
            row["extra_info"]["expression"][2],
            row["extra_info"]["expression"][3:],
        )
        expected = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        assert row["extra_info"]["answer"] == str(expected)


def test_write_files_and_bad_inputs(tmp_path):
    paths = write_tool_sft_files(tmp_path, 8, 2, seed=0)
    table = pq.read_table(paths["train"])
    assert table.num_rows == 8 and {"messages", "tools", "prompt", "response"} <= set(table.column_names)
    assert pq.read_table(paths["test"]).num_rows == 2
    with pytest.raises(ValueError, match="train_size and test_size must be positive"):
        write_tool_sft_files(tmp_path, 0, 2)
    with pytest.raises(ValueError, match="size must be a non-negative int"):
        make_transcript_rows(-1)
    with pytest.raises(ValueError, match="tool_schemas is empty"):
        tool_system_text([])
    with pytest.raises(ValueError, match="has no function name"):
        tool_system_text([{"type": "function", "function": {"description": "x"}}])


def test_messages_layout_is_the_loop_conversation():
    (row,) = make_transcript_rows(1, seed=4)
    info = row["extra_info"]
    assert row["messages"] == [
        {"role": "user", "content": info["question"]},
        {"role": "assistant", "content": calculator_call_text(info["expression"])},
        {"role": "tool", "content": info["answer"]},
        {"role": "assistant", "content": info["answer"]},
    ]
    assert json.loads(row["tools"]) == default_tool_schemas()
    # the old single-response layout is the same trajectory: prompt with tools + everything after it as one string
    rendered = TOKENIZER.apply_chat_template(row["messages"], tools=json.loads(row["tools"]), tokenize=False)
    assert (
        rendered
        == TOKENIZER.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        + row["response"]
        + "<eos>"
    )


@pytest.mark.parametrize(("fraction", "calls"), [(1.0, 10), (0.0, 0), (0.3, 3), (0.25, 2)])
def test_tool_fraction_sets_how_many_rows_call_the_tool(fraction, calls):
    rows = make_transcript_rows(10, seed=0, tool_fraction=fraction)
    uses = [row["extra_info"]["uses_tool"] for row in rows]
    assert sum(uses) == calls
    for row, use in zip(rows, uses):
        roles = [m["role"] for m in row["messages"]]
        assert roles == (["user", "assistant", "tool", "assistant"] if use else ["user", "assistant"])
        assert row["messages"][-1]["content"] == row["extra_info"]["answer"]
        assert ("<tool_call>" in row["response"]) == use
    # same questions whatever the fraction: only the answer style changes
    assert [r["extra_info"]["question"] for r in rows] == [
        r["extra_info"]["question"] for r in make_transcript_rows(10, seed=0)
    ]
    with pytest.raises(ValueError, match="tool_fraction must be in"):
        make_transcript_rows(2, tool_fraction=1.5)


def test_tool_mul_transcripts_and_bad_task():
    rows = make_transcript_rows(20, seed=0, task="tool_mul", tool_fraction=0.5)
    for row in rows:
        a, b = row["extra_info"]["expression"].split("*")
        assert 10 <= int(a) <= 99 and 2 <= int(b) <= 9
        assert row["extra_info"]["answer"] == str(int(a) * int(b))
    assert sum(row["extra_info"]["uses_tool"] for row in rows) == 10
    with pytest.raises(ValueError, match=r"task must be one of the calculator tasks \['tool_calc', 'tool_mul', "):
        make_transcript_rows(1, task="addition")


def test_tool_mul3_transcripts_copy_from_fixed_offsets():
    from verl.trainer.sft.dataset import tokenize_conversation

    tokenizer = build_tokenizer()
    rows = make_transcript_rows(8, seed=0, task="tool_mul3", tool_fraction=1.0)
    layouts = set()
    for row in rows:
        ids, mask = tokenize_conversation(tokenizer, row["messages"], json.loads(row["tools"]))
        text = [tokenizer.convert_ids_to_tokens(i) for i in ids]
        a, b = row["extra_info"]["expression"].split("*")
        answer = row["extra_info"]["answer"]
        assert len(a) == 2 and len(b) == 1 and len(answer) == 3
        # positions of the question operands, the call's operands, the tool's answer and the final answer
        q = text.index("<|user|>") + len("What is ") + 1
        call = len(text) - 1 - text[::-1].index("<tool_call>")
        layouts.add((len(ids), q, call, tuple(i for i, m in enumerate(mask) if m)))
        assert "".join(text[q : q + 4]) == f"{a}*{b}"
        assert "".join(text[-4:-1]) == answer and text[-1] == "<eos>"
    assert len(layouts) == 1  # every token sits at the same position in every transcript
