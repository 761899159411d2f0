"""OpenAIAgentLoop: a user agent written against the openai client, run by the loop over the real hf engine, becomes
one AgentLoopOutput whose response interleaves the model's tokens (mask 1) and the agent's (mask 0)."""

from __future__ import annotations

import asyncio
import textwrap

import pytest
from _agent_loop_helpers import greedy, make_config

from verl.experimental.agent_loop.openai_agent_loop import (
    OpenAIAgentContext,
    OpenAIAgentLoop,
    load_agent_fn,
    merge_calls,
)
from verl.experimental.agent_loop.openai_gateway import CallRecord
from verl.experimental.agent_loop.registry import get_agent_loop_class, get_agent_loop_spec, load_agent_loop_config
from verl.experimental.agent_loop.server_manager import AsyncLLMServerManager
from verl.workers.config import MultiTurnConfig

pytest.importorskip("openai")

PARAMS = {
    "temperature": 0.0,
    "do_sample": False,
    "top_p": 1.0,
    "top_k": -1,
    "max_tokens": 30,
    "logprobs": True,
    "ignore_eos": True,
}
QUESTION = [{"role": "user", "content": "2+2?"}]


async def two_call_agent(ctx: OpenAIAgentContext, follow_up: str) -> dict:
    """A chat agent: ask, then send the history back with one more user message; report a reward."""
    client = ctx.client()
    messages = list(ctx.messages)
    # skip_special_tokens=False: the text round-trips to the same tokens through the chat template
    first = await client.chat.completions.create(
        model=ctx.model, messages=messages, max_tokens=5, extra_body={"skip_special_tokens": False}
    )
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": follow_up},
    ]
    await client.chat.completions.create(
        model=ctx.model, messages=messages, max_tokens=4, extra_body={"skip_special_tokens": False}
    )
    return {"reward_score": 0.5, "label": ctx.sample["extra_info"]["label"]}


@pytest.fixture
def setup(tiny_model_dir, make_replica):
    from transformers import AutoTokenizer

    config = make_config(tiny_model_dir, prompt_length=24, response_length=40, multi_turn=MultiTurnConfig(enable=True))
    manager = AsyncLLMServerManager([make_replica(config["rollout"])])
    return config, manager, AutoTokenizer.from_pretrained(tiny_model_dir)


def template(tokenizer, messages):
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)


def test_two_chat_calls_become_one_trajectory_with_masks(setup, tiny_lm):
    config, manager, tokenizer = setup
    loop = OpenAIAgentLoop(config, manager, tokenizer, agent_fn=two_call_agent, agent_kwargs={"follow_up": "and 3?"})
    out = asyncio.run(loop.run(dict(PARAMS), raw_prompt=QUESTION, extra_info={"label": "four"}))

    prompt1 = template(tokenizer, QUESTION)
    reply1 = greedy(tiny_lm, prompt1, 5)
    history = QUESTION + [
        {"role": "assistant", "content": tokenizer.decode(reply1)},
        {"role": "user", "content": "and 3?"},
    ]
    prompt2 = template(tokenizer, history)
    assert prompt2[: len(prompt1) + len(reply1)] == prompt1 + reply1  # the agent's history extends the first call
    inserted = prompt2[len(prompt1) + len(reply1) :]
    reply2 = greedy(tiny_lm, prompt2, 4)

    assert out.prompt_ids == prompt1
    assert out.response_ids == reply1 + inserted + reply2
    assert out.response_mask == [1] * 5 + [0] * len(inserted) + [1] * 4
    assert out.response_logprobs[5 : 5 + len(inserted)] == [0.0] * len(inserted)
    assert all(lp < 0 for lp in out.response_logprobs[:5] + out.response_logprobs[-4:])
    assert out.reward_score == 0.5 and out.num_turns == 4
    assert out.extra_fields["label"] == "four"
    assert out.extra_fields["openai_merged"] is True and out.extra_fields["openai_num_calls"] == 2


def test_response_is_cut_to_the_response_length(setup):
    config, manager, tokenizer = setup

    async def chatty(ctx):
        await ctx.client().chat.completions.create(model=ctx.model, messages=ctx.messages, max_tokens=100)

    loop = OpenAIAgentLoop(config, manager, tokenizer, agent_fn=chatty)
    out = asyncio.run(loop.run(dict(PARAMS, max_tokens=40), raw_prompt=QUESTION))
    assert len(out.response_ids) == len(out.response_mask) == 40 and out.reward_score is None


def call(prompt, response, lp=-1.0):
    return CallRecord(
        prompt_ids=prompt, response_ids=response, response_logprobs=[lp] * len(response), finish_reason="stop"
    )


