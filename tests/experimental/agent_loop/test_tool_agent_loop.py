"""ToolAgentLoop: tool calls are answered through the chat template with mask 0, every malformed call becomes an
error message for the model plus a metric, and the loop stops at its turn and length limits.

The model side: a tiny random model never writes a tool call, so most tests use :class:`ScriptedLLM` -- a TEST
DOUBLE FOR THE LLM ONLY, implementing the RolloutServer contract and returning pre-written model turns -- behind
the real AsyncLLMServerManager. The thing under test is the tool loop, not the engine. The real hf engine drives
the loop in test_tool_agent_loop_engine.py.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from typing import Any

import numpy as np
import pytest

from verl.experimental.agent_loop.server_manager import AsyncLLMServerManager
from verl.experimental.agent_loop.tool_agent_loop import COUNTER_KEYS, ToolAgentLoop, truncate_text
from verl.protocol import DataProto
from verl.tools import BaseTool, ToolResponse, register_tool
from verl.utils.tiny_model import build_tokenizer
from verl.workers.config import HFModelConfig, MultiTurnConfig, RolloutConfig
from verl.workers.rollout.base import RolloutServer, TokenOutput

TOKENIZER = build_tokenizer()
EOS = "<eos>"
PARAMS = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "do_sample": True, "logprobs": True, "ignore_eos": False}
PROMPT = [{"role": "user", "content": "What is 23*17?"}]


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


class ScriptedLLM(RolloutServer):
    """TEST DOUBLE FOR THE LLM: answers the n-th generate call with the n-th scripted turn (token ids of the text),
    cut to ``max_tokens``; log-prob -0.5 per token. Records the prompt of every call."""

    def __init__(self, turns: list[str]):
        self.turns = [TOKENIZER.encode(t, add_special_tokens=False) for t in turns]
        self.prompts: list[list[int]] = []
        self.outputs: list[list[int]] = []

    async def generate(self, prompt_ids, sampling_params, request_id):
        self.prompts.append(list(prompt_ids))
        index = len(self.prompts) - 1
        tokens = (
            self.turns[index] if index < len(self.turns) else TOKENIZER.encode("done<eos>", add_special_tokens=False)
        )
        limit = int(sampling_params["max_tokens"])
        reason = "length" if len(tokens) > limit else "stop"
        tokens = tokens[:limit]
        self.outputs.append(list(tokens))
        return TokenOutput(token_ids=list(tokens), log_probs=[-0.5] * len(tokens), stop_reason=reason)

    async def abort_all(self):
        return None

    async def resume(self):
        return None

    async def update_weights(self, named_tensors, version):
        return {"version": version, "checksum": ""}

    async def sleep(self):
        return None

    async def wake_up(self):
        return None

    async def get_version(self):
        return 0


# ---------------------------------------------------------------- test tools


@register_tool("raising_tool_for_loop_test")
class RaisingTool(BaseTool):
    default_schema = {"type": "function", "function": {"name": "explode"}}

    async def execute(self, instance_id, parameters, **kwargs):
        raise RuntimeError("boom")


@register_tool("slow_tool_for_loop_test")
class SlowTool(BaseTool):
    default_schema = {"type": "function", "function": {"name": "slow"}}
    cancelled = 0

    async def execute(self, instance_id, parameters, **kwargs):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            type(self).cancelled += 1
            raise
        return ToolResponse(text="late"), 0.0, {}


@register_tool("probe_tool_for_loop_test")
class ProbeTool(BaseTool):
    """Records how many calls run at once and the lifecycle calls it saw."""

    default_schema = {
        "type": "function",
        "function": {
            "name": "probe",
            "parameters": {"type": "object", "properties": {"tag": {"type": "string"}}, "required": ["tag"]},
        },
    }

    def __init__(self, config=None, tool_schema=None):
        super().__init__(config, tool_schema)
        self.in_flight = 0
        self.max_in_flight = 0
        self.events: list[str] = []

    async def create(self, instance_id=None, **kwargs):
        # verl's calling convention: the row's create_kwargs arrive as create_kwargs=
        self.events.append(f"create:{kwargs['create_kwargs'].get('ground_truth')}")
        return await super().create(instance_id, **kwargs)

    async def execute(self, instance_id, parameters, **kwargs):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0.05)
        self.in_flight -= 1
        self.events.append(f"execute:{parameters['tag']}")
        return ToolResponse(text=f"probed {parameters['tag']}"), 0.25, {}

    async def calc_reward(self, instance_id, **kwargs):
        self.events.append("calc_reward")
        return 0.75

    async def release(self, instance_id, **kwargs):
        self.events.append("release")
        await super().release(instance_id, **kwargs)


@register_tool("chatty_tool_for_loop_test")
class ChattyTool(BaseTool):
    default_schema = {"type": "function", "function": {"name": "chatty"}}

    async def execute(self, instance_id, parameters, **kwargs):
        return ToolResponse(text="A" * 300 + "Z"), 0.0, {}


TOOLS_YAML = """
tools:
  - class_name: calculator
  - class_name: raising_tool_for_loop_test
  - class_name: slow_tool_for_loop_test
    config: {timeout_s: 0.2}
  - class_name: probe_tool_for_loop_test
  - class_name: chatty_tool_for_loop_test
