"""PartialRolloutServerManager: a weight sync aborts a long generation, which resumes by itself on new weights."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch

from verl.experimental.fully_async_policy.server_manager import PartialRolloutServerManager
from verl.workers.config import RolloutConfig
from verl.workers.rollout.base import TokenOutput
from verl.workers.rollout.hf.server import HFRolloutServer

RESPONSE = 48


def _config():
    return RolloutConfig(
        name="hf",
        prompt_length=RESPONSE + 8,  # the continuation's prompt holds the prompt and the aborted prefix
        response_length=RESPONSE,
        max_num_seqs=4,
        calculate_log_probs=True,
        dtype="float32",
        temperature=1.0,
        top_p=1.0,
        top_k=-1,
        do_sample=True,
        ignore_eos=True,
        max_model_len=RESPONSE + 16,
    )


class RecordingServer(HFRolloutServer):
    """The real in-process hf server, recording every call's prompt and output."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[list[int], TokenOutput]] = []

    async def generate(self, prompt_ids, sampling_params, request_id):
        out = await super().generate(prompt_ids, sampling_params, request_id)
        self.calls.append((list(prompt_ids), out))
        return out


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@torch.no_grad()
def _reference_log_probs(model, prompt, response):
    ids = torch.tensor([prompt + response])
    logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(response).unsqueeze(1)).squeeze(1)


async def _sync(manager, server, new_model, version):
    """What the trainer does: pause, abort in flight, push weights as `version`, resume."""
    manager.pause()
    await server.abort_all()
    await server.update_weights(list(new_model.state_dict().items()), version)
    await server.resume()
    manager.resume(version)


def test_sync_during_long_generation_aborts_and_resumes(tiny_lm):
    server = replica = RecordingServer(_config(), model=copy.deepcopy(tiny_lm), max_steps_per_call=1)
    manager = PartialRolloutServerManager([replica], resume_timeout_s=30)
    new_model = copy.deepcopy(tiny_lm)
    with torch.no_grad():
        for param in new_model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    prompt = [1, 5, 6, 7]

    async def scenario():
        async def run_sample():
            return await manager.generate(
                "req-0", prompt_ids=prompt, sampling_params={"max_tokens": RESPONSE, "logprobs": True, "seed": 3}
            )

        task = asyncio.ensure_future(run_sample())
        while not server._rows or len(server._rows[0].token_ids) < 5:
            await asyncio.sleep(0.001)
        await _sync(manager, server, new_model, version=1)
        return await asyncio.wait_for(task, timeout=60)

    out = asyncio.run(scenario())
    assert len(replica.calls) >= 2, "the sync did not abort the request"
    first_prompt, first = replica.calls[0]
    assert first.stop_reason == "aborted" and first_prompt == prompt
    prefix = list(first.token_ids)
    assert 0 < len(prefix) < RESPONSE
    second_prompt, second = replica.calls[1]
    assert second_prompt == prompt + prefix, "the continuation must start from prompt + tokens so far"
    # final trajectory = prefix + continuation, every token with its log-prob, the requested length
    assert out.token_ids == prefix + list(second.token_ids)
    assert len(out.token_ids) == RESPONSE and out.stop_reason == "length"
    assert out.log_probs is not None and len(out.log_probs) == RESPONSE
    assert out.log_probs[: len(prefix)] == first.log_probs, "earlier log-probs must be kept"
    # each token's log-prob is the one of the weights that produced it
    old_ref = _reference_log_probs(tiny_lm, prompt, prefix)
    new_ref = _reference_log_probs(new_model, prompt + prefix, list(second.token_ids))
    torch.testing.assert_close(torch.tensor(out.log_probs[: len(prefix)]), old_ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.tensor(out.log_probs[len(prefix) :]), new_ref, atol=1e-4, rtol=1e-4)
    # the result's version tags record the change (verl's names), down to each token's version
    assert out.extra == {
        "min_global_steps": 0,
        "max_global_steps": 1,
        "num_aborts": 1,
        "token_versions": [0] * len(prefix) + [1] * (RESPONSE - len(prefix)),
    }
    assert manager.num_aborted == 1 and manager.num_resumed == 1


class ScriptedReplica:
    """Returns 'aborted' with 2 tokens on its first call, then finishes; counts calls."""

    def __init__(self):
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids, sampling_params, request_id):
        self.prompts.append(list(prompt_ids))
        if len(self.prompts) == 1:
            return TokenOutput(token_ids=[10, 11], log_probs=[-0.1, -0.2], stop_reason="aborted")
        count = int(sampling_params["max_tokens"])
        return TokenOutput(token_ids=[12] * count, log_probs=[-0.3] * count, stop_reason="length")