def test_merge_calls_keeps_the_last_call_when_the_history_was_rewritten():
    merged = merge_calls([call([1, 2], [3]), call([1, 2, 3, 9], [4, 5], -2.0)])
    assert (merged.prompt_ids, merged.response_ids, merged.response_mask) == ([1, 2], [3, 9, 4, 5], [1, 0, 1, 1])
    assert merged.response_logprobs == [-1.0, 0.0, -2.0, -2.0] and merged.merged
    rewritten = merge_calls([call([1, 2], [3]), call([1, 7], [4])])  # history summarised: not a prefix
    assert (rewritten.prompt_ids, rewritten.response_ids, rewritten.response_mask) == ([1, 7], [4], [1])
    assert not rewritten.merged and rewritten.num_calls == 1
    with pytest.raises(ValueError, match="at least one recorded call"):
        merge_calls([])


def test_agent_errors_are_named(setup):
    config, manager, tokenizer = setup

    async def silent(ctx):
        return 1.0

    async def wrong_type(ctx):
        await ctx.client().completions.create(model=ctx.model, prompt="a", max_tokens=1)
        return "good"

    with pytest.raises(RuntimeError, match="without calling the model"):
        asyncio.run(OpenAIAgentLoop(config, manager, tokenizer, agent_fn=silent).run(dict(PARAMS), raw_prompt=QUESTION))
    with pytest.raises(TypeError, match="returned str"):
        asyncio.run(
            OpenAIAgentLoop(config, manager, tokenizer, agent_fn=wrong_type).run(dict(PARAMS), raw_prompt=QUESTION)
        )
    with pytest.raises(ValueError, match="no agent function"):
        asyncio.run(OpenAIAgentLoop(config, manager, tokenizer).run(dict(PARAMS), raw_prompt=QUESTION))
    with pytest.raises(ValueError, match="module:function"):
        load_agent_fn("nodots")
    with pytest.raises(AttributeError, match="agent function 'missing' not found"):
        load_agent_fn("verl.experimental.agent_loop.openai_agent_loop:missing")


def test_yaml_entry_registers_an_agent_file(tmp_path):
    agent_file = tmp_path / "my_agent.py"
    agent_file.write_text(
        textwrap.dedent("""
        async def solve(ctx, bonus=0.0):
            return 1.0 + bonus
    """)
    )
    yaml = tmp_path / "agents.yaml"
    yaml.write_text(
        textwrap.dedent(f"""
        - name: yaml_openai_agent
          _target_: verl.experimental.agent_loop.openai_agent_loop.OpenAIAgentLoop
          agent_fn: {agent_file}:solve
          agent_kwargs: {{bonus: 0.5}}
    """)
    )
    assert load_agent_loop_config(yaml) == ["yaml_openai_agent"]
    spec = get_agent_loop_spec("yaml_openai_agent")
    assert spec.cls is OpenAIAgentLoop and spec.kwargs["agent_kwargs"] == {"bonus": 0.5}
    fn = load_agent_fn(spec.kwargs["agent_fn"])
    assert asyncio.run(fn(None, **spec.kwargs["agent_kwargs"])) == 1.5
    assert get_agent_loop_class("openai_agent") is OpenAIAgentLoop


def test_agent_loop_worker_runs_openai_agents_concurrently(tiny_model_dir, tiny_lm, make_replica):
    from _agent_loop_helpers import prompt_batch

    from verl.experimental.agent_loop import AgentLoopWorker

    config = make_config(tiny_model_dir, prompt_length=24, response_length=40, multi_turn=MultiTurnConfig(enable=True))
    entry = {"_target_": OpenAIAgentLoop, "agent_fn": two_call_agent, "agent_kwargs": {"follow_up": "ok?"}}
    worker = AgentLoopWorker(config, [make_replica(config["rollout"])], registry={"openai_worker_test": entry})
    questions = [[{"role": "user", "content": q}] for q in ("1+1?", "2+5?", "hello")]
    batch = prompt_batch(
        [template(worker.tokenizer, q) for q in questions],
        agent_names=["openai_worker_test"] * 3,
        raw_prompt=questions,
        extra_info=[{"label": str(i)} for i in range(3)],
    )
    out = asyncio.run(worker.generate_sequences(batch))

    for i, question in enumerate(questions):
        prompt1 = template(worker.tokenizer, question)
        reply1 = greedy(tiny_lm, prompt1, 5)
        prompt2 = template(
            worker.tokenizer,
            question
            + [{"role": "assistant", "content": worker.tokenizer.decode(reply1)}, {"role": "user", "content": "ok?"}],
        )
        inserted = len(prompt2) - len(prompt1) - len(reply1)
        mask = [1] * 5 + [0] * inserted + [1] * 4
        assert out.batch["response_mask"][i].tolist() == mask + [0] * (40 - len(mask)), i
        assert out.batch["responses"][i, : len(mask)].tolist() == reply1 + prompt2[-inserted:] + greedy(
            tiny_lm, prompt2, 4
        ), i
        assert out.batch["rm_scores"][i, len(mask) - 1].item() == 0.5 and out.batch["rm_scores"][i].sum() == 0.5
    assert out.non_tensor_batch["label"].tolist() == ["0", "1", "2"]
    assert out.non_tensor_batch["openai_merged"].tolist() == [True] * 3
