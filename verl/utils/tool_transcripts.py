"""SFT warm-up data for the calculator tasks (``tool_calc``, ``tool_mul``, ``tool_mul3``): tool-call transcripts.

From a random init the tiny model essentially never writes a well-formed ``<tool_call>``, so GRPO with the tool
agent loop would see no tool use to reinforce. A short SFT run on these transcripts teaches the *format*; RL then
has something to improve.

Each row is one finished ``ToolAgentLoop`` trajectory, in two layouts:

* ``messages`` + ``tools`` (for ``data.multiturn.enable=true``, the layout to use): the conversation -- user question,
  assistant turn holding the call as text, tool answer, assistant final answer -- and the tool schemas as JSON text.
  ``SFTDataset`` tokenizes it as the loop builds its trajectory and puts the loss on the assistant turns only, so the
  model learns to *read* the tool's answer rather than to guess it.
* ``prompt`` + ``response`` (single-response SFT, kept for older scripts): the system message carries the template's
  tool block, and the response is the rest of the trajectory as one string, tool turn included -- so that loss also
  trains on the tool's answer.

``tool_fraction`` < 1 makes the remaining rows answer directly, without a call. The warm-up then leaves a policy that
uses the tool only some of the time, and RL has to discover that calling it pays (the direct answers of 2-digit
arithmetic are mostly wrong).
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verl.tools.calculator_tool import CalculatorTool, format_number, safe_eval
from verl.utils.synthetic_tasks import TOOL_NAME, TOOL_TASKS, get_task, write_rows
from verl.utils.tiny_model import EOS_TOKEN

__all__ = [
    "SFT_DATA_SOURCE",
    "calculator_call_text",
    "default_tool_schemas",
    "load_tool_schemas",
    "make_transcript_rows",
    "transcript_messages",
    "tool_system_text",
    "transcript_response",
    "write_tool_sft_files",
]

SFT_DATA_SOURCE = "synthetic/tool_calc_sft"
_QUESTION = re.compile(r"What is (?P<expr>[0-9+\-*/() ]+)\?")
# the tiny template's rendering of a tool message followed by the generation prompt
_TOOL_TURN = "<|tool|><tool_response>{}</tool_response><|assistant|>"


def default_tool_schemas() -> list[dict[str, Any]]:
    """The calculator's default OpenAI schema, as the loop passes it to the chat template."""
    return [CalculatorTool.default_schema]


def load_tool_schemas(tool_config_path: str | os.PathLike) -> list[dict[str, Any]]:
    """The schemas the loop would use for ``rollout.multi_turn.tool_config_path`` (schema overrides included)."""
    from verl.tools.registry import initialize_tools_from_config

    return [tool.get_openai_tool_schema().to_dict() for tool in initialize_tools_from_config(str(tool_config_path))]


def tool_system_text(tool_schemas: Sequence[dict[str, Any]]) -> str:
    """System-message content that the tiny template renders exactly like ``tools=tool_schemas``."""
    if not tool_schemas:
        raise ValueError("tool_schemas is empty: the transcripts need at least the calculator's schema")
    lines = []
    for schema in tool_schemas:
        function = schema.get("function", schema) if isinstance(schema, dict) else None
        if not isinstance(function, dict) or "name" not in function:
            raise ValueError(f"tool schema {schema!r:.80} has no function name")
        # the template's ``tojson`` is json.dumps with its defaults (key order kept, non-ASCII kept)
        lines.append(json.dumps(function, ensure_ascii=False) + "\n")
    return "Tools:\n" + "".join(lines)


def calculator_call_text(expression: str, tool_name: str = TOOL_NAME) -> str:
    """A hermes call, spelled as the tiny template renders an assistant ``tool_calls`` entry."""
    payload = json.dumps({"name": tool_name, "arguments": {"expression": expression}})
    return f"<tool_call>{payload}</tool_call>"


def transcript_response(expression: str, tool_name: str = TOOL_NAME) -> tuple[str, str]:
    """(response text, final answer): call + ``<eos>`` + inserted tool turn + answer (SFT appends the last eos)."""
    answer = format_number(safe_eval(expression))
    return calculator_call_text(expression, tool_name) + EOS_TOKEN + _TOOL_TURN.format(answer) + answer, answer


def transcript_messages(
    question: str, expression: str, use_tool: bool = True, tool_name: str = TOOL_NAME
) -> list[dict[str, str]]:
    """The conversation of one trajectory: question, call, tool answer, final answer (or question, direct answer)."""
    answer = format_number(safe_eval(expression))
    if not use_tool:
        return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": calculator_call_text(expression, tool_name)},
        {"role": "tool", "content": answer},
        {"role": "assistant", "content": answer},
    ]