"""


@pytest.fixture
def tool_config(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text(textwrap.dedent(TOOLS_YAML))
    return str(path)


def make_config(
    tool_config: str | None,
    *,
    response_length: int = 512,
    prompt_length: int = 2048,
    model_path: str = "unused",
    **multi_turn: Any,
) -> dict[str, Any]:
    return {
        "rollout": RolloutConfig(
            name="hf",
            prompt_length=prompt_length,
            response_length=response_length,
            calculate_log_probs=True,
            multi_turn=MultiTurnConfig(enable=True, tool_config_path=tool_config, **multi_turn),
        ),
        "model": HFModelConfig(path=model_path),
    }


def run_loop(config, server, **sample: Any):
    loop = ToolAgentLoop(config, AsyncLLMServerManager([server]), TOKENIZER)
    sample.setdefault("raw_prompt", PROMPT)
    return loop, asyncio.run(loop.run(dict(PARAMS, max_tokens=config["rollout"].response_length), **sample))


def tool_delta(*contents: str) -> list[int]:
    """What the loop must insert after a model turn: the tool messages as the chat template renders them."""
    full = TOKENIZER.apply_chat_template(
        [{"role": "tool", "content": c} for c in contents], tokenize=True, return_dict=False, add_generation_prompt=True
    )
    prefix = TOKENIZER.apply_chat_template([{}], tokenize=True, return_dict=False)
    assert full[: len(prefix)] == prefix
    return list(full[len(prefix) :])


def enc(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=False)


def inserted_texts(out) -> list[str]:
    """The mask-0 spans of a trajectory, decoded."""
    spans, current = [], []
    for token, mask in zip(out.response_ids, out.response_mask):
        if mask == 0:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    return [TOKENIZER.decode(s) for s in spans]


# ---------------------------------------------------------------- the happy path


def test_tool_response_is_inserted_through_the_chat_template_with_mask_zero(tool_config):
    turn1 = call("calculator", expression="23*17") + EOS
    turn2 = "391" + EOS
    server = ScriptedLLM([turn1, turn2])
    _, out = run_loop(
        make_config(tool_config),
        server,
        extra_info={"tools_kwargs": {"calculator": {"create_kwargs": {"ground_truth": "391"}}}},
    )

    delta = tool_delta("391")
    assert TOKENIZER.decode(delta) == "<|tool|><tool_response>391</tool_response><|assistant|>"
    assert out.response_ids == enc(turn1) + delta + enc(turn2)
    assert out.response_mask == [1] * len(enc(turn1)) + [0] * len(delta) + [1] * len(enc(turn2))
    assert out.response_logprobs == [-0.5] * len(enc(turn1)) + [0.0] * len(delta) + [-0.5] * len(enc(turn2))
    # token in, token out: the second request continues exactly the tokens of the first
    assert server.prompts[1] == out.prompt_ids + enc(turn1) + delta
    # the tools are printed in the prompt's system turn
    assert '"name": "calculator"' in TOKENIZER.decode(out.prompt_ids)
    assert out.num_turns == 4
    counts = out.extra_fields["tool_call_counts"]
    assert counts["tool_calls"] == 1 and counts["tool_calls_ok"] == 1 and counts["tool_call_errors"] == 0
    assert out.metrics.counters == counts
    assert out.extra_fields["tool_final_rewards"] == {"calculator": 1.0}
    assert out.extra_fields["termination_reason"] == "done"
    assert out.metrics.tool_calls >= 0.0 and out.metrics.generate_sequences >= 0.0


def test_synthetic_tool_calc_row_is_rewarded_through_the_calculator(tool_config):
    """The synthetic ``tool_calc`` rows name this loop and the calculator: a model that calls it gets reward 1."""
    from verl.utils.synthetic_tasks import make_rows

    (row,) = make_rows("tool_calc", 1, seed=3)
    question = row["extra_info"]["question"]  # "What is 23*17?"
    expression = question.removeprefix("What is ").removesuffix("?")
    server = ScriptedLLM([call("calculator", expression=expression) + EOS, row["extra_info"]["answer"] + EOS])
    assert row["agent_name"] == "tool_agent"
    _, out = run_loop(make_config(tool_config), server, raw_prompt=row["prompt"], extra_info=row["extra_info"])
    (inserted,) = inserted_texts(out)
    assert inserted == f"<|tool|><tool_response>{row['extra_info']['answer']}</tool_response><|assistant|>"
    assert out.extra_fields["tool_final_rewards"] == {"calculator": 1.0}


def test_lifecycle_parallel_calls_and_skipped_extra_calls(tool_config):
    turn1 = "".join(call("probe", tag=t) for t in "abc") + EOS
    server = ScriptedLLM([turn1, "ok" + EOS])
    loop, out = run_loop(
        make_config(tool_config, max_parallel_calls=2),
        server,
        tools_kwargs={"probe": {"create_kwargs": {"ground_truth": "g"}}},
    )
    probe = loop.tools["probe"]
    assert probe.max_in_flight == 2, "the first max_parallel_calls calls run concurrently"
    assert probe.events[0] == "create:g", "one instance per trajectory, created with the row's create_kwargs"
    assert sorted(probe.events[1:3]) == ["execute:a", "execute:b"]
    assert probe.events[3:] == ["calc_reward", "release"]
    (inserted,) = inserted_texts(out)
    assert inserted == TOKENIZER.decode(
        tool_delta("probed a", "probed b", "Error: call skipped; at most 2 tool call(s) per turn")
    )
    counts = out.extra_fields["tool_call_counts"]
    assert counts["tool_calls"] == 3 and counts["tool_calls_ok"] == 2
    assert counts["tool_calls_skipped"] == 1 and counts["tool_call_errors"] == 1
    assert out.extra_fields["tool_rewards"] == [0.25, 0.25]
    assert out.extra_fields["tool_final_rewards"] == {"probe": 0.75}


# ---------------------------------------------------------------- malformed input never crashes


@pytest.mark.parametrize(
    "turn, counter, message",
    [
        (
            '<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>',
            "tool_parse_errors",
            "Error: tool call 1: invalid JSON",
        ),
        ('<tool_call>{"arguments": {}}</tool_call>', "tool_parse_errors", "Error: tool call 1: 'name' must be"),
        (
            '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}',
            "tool_parse_errors",
            "Error: tool call 1: <tool_call> without </tool_call>",
        ),
        (
            call("search", query="x"),
            "tool_unknown_errors",
            "Error: Unknown function 'search'. Available tools: ['calculator', 'chatty',",
        ),
        (
            call("calculator", expr="1+1"),
            "tool_argument_errors",
            "Error: calculator: missing required argument(s) ['expression']",
        ),
        (call("explode"), "tool_exceptions", "Error executing tool 'explode': RuntimeError: boom"),
        (call("slow"), "tool_timeouts", "Error: tool 'slow' timed out after 0.2s"),
    ],
)
def test_malformed_calls_become_error_messages_and_metrics(tool_config, turn, counter, message):
    server = ScriptedLLM([turn + EOS, "sorry" + EOS])
    _, out = run_loop(make_config(tool_config), server)
    (inserted,) = inserted_texts(out)
    assert inserted.startswith("<|tool|><tool_response>" + message), inserted
    assert TOKENIZER.decode(server.prompts[1]).endswith(inserted), "the model reads the error in its next prompt"
    counts = out.extra_fields["tool_call_counts"]
    assert counts[counter] == 1 and counts["tool_call_errors"] == 1 and counts["tool_calls_ok"] == 0
    assert set(counts) == set(COUNTER_KEYS)
    assert out.extra_fields["termination_reason"] == "done"
    assert out.response_ids[-len(enc("sorry" + EOS)) :] == enc("sorry" + EOS)


def test_timed_out_tool_is_cancelled(tool_config):
    before = SlowTool.cancelled
    run_loop(make_config(tool_config), ScriptedLLM([call("slow") + EOS, "x" + EOS]))
    assert SlowTool.cancelled == before + 1


# ---------------------------------------------------------------- limits


def test_stops_at_max_assistant_turns(tool_config):
    turn = call("calculator", expression="1+1") + EOS
    server = ScriptedLLM([turn] * 10)
    _, out = run_loop(make_config(tool_config, max_assistant_turns=3), server)
    assert len(server.prompts) == 3
    assert out.extra_fields["termination_reason"] == "max_assistant_turns"
    assert out.response_mask[-1] == 1, "the trajectory ends with the model's turn, not an unanswered tool turn"
    assert out.extra_fields["tool_call_counts"]["tool_calls"] == 2
    assert out.num_turns == 3 + 2 + 1


def test_stops_at_max_user_turns(tool_config):
    turn = call("calculator", expression="1+1") + EOS
    server = ScriptedLLM([turn] * 10)
    _, out = run_loop(make_config(tool_config, max_user_turns=1), server)
    assert len(server.prompts) == 2
    assert out.extra_fields["termination_reason"] == "max_user_turns"
    assert len(inserted_texts(out)) == 1


def test_response_length_cuts_the_trajectory_exactly(tool_config):
    turn = call("chatty") + EOS
    server = ScriptedLLM([turn] * 10)
    _, out = run_loop(make_config(tool_config, response_length=120, max_tool_response_length=1000), server)
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs) == 120
    assert out.extra_fields["termination_reason"] == "length"
    assert out.response_mask[: len(enc(turn))] == [1] * len(enc(turn))


def test_model_turn_cut_by_the_budget_is_not_parsed(tool_config):
    turn = call("calculator", expression="1+1") + EOS
    server = ScriptedLLM([turn])
    _, out = run_loop(make_config(tool_config, response_length=10), server)
    assert out.response_ids == enc(turn)[:10] and out.response_mask == [1] * 10
    assert server.outputs == [enc(turn)[:10]]
    assert out.extra_fields["termination_reason"] == "length"
    assert out.extra_fields["tool_call_counts"]["tool_calls"] == 0


def test_tool_output_is_truncated_to_max_tool_response_length(tool_config):
    server = ScriptedLLM([call("chatty") + EOS, "ok" + EOS])
    _, out = run_loop(
        make_config(tool_config, max_tool_response_length=20, tool_response_truncate_side="right"), server
    )
    (inserted,) = inserted_texts(out)
    assert inserted == "<|tool|><tool_response>" + "A" * 20 + "...(truncated)</tool_response><|assistant|>"


def test_truncate_text_sides():
    assert truncate_text("abcdefghij", 4, "left") == "(truncated)...ghij"
    assert truncate_text("abcdefghij", 4, "right") == "abcd...(truncated)"
    assert truncate_text("abcdefghij", 4, "middle") == "ab...(truncated)...ij"
    assert truncate_text("abc", 4, "middle") == "abc"


def test_without_tools_a_plain_answer_is_one_turn():
    server = ScriptedLLM(["391" + EOS])
    _, out = run_loop(make_config(None), server, raw_prompt=None, raw_prompt_ids=[1, 2, 3])
    assert out.prompt_ids == [1, 2, 3]
    assert out.response_mask == [1] * len(enc("391" + EOS)) and out.num_turns == 2


def test_unknown_parser_format_names_the_config_key(tool_config):
    with pytest.raises(ValueError, match=r"rollout.multi_turn.format='xml' is not a registered tool parser"):
        run_loop(make_config(tool_config, format="xml"), ScriptedLLM([]))


# ---------------------------------------------------------------- interaction (scripted user turns)


def test_scripted_interaction_adds_user_turns_with_mask_zero(tmp_path, tool_config):
    path = tmp_path / "interaction.yaml"
    path.write_text(
        textwrap.dedent("""
        interaction:
          - name: checker
            class_name: verl.experimental.agent_loop.interaction.ScriptedInteraction
            config: {replies: ["Are you sure?", "Check again."]}
        """)
    )
    server = ScriptedLLM(["It is 5" + EOS, call("calculator", expression="23*17") + EOS, "It is 391" + EOS])
    _, out = run_loop(
        make_config(tool_config, interaction_config_path=str(path)),
        server,
        interaction_kwargs={"name": "checker", "ground_truth": "391"},
    )
    assert inserted_texts(out) == [
        "<|user|>Are you sure?<|assistant|>",
        "<|tool|><tool_response>391</tool_response><|assistant|>",
    ]
    assert out.extra_fields["turn_scores"] == [0.0, 1.0]
    assert out.extra_fields["termination_reason"] == "interaction_done"
    assert len(server.prompts) == 3 and out.num_turns == 3 + 2 + 1


def test_unknown_interaction_name_is_a_config_error(tmp_path, tool_config):
    path = tmp_path / "interaction.yaml"
    path.write_text(
        "interaction:\n  - {name: a, class_name: verl.experimental.agent_loop.interaction.ScriptedInteraction}\n"
    )
    with pytest.raises(ValueError, match=r"interaction_kwargs.name='b' is not configured"):
        run_loop(
            make_config(tool_config, interaction_config_path=str(path)),
            ScriptedLLM([]),
            interaction_kwargs={"name": "b"},
        )


# ---------------------------------------------------------------- through the worker: the batch's response_mask


def test_worker_batch_masks_tool_tokens(tiny_model_dir, tool_config):
    from verl.experimental.agent_loop.worker import AgentLoopWorker

    turn1, turn2 = call("calculator", expression="6*7") + EOS, "42" + EOS
    server = ScriptedLLM([turn1, turn2])
    config = make_config(tool_config, model_path=str(tiny_model_dir), response_length=128, prompt_length=1024)
    worker = AgentLoopWorker(config, [server])
    column = np.empty(1, dtype=object)
    column[0] = PROMPT
    batch = DataProto.from_dict(
        non_tensors={"raw_prompt": column, "agent_name": np.array(["tool_agent"], dtype=object)},
        meta_info={"validate": True},
    )
    out = asyncio.run(worker.generate_sequences(batch))
    n1, nd, n2 = len(enc(turn1)), len(tool_delta("42")), len(enc(turn2))
    mask = out.batch["response_mask"][0].tolist()
    assert mask == [1] * n1 + [0] * nd + [1] * n2 + [0] * (128 - n1 - nd - n2)
    assert out.batch["attention_mask"][0, -128:].tolist()[: n1 + nd + n2] == [1] * (n1 + nd + n2)
    assert TOKENIZER.decode(out.batch["responses"][0, n1 : n1 + nd].tolist()) == TOKENIZER.decode(tool_delta("42"))
    assert out.batch["rollout_log_probs"][0, n1 : n1 + nd].abs().sum() == 0
    assert out.non_tensor_batch["tool_call_counts"][0]["tool_calls_ok"] == 1


# ---------------------------------------------------------------- function tools, per-row tool selection


FUNCTIONS = '''
from verl.tools.function_tool import function_tool


@function_tool
def double_for_loop_test(x: int) -> tuple:
    """Double a number.

    Args:
        x: the number.
    """
    return str(2 * x), 0.5
'''


def test_function_tools_answer_calls_next_to_yaml_tools(tmp_path, tool_config):
    functions = tmp_path / "functions.py"
    functions.write_text(FUNCTIONS)
    config = make_config(tool_config, function_tool_path=str(functions))
    server = ScriptedLLM([call("double_for_loop_test", x=21) + EOS, "42" + EOS])
    loop, out = run_loop(config, server)
    assert {"calculator", "double_for_loop_test"} <= set(loop.tools)
    assert '"name": "double_for_loop_test"' in TOKENIZER.decode(out.prompt_ids)
    (inserted,) = inserted_texts(out)
    assert inserted == "<|tool|><tool_response>42</tool_response><|assistant|>"
    assert out.extra_fields["tool_rewards"] == [0.5]  # the (text, reward) return value
    assert out.extra_fields["tool_call_counts"]["tool_calls_ok"] == 1


def test_a_row_can_limit_its_tools(tmp_path, tool_config):
    server = ScriptedLLM([call("chatty") + EOS, "x" + EOS])
    _, out = run_loop(make_config(tool_config), server, extra_info={"tool_selection": ["calculator"]})
    assert '"name": "chatty"' not in TOKENIZER.decode(out.prompt_ids)
    assert '"name": "calculator"' in TOKENIZER.decode(out.prompt_ids)
    (inserted,) = inserted_texts(out)
    assert inserted.startswith(
        "<|tool|><tool_response>Error: Unknown function 'chatty'. Available tools: ['calculator']"
    )
