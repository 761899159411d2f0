"""Replicas: the in-process hybrid one and the Ray-actor standalone one speak the same contract."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch
from _rollout_helpers import reference_greedy, rollout_config

from verl.single_controller.ray.errors import WorkerDiedError
from verl.utils.weight_checksum import weight_checksum
from verl.workers.rollout import StandaloneReplica, build_server

GREEDY = {"temperature": 0.0, "ignore_eos": True}


def _shifted_state(model):
    """The model's weights nudged by a fixed amount: what a trainer step would send."""
    return {name: tensor + 0.01 * torch.sign(tensor) for name, tensor in model.state_dict().items()}


def test_in_process_server_builds_by_name_and_updates_weights_in_place(tiny_causal_lm):
    model = copy.deepcopy(tiny_causal_lm)
    replica = build_server(rollout_config(), model=model)
    new_state = _shifted_state(tiny_causal_lm)

    async def run():
        report = await replica.update_weights(new_state.items(), version=2)
        out = await replica.generate([3, 4, 5], dict(GREEDY, max_tokens=6), "h")
        return report, out, await replica.get_version()

    report, out, version = asyncio.run(run())
    assert torch.equal(model.state_dict()["model.embed_tokens.weight"], new_state["model.embed_tokens.weight"])
    assert report == {"version": 2, "checksum": weight_checksum(new_state)} and version == 2
    assert out.token_ids == reference_greedy(model, [3, 4, 5], 6)


@pytest.mark.ray
def test_standalone_replica_generates_updates_and_aborts(ray_cluster, tiny_model_dir, tiny_causal_lm):
    replica = StandaloneReplica(
        rollout_config(response_length=450, max_model_len=460), str(tiny_model_dir), server_kwargs={"device": "cpu"}
    )
    new_state = _shifted_state(tiny_causal_lm)
    updated = copy.deepcopy(tiny_causal_lm)
    updated.load_state_dict(new_state)

    async def run():
        report = await replica.update_weights(new_state, version=5)
        out = await replica.generate([3, 4, 5], dict(GREEDY, max_tokens=6), "s1")
        long = asyncio.ensure_future(replica.generate([6, 7], dict(GREEDY, max_tokens=450), "s2"))
        for _ in range(20):
            await asyncio.sleep(0.05)
            await replica.abort_all()
            done, _ = await asyncio.wait({long}, timeout=5.0)
            if done:
                break
            # On a loaded machine the request can reach the server after the abort; it then waits at the pause
            # gate for a resume. Let it in and abort again.
            await replica.resume()
        aborted = await long
        await replica.resume()
        return report, out, aborted, await replica.get_version()

    try:
        report, out, aborted, version = asyncio.run(run())
    finally:
        replica.kill()
    assert report == {"version": 5, "checksum": weight_checksum(new_state)} and version == 5
    assert out.token_ids == reference_greedy(updated, [3, 4, 5], 6)
    assert aborted.stop_reason == "aborted" and len(aborted.token_ids) < 450


@pytest.mark.ray
def test_standalone_replica_sends_requests_made_together_in_one_call(ray_cluster, tiny_model_dir, tiny_causal_lm):
    import pickle

    import ray

    replica = StandaloneReplica(
        rollout_config(prompt_length=16, max_num_seqs=8), str(tiny_model_dir), server_kwargs={"device": "cpu"}
    )
    prompts = [[3, 4, 5], [6, 7], [8, 9, 10, 11]]
    too_long = [5] * 40  # over prompt_length=16: the server refuses this request only
    params = dict(GREEDY, max_tokens=5)

    async def together(rep):
        return await asyncio.gather(
            *(rep.generate(p, params, f"r{i}") for i, p in enumerate([*prompts, too_long])), return_exceptions=True
        )

    async def one_after_another(rep):
        return [await rep.generate(p, params, f"s{i}") for i, p in enumerate(prompts)]

    try:
        outputs = asyncio.run(together(replica))
        copy_of_replica = pickle.loads(pickle.dumps(replica))  # how replicas reach other actors
        singles = asyncio.run(one_after_another(copy_of_replica))
        sizes, copy_sizes = list(replica.batch_sizes), list(copy_of_replica.batch_sizes)
    finally:
        replica.kill()
    assert sizes == [len(prompts) + 1] and copy_sizes == [1, 1, 1]
    for prompt, output, alone in zip(prompts, outputs[:-1], singles, strict=True):
        assert output.token_ids == alone.token_ids == reference_greedy(tiny_causal_lm, prompt, 5)
    assert isinstance(outputs[-1], ValueError) and "prompt" in str(outputs[-1])
    # a dead server fails every request of the call naming the replica (Ray's error as the cause), none hangs
    failed = asyncio.run(together(replica))
    assert all(
        isinstance(f, WorkerDiedError)
        and "rollout replica rank 0 died during generate()" in str(f)
        and isinstance(f.__cause__, ray.exceptions.RayActorError)
        for f in failed
    ), failed