def make_transcript_rows(
    size: int,
    seed: int = 0,
    split: str = "train",
    tool_schemas: Sequence[dict[str, Any]] | None = None,
    tool_fraction: float = 1.0,
    task: str = "tool_calc",
) -> list[dict[str, Any]]:
    """``size`` transcript rows over fresh questions of ``task`` (deterministic in all arguments).

    A fraction ``tool_fraction`` of the rows (rounded, spread evenly) calls the calculator; the others answer directly.
    """
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValueError(f"size must be a non-negative int, got {size!r}")
    if not 0.0 <= tool_fraction <= 1.0:
        raise ValueError(f"tool_fraction must be in [0, 1], got {tool_fraction!r}")
    if task not in TOOL_TASKS:
        raise ValueError(f"task must be one of the calculator tasks {list(TOOL_TASKS)}, got {task!r}")
    spec = get_task(task)
    schemas = default_tool_schemas() if tool_schemas is None else list(tool_schemas)
    system = tool_system_text(schemas)
    tools_json = json.dumps(schemas, ensure_ascii=False)
    # the "sft-" split keeps these questions a different stream from the RL rows of the same seed
    rng = random.Random(f"verl-tool-transcripts-{seed}-sft-{split}")
    rows = []
    for index in range(size):
        example = spec.make(rng)
        match = _QUESTION.fullmatch(example.question)
        if match is None:
            raise ValueError(f"{task} question {example.question!r} does not have the form 'What is <expr>?'")
        expression = match.group("expr")
        # row i calls the tool iff floor((i + 1) * f) > floor(i * f): exactly round-down(size * f) calls, spread out
        use_tool = int((index + 1) * tool_fraction) > int(index * tool_fraction)
        response, answer = transcript_response(expression)
        if answer != example.answer:
            raise ValueError(f"calculator gives {answer} for {expression!r}, {task} says {example.answer}")
        rows.append(
            {
                "data_source": SFT_DATA_SOURCE,
                "messages": transcript_messages(example.question, expression, use_tool),
                "tools": tools_json,
                "prompt": [{"role": "system", "content": system}, {"role": "user", "content": example.question}],
                "response": response if use_tool else answer,
                "extra_info": {
                    "split": split,
                    "index": index,
                    "question": example.question,
                    "expression": expression,
                    "answer": answer,
                    "uses_tool": use_tool,
                },
            }
        )
    return rows


def write_tool_sft_files(
    local_dir: str | os.PathLike,
    train_size: int,
    test_size: int,
    seed: int = 0,
    tool_config_path: str | os.PathLike | None = None,
    tool_fraction: float = 1.0,
    task: str = "tool_calc",
) -> dict[str, Path]:
    """Write ``local_dir/sft_train.parquet`` and ``local_dir/sft_test.parquet``.

    Read them with ``data.multiturn.enable=true`` (columns ``messages``/``tools``), or, single-response, with
    ``data.response_key=response``. ``tool_config_path``: the RL run's tool config, so the prompts carry the same
    (possibly overridden) schemas. ``tool_fraction``, ``task``: see :func:`make_transcript_rows`.
    """
    if train_size <= 0 or test_size <= 0:
        raise ValueError(f"train_size and test_size must be positive, got {train_size} and {test_size}")
    schemas = load_tool_schemas(tool_config_path) if tool_config_path is not None else None
    local_dir = Path(local_dir)
    return {
        split: write_rows(
            make_transcript_rows(size, seed, split, schemas, tool_fraction, task), local_dir / f"sft_{split}.parquet"
        )
        for split, size in (("train", train_size), ("test", test_size))
    }


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Write calculator-call SFT transcripts for a calculator task.")
    parser.add_argument("--task", default="tool_calc", choices=TOOL_TASKS)
    parser.add_argument("--local_dir", required=True)
    parser.add_argument("--train_size", type=int, default=2048)
    parser.add_argument("--test_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tool_config_path", default=None, help="tool YAML of the RL run (schema overrides)")
    parser.add_argument(
        "--tool_fraction",
        type=float,
        default=1.0,
        help="fraction of rows that call the calculator; the others answer directly",
    )
    args = parser.parse_args(argv)
    try:
        paths = write_tool_sft_files(
            os.path.expanduser(args.local_dir),
            args.train_size,
            args.test_size,
            args.seed,
            args.tool_config_path,
            args.tool_fraction,
            args.task,
        )
    except ValueError as err:
        parser.error(str(err))
    for split, path in paths.items():
        print(f"{split}: {path}")


if __name__ == "__main__":
    main()
