"""Plain helpers for agent-loop tests: configs, a reference greedy decoder, test-only agent loops.

The loops here are registered at import time; Ray workers import this module (it is on their PYTHONPATH) when
they unpickle the registry snapshot, so the same names exist there.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import numpy as np
import torch

from verl.experimental.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.protocol import DataProto
from verl.workers.config import (
    AgentLoopConfig,
    HFModelConfig,
    RewardConfig,
    RolloutConfig,
    SamplingConfig,
)

# Two tokens a test loop inserts between model turns, as a tool would (mask 0).
TOOL_TOKENS = [5, 6]
GREEDY = {"temperature": 0.0, "do_sample": False}


def make_config(
    model_dir,
    *,
    num_workers: int = 2,
    agent_loop_config_path: str | None = None,
    reward: RewardConfig | None = None,
    **rollout_overrides: Any,
) -> dict[str, Any]:
    """A flattened trainer config with typed rollout, model and reward groups, small enough for CPU tests."""
    rollout_values = dict(
        name="hf",
        prompt_length=16,
        response_length=12,
        max_num_seqs=16,
        calculate_log_probs=True,
        dtype="float32",
        ignore_eos=True,
        free_cache_engine=False,
        val_kwargs=SamplingConfig(temperature=0.0, do_sample=False),
        agent=AgentLoopConfig(num_workers=num_workers, agent_loop_config_path=agent_loop_config_path),
    )
    rollout_values.update(rollout_overrides)
    return {
        "rollout": RolloutConfig(**rollout_values),
        "model": HFModelConfig(path=str(model_dir)),
        "reward": reward or RewardConfig(),
        "data": {"reward_fn_key": "data_source"},
    }


@torch.no_grad()
def greedy(model, prompt: list[int], max_tokens: int) -> list[int]:
    """Greedy continuation by full forward passes (no cache): the ground truth for the engine."""
    ids = list(prompt)
    for _ in range(max_tokens):
        ids.append(int(torch.argmax(model(torch.tensor([ids])).logits[0, -1])))
    return ids[len(prompt) :]


def teach(model, sequence: list[int], labels: list[int], max_steps: int = 400) -> None:
    """Fine-tune ``model`` until greedy decoding reproduces every labelled token of ``sequence`` (seconds on a CPU)."""
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.tensor([sequence]), torch.tensor([labels])
    model.train()
    for _ in range(max_steps):
        out = model(input_ids=x, labels=y)
        predicted = out.logits[0, :-1].argmax(-1)
        target = y[0, 1:]
        known = target != -100
        if out.loss.item() < 0.05 and bool((predicted[known] == target[known]).all()):
            break
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    else:
        raise AssertionError(f"the tiny model did not learn the scripted conversation in {max_steps} steps")
    model.eval()


def expected_rows(
    prompt: list[int], response: list[int], mask: list[int], P: int, R: int, pad: int
) -> dict[str, list[int]]:
    """One sample's layout rows, written out position by position (the hand-built expectation)."""
    left = P - len(prompt)
    right = R - len(response)
    n = len(prompt) + len(response)
    return {
        "prompts": [pad] * left + prompt,
        "responses": response + [pad] * right,
        "response_mask": mask + [0] * right,
        "input_ids": [pad] * left + prompt + response + [pad] * right,
        "attention_mask": [0] * left + [1] * n + [0] * right,
        "position_ids": [0] * left + list(range(n)) + [n - 1] * right,
    }


def prompt_batch(
    prompts: list[list[int]], *, agent_names: list[str] | None = None, meta: dict | None = None, **columns: list[Any]
) -> DataProto:
    """A gen batch as the trainer sends it: non-tensor raw_prompt_ids (+ agent_name and other columns)."""

    def column(values):
        array = np.empty(len(values), dtype=object)
        for i, value in enumerate(values):
            array[i] = value
        return array

    non_tensors = {"raw_prompt_ids": column([list(p) for p in prompts])}
    if agent_names is not None:
        non_tensors["agent_name"] = column(agent_names)
    for key, values in columns.items():
        non_tensors[key] = column(values)
    return DataProto.from_dict(non_tensors=non_tensors, meta_info=dict(meta or {"validate": True}))


@register("two_turn_test")
class TwoTurnLoop(AgentLoopBase):
    """Model turn, two inserted "tool" tokens (mask 0), model turn; turn lengths come from ``turn_tokens``."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        prompt = [int(t) for t in kwargs["raw_prompt_ids"]]
        first, second = kwargs["turn_tokens"]
        request_id = uuid.uuid4().hex
        out1 = await self.server_manager.generate(
            request_id, prompt_ids=prompt, sampling_params={**sampling_params, "max_tokens": first}
        )
        out2 = await self.server_manager.generate(
            request_id,
            prompt_ids=prompt + out1.token_ids + TOOL_TOKENS,
            sampling_params={**sampling_params, "max_tokens": second},
        )
        response = out1.token_ids + TOOL_TOKENS + out2.token_ids
        log_probs = None
        if out1.log_probs is not None:
            log_probs = out1.log_probs + [0.0] * len(TOOL_TOKENS) + out2.log_probs
        return AgentLoopOutput(
            prompt_ids=prompt,
            response_ids=response,
            response_mask=[1] * len(out1.token_ids) + [0] * len(TOOL_TOKENS) + [1] * len(out2.token_ids),
            response_logprobs=log_probs,
            num_turns=4,
            extra_fields={"turn_tokens_seen": [first, second]},
        )


@register("delayed_test")
class DelayedLoop(AgentLoopBase):
    """Generate a few tokens, then wait ``delay_s`` seconds (a slow environment); records when it finished."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        prompt = [int(t) for t in kwargs["raw_prompt_ids"]]
        out = await self.server_manager.generate(
            uuid.uuid4().hex, prompt_ids=prompt, sampling_params={**sampling_params, "max_tokens": 3}
        )
        await asyncio.sleep(float(kwargs["delay_s"]))
        return AgentLoopOutput(
            prompt_ids=prompt,
            response_ids=out.token_ids,
            response_mask=[1] * len(out.token_ids),
            num_turns=2,
            metrics=AgentLoopMetrics(generate_sequences=0.0),
            extra_fields={"finished_at": time.monotonic()},
        )


@register("long_test")
class LongLoop(AgentLoopBase):
    """One model turn of ``max_tokens`` tokens (may exceed the response width; the layout truncates)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        prompt = [int(t) for t in kwargs["raw_prompt_ids"]]
        params = {**sampling_params, "max_tokens": int(kwargs["max_tokens"])}
        out = await self.server_manager.generate(uuid.uuid4().hex, prompt_ids=prompt, sampling_params=params)
        return AgentLoopOutput(
            prompt_ids=prompt,
            response_ids=out.token_ids,
            response_mask=[1] * len(out.token_ids),
            num_turns=2,
            extra_fields={"generated": len(out.token_ids)},
        )


class YamlLoop(AgentLoopBase):
    """Registered only through a YAML file; echoes its constructor kwarg as the response."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        prompt = [int(t) for t in kwargs["raw_prompt_ids"]]
        token = int(self.loop_kwargs["answer_token"])
        return AgentLoopOutput(prompt_ids=prompt, response_ids=[token], response_mask=[1], num_turns=2)
