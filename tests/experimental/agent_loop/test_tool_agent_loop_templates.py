"""ToolAgentLoop and the chat template, with the real tiny tokenizer and the real hf engine (no test double):
``rollout.multi_turn.tokenization_sanity_check_mode`` reports appended turns that differ from the template's rendering
of the whole conversation, and never changes the trajectory.

The engine serves a copy of the tiny model fine-tuned (a few seconds) to call the calculator and then answer; loops
that render their inserted turns wrongly on purpose are subclasses that override only that rendering.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

import pytest
from _agent_loop_helpers import teach

from verl.experimental.agent_loop.server_manager import AsyncLLMServerManager
from verl.experimental.agent_loop.tokenization_check import check_inserted_turn, expected_inserted_ids, render_ids
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.utils.tiny_model import build_tokenizer
from verl.workers.config import HFModelConfig, MultiTurnConfig, RolloutConfig
from verl.workers.rollout.hf.server import HFRolloutServer

TOKENIZER = build_tokenizer()
PROMPT = [{"role": "user", "content": "What is 23*17?"}]
GREEDY = {"temperature": 0.0, "do_sample": False, "logprobs": True, "ignore_eos": False, "max_tokens": 160}
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "23*17"}}</tool_call>'
LOGGER = "verl.experimental.agent_loop.tool_agent_loop"


def enc(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=False)


def make_config(tool_config: str, **multi_turn: Any) -> dict:
    multi_turn.setdefault("max_assistant_turns", 2)
    return {
        "rollout": RolloutConfig(
            name="hf",
            prompt_length=320,
            response_length=160,
            calculate_log_probs=True,
            dtype="float32",
            free_cache_engine=False,
            multi_turn=MultiTurnConfig(enable=True, tool_config_path=tool_config, **multi_turn),
        ),
        "model": HFModelConfig(path="unused"),
    }


@pytest.fixture(scope="module")
def tool_config(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tools") / "tools.yaml"
    path.write_text("tools:\n  - class_name: calculator\n")
    return str(path)


@pytest.fixture(scope="module")
def caller(tiny_lm, tool_config):
    """The tiny model taught the conversation: prompt, call (turn1), tool turn (delta), answer (turn2)."""
    schemas = ToolAgentLoop(make_config(tool_config), None, TOKENIZER).tool_schemas
    prompt = render_ids(TOKENIZER, PROMPT, tools=schemas, add_generation_prompt=True)
    turn1, turn2 = enc(CALL + "<eos>"), enc("391<eos>")
    delta = render_ids(TOKENIZER, [{"role": "tool", "content": "391"}], add_generation_prompt=True)[1:]  # no <bos>
    model = copy.deepcopy(tiny_lm)
    teach(model, prompt + turn1 + delta + turn2, [-100] * len(prompt) + turn1 + [-100] * len(delta) + turn2)
    return {"model": model, "prompt": prompt, "turn1": turn1, "delta": delta, "turn2": turn2}


def run_loop(caller, config, loop_cls=ToolAgentLoop, tokenizer=TOKENIZER, **row):
    row.setdefault("raw_prompt", PROMPT)

    async def go():
        server = HFRolloutServer(config["rollout"], model=copy.deepcopy(caller["model"]))
        loop = loop_cls(config, AsyncLLMServerManager([server]), tokenizer)
        return await loop.run(dict(GREEDY), index=7, **row)

    return asyncio.run(go())


def mismatch_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "tokenization mismatch" in r.getMessage()]


class UnmarkedToolTurns(ToolAgentLoop):
    """Renders tool turns without the template's ``<|tool|>`` marker (a broken custom loop)."""

    def inserted_message_ids(self, new_messages):
        ids = super().inserted_message_ids(new_messages)
        assert TOKENIZER.convert_ids_to_tokens(ids[0]) == "<|tool|>"
        return ids[1:]


class NewlineBeforeToolTurns(ToolAgentLoop):
    """Puts a newline the template does not have before each tool turn (differs only in whitespace)."""

    def inserted_message_ids(self, new_messages):
        return enc("\n") + super().inserted_message_ids(new_messages)