def test_aborted_request_waits_for_resume_and_times_out_naming_the_request():
    manager = PartialRolloutServerManager([ScriptedReplica()], resume_timeout_s=0.2)

    async def scenario():
        manager.pause()
        await manager.generate("req-timeout", prompt_ids=[1], sampling_params={"max_tokens": 4})

    with pytest.raises(TimeoutError, match="req-timeout.*not resumed within 0.2s"):
        asyncio.run(scenario())


def test_verl_style_hints_are_accepted_and_media_refused():
    """Loops written for verl pass ``priority`` and empty media lists; real media are refused by name."""
    manager = PartialRolloutServerManager([ScriptedReplica()], resume_timeout_s=1.0)

    async def generate(**hints):
        return await manager.generate("req-hints", prompt_ids=[1], sampling_params={"max_tokens": 4}, **hints)

    out = asyncio.run(generate(priority=3, image_data=None, video_data=[]))
    assert out.token_ids == [10, 11, 12, 12]
    with pytest.raises(NotImplementedError, match="req-hints"):
        asyncio.run(generate(image_data=["a picture"]))
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        asyncio.run(generate(colour="red"))


def test_tool_call_in_flight_is_not_cancelled_by_a_sync():
    """An agent loop sleeping in a tool call during a sync finishes its tool call, then its next turn waits for
    the new version and continues; the aborted turn resumes with the remaining budget."""
    replica = ScriptedReplica()
    manager = PartialRolloutServerManager([replica], resume_timeout_s=5)
    events: list[str] = []

    async def agent():
        first = await manager.generate("a", prompt_ids=[1, 2], sampling_params={"max_tokens": 5, "logprobs": True})
        events.append("turn1")
        await asyncio.sleep(0.05)  # the tool call, during which the sync happens
        events.append("tool done")
        second = await manager.generate("a", prompt_ids=[1, 2, 9], sampling_params={"max_tokens": 2})
        events.append("turn2")
        return first, second

    async def scenario():
        manager.pause()  # the first turn comes back aborted and must wait
        task = asyncio.ensure_future(agent())
        await asyncio.sleep(0.02)
        assert not events
        manager.resume(1)
        await asyncio.sleep(0.01)
        manager.pause()  # a second sync while the tool runs
        await asyncio.sleep(0.1)
        assert events == ["turn1", "tool done"], events
        manager.resume(2)
        return await asyncio.wait_for(task, timeout=5)

    first, second = asyncio.run(scenario())
    assert first.token_ids == [10, 11, 12, 12, 12] and first.log_probs == [-0.1, -0.2, -0.3, -0.3, -0.3]
    assert replica.prompts[1] == [1, 2, 10, 11]
    assert first.extra["num_aborts"] == 1 and first.extra["max_global_steps"] == 1
    assert (second.extra["min_global_steps"], second.extra["max_global_steps"], second.extra["num_aborts"]) == (2, 2, 0)
    assert events == ["turn1", "tool done", "turn2"]


def test_request_in_transit_during_a_sync_is_tagged_with_the_new_version(tiny_lm):
    """A call sent under version 0 that reaches the replica after the sync's abort waits there and runs on version 1
    once the replica re-opens, before the manager's own resume: its tokens must be tagged 1, not 0."""
    server = HFRolloutServer(_config(), model=copy.deepcopy(tiny_lm), max_steps_per_call=1)
    manager = PartialRolloutServerManager([server], resume_timeout_s=30)
    new_model = copy.deepcopy(tiny_lm)
    with torch.no_grad():
        for param in new_model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    prompt = [1, 5, 6, 7]

    async def scenario():
        async def run_sample():
            return await manager.generate(
                "req-transit", prompt_ids=prompt, sampling_params={"max_tokens": 8, "logprobs": True, "seed": 5}
            )

        await server.abort_all()  # the sync's abort reached the replica first
        task = asyncio.ensure_future(run_sample())  # sent while the manager was still open under version 0
        await asyncio.sleep(0.05)
        assert not task.done(), "the request should wait at the paused replica"
        manager.pause()
        await server.update_weights(list(new_model.state_dict().items()), 1)
        await server.resume()
        out = await asyncio.wait_for(task, timeout=60)  # done before the manager's resume below
        manager.resume(1)
        return out

    out = asyncio.run(scenario())
    assert out.stop_reason == "length" and len(out.token_ids) == 8
    torch.testing.assert_close(
        torch.tensor(out.log_probs), _reference_log_probs(new_model, prompt, out.token_ids), atol=1e-4, rtol=1e-4
    )
    tags = out.extra
    assert (tags["min_global_steps"], tags["max_global_steps"], tags["num_aborts"], tags["token_versions"]) == (
        1,
        1,
        0,
        [1] * 8,
    )
