"""ToolAgentLoop driven by the real hf engine over the tiny model (no test double anywhere).

1. A random model, sampled: whatever it emits, the loop ends within its limits and masks exactly the engine's
   tokens as model tokens.
2. A tiny model fine-tuned for a few seconds to *write* one calculator call and then the answer: the engine
   generates the call, the real CalculatorTool answers, the model reads the answer and finishes.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from _agent_loop_helpers import teach

from verl.experimental.agent_loop.server_manager import AsyncLLMServerManager
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.utils.tiny_model import build_tokenizer
from verl.workers.config import HFModelConfig, MultiTurnConfig, RolloutConfig
from verl.workers.rollout.hf.server import HFRolloutServer

TOKENIZER = build_tokenizer()
PROMPT = [{"role": "user", "content": "What is 23*17?"}]
SAMPLED = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "do_sample": True, "logprobs": True, "ignore_eos": False}
GREEDY = {"temperature": 0.0, "do_sample": False, "logprobs": True, "ignore_eos": False}


def make_config(tool_config: str, *, response_length: int, prompt_length: int, **multi_turn: Any) -> dict:
    return {
        "rollout": RolloutConfig(
            name="hf",
            prompt_length=prompt_length,
            response_length=response_length,
            calculate_log_probs=True,
            dtype="float32",
            free_cache_engine=False,
            multi_turn=MultiTurnConfig(enable=True, tool_config_path=tool_config, **multi_turn),
        ),
        "model": HFModelConfig(path="unused"),
    }


def enc(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=False)


def render(messages, **kwargs) -> list[int]:
    return list(TOKENIZER.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs))


def tool_delta(content: str) -> list[int]:
    full = render([{"role": "tool", "content": content}], add_generation_prompt=True)
    return full[len(render([{}])) :]


class Spy:
    """Forwards every call to the real engine and records what it returned (not a double)."""

    def __init__(self, server):
        self.server, self.outputs = server, []

    async def generate(self, prompt_ids, sampling_params, request_id):
        out = await self.server.generate(prompt_ids, sampling_params, request_id)
        self.outputs.append(list(out.token_ids))
        return out


def test_random_model_loop_terminates_and_masks_whatever_it_emits(tiny_lm, tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text("tools:\n  - class_name: calculator\n    tool_schema: {type: function, function: {name: calc}}\n")
    config = make_config(str(path), response_length=96, prompt_length=256, max_assistant_turns=4)

    async def go():
        results = []
        for seed in range(3):
            spy = Spy(HFRolloutServer(config["rollout"], model=copy.deepcopy(tiny_lm), seed=seed))
            loop = ToolAgentLoop(config, AsyncLLMServerManager([spy]), TOKENIZER)
            results.append((spy, await loop.run(dict(SAMPLED, max_tokens=96, seed=seed), raw_prompt=PROMPT)))
        return results

    for spy, out in asyncio.run(go()):
        assert 0 < len(out.response_ids) <= 96
        assert len(out.response_mask) == len(out.response_ids) == len(out.response_logprobs)
        model_tokens = [t for t, m in zip(out.response_ids, out.response_mask) if m == 1]
        assert model_tokens == [t for turn in spy.outputs for t in turn][: len(model_tokens)]
        assert 1 <= len(spy.outputs) <= 4
        assert out.extra_fields["termination_reason"] in ("done", "length", "max_assistant_turns")
        inserted = [t for t, m in zip(out.response_ids, out.response_mask) if m == 0]
        if inserted:  # the model happened to write a tool call: what follows it is a rendered tool turn
            assert TOKENIZER.decode(inserted).startswith("<|tool|><tool_response>")


def test_fine_tuned_model_calls_the_calculator_through_the_real_engine(tiny_lm, tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text("tools:\n  - class_name: calculator\n")
    config = make_config(str(path), response_length=160, prompt_length=320, max_assistant_turns=3)
    loop_probe = ToolAgentLoop(config, None, TOKENIZER)
    prompt = render(PROMPT, tools=loop_probe.tool_schemas, add_generation_prompt=True)
    turn1 = enc('<tool_call>{"name": "calculator", "arguments": {"expression": "23*17"}}</tool_call><eos>')
    delta = tool_delta("391")
    turn2 = enc("391<eos>")
    model = copy.deepcopy(tiny_lm)
    teach(model, prompt + turn1 + delta + turn2, [-100] * len(prompt) + turn1 + [-100] * len(delta) + turn2)

    async def go():
        spy = Spy(HFRolloutServer(config["rollout"], model=model))
        loop = ToolAgentLoop(config, AsyncLLMServerManager([spy]), TOKENIZER)
        out = await loop.run(
            dict(GREEDY, max_tokens=160),
            raw_prompt=PROMPT,
            tools_kwargs={"calculator": {"create_kwargs": {"ground_truth": "391"}}},
        )
        return spy, out

    spy, out = asyncio.run(go())
    assert out.prompt_ids == prompt
    assert spy.outputs == [turn1, turn2], "the engine wrote the call, then the answer after reading the tool turn"
    assert out.response_ids == turn1 + delta + turn2
    assert out.response_mask == [1] * len(turn1) + [0] * len(delta) + [1] * len(turn2)
    assert out.response_logprobs[len(turn1) : len(turn1) + len(delta)] == [0.0] * len(delta)
    model_log_probs = [lp for lp, m in zip(out.response_logprobs, out.response_mask) if m == 1]
    assert all(lp <= 0.0 for lp in model_log_probs) and any(lp < 0.0 for lp in model_log_probs)
    assert out.extra_fields["tool_call_counts"]["tool_calls_ok"] == 1
    assert out.extra_fields["tool_final_rewards"] == {"calculator": 1.0}
    assert out.extra_fields["termination_reason"] == "done"