def test_a_correct_trajectory_from_the_real_engine_is_not_reported(caller, tool_config, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    out = run_loop(caller, make_config(tool_config, tokenization_sanity_check_mode="strict"))
    assert out.response_ids == caller["turn1"] + caller["delta"] + caller["turn2"]
    assert out.metrics.counters["tokenization_mismatches"] == 0 and mismatch_warnings(caplog) == []
    # the check is not vacuous: the template's rendering of the whole conversation gives the appended block
    history = [*PROMPT, {"role": "assistant", "content": TOKENIZER.decode(caller["turn1"], skip_special_tokens=True)}]
    schemas = ToolAgentLoop(make_config(tool_config), None, TOKENIZER).tool_schemas

    def render(messages, **kwargs):
        return render_ids(TOKENIZER, messages, tools=schemas, **kwargs)

    assert (
        expected_inserted_ids(render, history, [{"role": "tool", "content": "391"}], caller["turn1"]) == caller["delta"]
    )


def test_a_tool_turn_without_its_template_marker_is_reported_and_counted(caller, tool_config, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    outs = {}
    for mode in ("strict", "ignore_strippable", "disable"):
        caplog.clear()
        outs[mode] = run_loop(caller, make_config(tool_config, tokenization_sanity_check_mode=mode), UnmarkedToolTurns)
        warnings = mismatch_warnings(caplog)
        if mode == "disable":
            assert warnings == [] and outs[mode].metrics.counters["tokenization_mismatches"] == 0
            continue
        assert len(warnings) == 1 and outs[mode].metrics.counters["tokenization_mismatches"] == 1
        (message,) = warnings
        assert f"rollout.multi_turn.tokenization_sanity_check_mode={mode}" in message
        assert "request " in message and "(sample index 7)" in message
        assert f"inserted turn 1 differs from response position {len(caller['turn1'])} on" in message
        assert "appended '<tool_response>391" in message and "as '<|tool|><tool_response>391" in message
    # the check never changes what the loop produced
    strict = outs["strict"]
    for other in (outs["ignore_strippable"], outs["disable"]):
        assert (other.response_ids, other.response_mask, other.response_logprobs) == (
            strict.response_ids,
            strict.response_mask,
            strict.response_logprobs,
        )
    assert strict.response_ids[: len(caller["turn1"]) + 1] == caller["turn1"] + enc("<tool_response>")


def test_whitespace_only_differences_are_ignored_when_strippable(caller, tool_config, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    strict = run_loop(caller, make_config(tool_config, tokenization_sanity_check_mode="strict"), NewlineBeforeToolTurns)
    assert strict.metrics.counters["tokenization_mismatches"] == 1
    assert "appended '\\n<|tool|>" in mismatch_warnings(caplog)[0]
    caplog.clear()
    lenient = run_loop(
        caller, make_config(tool_config, tokenization_sanity_check_mode="ignore_strippable"), NewlineBeforeToolTurns
    )
    assert lenient.metrics.counters["tokenization_mismatches"] == 0 and mismatch_warnings(caplog) == []
    assert lenient.response_ids == strict.response_ids


def test_a_template_separator_the_model_never_generates_is_found(caller, tool_config, caplog):
    """ChatML-style templates close an assistant turn with the stop token and a newline; the engine stops at the
    stop token, so an incrementally built trajectory lacks the newline that a whole rendering has."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    tokenizer = copy.deepcopy(TOKENIZER)
    tokenizer.chat_template = TOKENIZER.chat_template.replace("{{- eos_token -}}", "{{- eos_token -}}{{ '\\n' }}")
    assert tokenizer.chat_template != TOKENIZER.chat_template
    strict = run_loop(caller, make_config(tool_config, tokenization_sanity_check_mode="strict"), tokenizer=tokenizer)
    assert strict.response_ids[: len(caller["turn1"])] == caller["turn1"], "the engine stopped at <eos>"
    (message,) = mismatch_warnings(caplog)
    assert f"response position {len(caller['turn1'])} on: appended '<|tool|>" in message
    assert "as '\\n<|tool|>" in message
    caplog.clear()
    lenient = run_loop(
        caller, make_config(tool_config, tokenization_sanity_check_mode="ignore_strippable"), tokenizer=tokenizer
    )
    assert lenient.metrics.counters["tokenization_mismatches"] == 0 and mismatch_warnings(caplog) == []


def test_samples_without_messages_are_not_checked(caller, tool_config, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    out = run_loop(
        caller, make_config(tool_config), UnmarkedToolTurns, raw_prompt=None, raw_prompt_ids=caller["prompt"]
    )
    assert out.response_ids[: len(caller["turn1"])] == caller["turn1"] and 0 in out.response_mask
    assert out.metrics.counters["tokenization_mismatches"] == 0 and mismatch_warnings(caplog) == []


def test_a_model_turn_cut_before_its_stop_token_misses_the_turn_closing():
    def render(messages, **kwargs):
        return render_ids(TOKENIZER, messages, **kwargs)

    history = [*PROMPT, {"role": "assistant", "content": CALL}]
    new = [{"role": "tool", "content": "391"}]
    block = render_ids(TOKENIZER, new, add_generation_prompt=True)[1:]
    assert check_inserted_turn(TOKENIZER, "strict", render, history, new, enc(CALL + "<eos>"), block) is None
    cut = check_inserted_turn(TOKENIZER, "ignore_strippable", render, history, new, enc(CALL), block)
    assert cut.position == 0 and cut.expected == enc("<eos>") + block
    assert check_inserted_turn(TOKENIZER, "disable", render, history, new, enc(CALL), block) is None


# ---------------------------------------------------------------- use_inference_chat_template

THINK = "<think>23*17</think>"


class Spy:
    """Forwards every call to the real engine and records the prompts it got and the tokens it returned."""

    def __init__(self, server):
        self.server, self.prompts, self.outputs = server, [], []

    async def generate(self, prompt_ids, sampling_params, request_id):
        self.prompts.append(list(prompt_ids))
        out = await self.server.generate(prompt_ids, sampling_params, request_id)
        self.outputs.append(list(out.token_ids))
        return out


def reasoning_dropping_tokenizer():
    """The tiny tokenizer with an inference-style template: earlier assistant turns lose their ``<think>`` part."""
    tokenizer = copy.deepcopy(TOKENIZER)
    plain = "{%- elif message.role == 'assistant' -%}<|assistant|>{{ render_content(message.content) }}"
    assert plain in TOKENIZER.chat_template
    tokenizer.chat_template = TOKENIZER.chat_template.replace(
        plain,
        (
            "{%- elif message.role == 'assistant' -%}<|assistant|>"
            "{%- if not loop.last and message.content is string and '</think>' in message.content -%}"
            "{{ message.content.split('</think>')[-1] }}{%- else -%}{{ render_content(message.content) }}{%- endif -%}"
        ),
    )
    return tokenizer


@pytest.fixture(scope="module")
def thinker(caller):
    """The tiny model taught to think, then call the calculator, then answer."""
    turn1 = enc(THINK + CALL + "<eos>")
    sequence = caller["prompt"] + turn1 + caller["delta"] + caller["turn2"]
    labels = [-100] * len(caller["prompt"]) + turn1 + [-100] * len(caller["delta"]) + caller["turn2"]
    model = copy.deepcopy(caller["model"])
    teach(model, sequence, labels)
    return {**caller, "model": model, "turn1": turn1}


def run_spied(taught, config, tokenizer=TOKENIZER):
    async def go():
        spy = Spy(HFRolloutServer(config["rollout"], model=copy.deepcopy(taught["model"])))
        loop = ToolAgentLoop(config, AsyncLLMServerManager([spy]), tokenizer)
        return spy, await loop.run(dict(GREEDY), raw_prompt=PROMPT)

    return asyncio.run(go())


def test_inference_template_prompts_with_the_rendered_conversation(thinker, tool_config, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    tokenizer = reasoning_dropping_tokenizer()
    config = make_config(tool_config, use_inference_chat_template=True, tokenization_sanity_check_mode="disable")
    spy, out = run_spied(thinker, config, tokenizer)
    prompt, turn1 = thinker["prompt"], thinker["turn1"]
    assert spy.outputs[0] == turn1, "the engine thought, then called"
    conversation = [*PROMPT, {"role": "assistant", "content": THINK + CALL}, {"role": "tool", "content": "391"}]
    rendered = render_ids(
        tokenizer, conversation, tools=ToolAgentLoop(config, None, tokenizer).tool_schemas, add_generation_prompt=True
    )
    assert spy.prompts[1] == rendered == prompt + enc(CALL + "<eos>") + thinker["delta"], "reasoning dropped"
    # the trajectory is what the engine read, then what it sampled; only the latter is trained on
    rewritten = rendered[len(prompt) :]
    assert out.prompt_ids == prompt and out.response_ids == rewritten + spy.outputs[1]
    assert out.response_mask == [0] * len(rewritten) + [1] * len(spy.outputs[1])
    assert out.response_logprobs[: len(rewritten)] == [0.0] * len(rewritten)
    assert out.metrics.counters["rerendered_prompt_changes"] == 1


def test_training_template_appends_tokens_and_the_check_names_the_rewrite(thinker, tool_config, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    tokenizer = reasoning_dropping_tokenizer()
    spy, out = run_spied(thinker, make_config(tool_config, use_inference_chat_template=False), tokenizer)
    prompt, turn1, delta = thinker["prompt"], thinker["turn1"], thinker["delta"]
    assert spy.prompts[1] == prompt + turn1 + delta, "token in, token out: the thinking stays"
    assert out.response_ids == turn1 + delta + spy.outputs[1]
    assert out.response_mask == [1] * len(turn1) + [0] * len(delta) + [1] * len(spy.outputs[1])
    assert out.metrics.counters["rerendered_prompt_changes"] == 0
    (message,) = mismatch_warnings(caplog)
    assert "renders the earlier conversation differently" in message


def test_both_settings_agree_when_the_template_renders_what_was_appended(caller, tool_config):
    runs = {
        flag: run_spied(caller, make_config(tool_config, use_inference_chat_template=flag)) for flag in (False, True)
    }
    (spy_a, a), (spy_b, b) = runs[False], runs[True]
    assert spy_a.prompts == spy_b.prompts and len(spy_a.prompts) == 2
    assert (a.response_ids, a.response_mask, a.response_logprobs) == (
        b.response_ids,
        b.response_mask,
        b.response_logprobs,
    )
    assert a.response_ids == caller["turn1"] + caller["delta"] + caller["turn2"]
    assert b.metrics.counters["rerendered_prompt_changes"] == 0


def test_inference_template_needs_the_chat_messages(caller, tool_config):
    config = make_config(tool_config, use_inference_chat_template=True)
    with pytest.raises(
        ValueError,
        match=r"rollout.multi_turn.use_inference_chat_template=true renders .*\(no "
        r"'raw_prompt'; set data.return_raw_chat=true",
    ):
        run_loop(caller, config, raw_prompt=None, raw_prompt_ids=caller["prompt"])


def test_rebase_keeps_what_agrees_and_masks_the_rest():
    from verl.experimental.agent_loop.tool_agent_loop import AgentData, _rebase

    data = AgentData([], None, None, None, None, {}, "r", {})
    # the whole sequence so far: prompt [1, 2, 3], then the response [4, 5, 6, 7]
    data.prompt_ids, data.response_mask, data.response_logprobs = (
        [1, 2, 3, 4, 5, 6, 7],
        [1, 1, 0, 0],
        [-0.1, -0.2, 0.0, 0.0],
    )
    assert not _rebase(data, [1, 2, 3, 4, 5, 6, 7])
    assert _rebase(data, [1, 2, 3, 4, 9, 7])
    assert (data.prompt_ids, data.response_mask, data.response_logprobs) == (
        [1, 2, 3, 4, 9, 7],
        [1, 0, 0],
        [-0.1, 0.0, 0.0],
    )
    assert _rebase(data, [1, 8, 3, 4])  # the prompt itself rendered differently: the rest is context (mask 0)
    assert (data.prompt_ids, data.response_mask) == ([1, 8, 3, 4], [0, 0, 0])  # the prompt is now [1]
