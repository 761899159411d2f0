"""AgentLoopManager on the shared Ray cluster: standalone replicas on a resource pool, streaming reward in the
workers, routing counters, a replica killed mid-batch, and the hybrid engines inside actor workers."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
import torch
from _agent_loop_helpers import TOOL_TOKENS, expected_rows, greedy, make_config, prompt_batch

from verl.experimental.agent_loop import AgentLoopManager
from verl.experimental.agent_loop.postprocess import NUM_TURNS_KEY
from verl.workers.config import CustomRewardFunctionConfig, RewardConfig

pytestmark = pytest.mark.ray

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS = [[1, 20, 21], [1, 30, 31, 32, 33], [1, 40], [1, 50, 51, 52]]


@pytest.fixture(scope="module")
def standalone(ray_cluster, tiny_model_dir):
    from verl.single_controller.ray import RayResourcePool

    reward = RewardConfig(
        custom_reward_function=CustomRewardFunctionConfig(path=os.path.join(HERE, "_reward_fn.py")), num_workers=1
    )
    config = make_config(tiny_model_dir, num_workers=2, reward=reward, max_model_len=256)
    pool = RayResourcePool([2], use_gpu=False, name_prefix="agent_loop_test")
    manager = asyncio.run(
        AgentLoopManager.create(
            config, rollout_resource_pool=pool, reward_in_loop=True, server_kwargs={"device": "cpu"}
        )
    )
    yield config, manager
    manager.shutdown()
    pool.release()


def test_standalone_layout_order_and_streamed_rewards(standalone, tiny_lm):
    config, manager = standalone
    P, R = config["rollout"].prompt_length, config["rollout"].response_length
    batch = prompt_batch(
        PROMPTS,
        agent_names=["two_turn_test", "single_turn_agent"] * 2,
        turn_tokens=[[2, 3], None, [4, 1], None],
        uid=["a", "b", "c", "d"],
        data_source=["test"] * 4,
    )
    out = manager.generate_sequences(batch)  # the blocking variant

    expected = []
    for prompt, turns in zip(PROMPTS, [[2, 3], None, [4, 1], None]):
        if turns is None:
            expected.append(expected_rows(prompt, greedy(tiny_lm, prompt, R), [1] * R, P, R, 0))
            continue
        first = greedy(tiny_lm, prompt, turns[0])
        second = greedy(tiny_lm, prompt + first + TOOL_TOKENS, turns[1])
        mask = [1] * len(first) + [0] * len(TOOL_TOKENS) + [1] * len(second)
        expected.append(expected_rows(prompt, first + TOOL_TOKENS + second, mask, P, R, 0))
    for key in expected[0]:
        assert out.batch[key].tolist() == [rows[key] for rows in expected], key
    assert out.non_tensor_batch["uid"].tolist() == ["a", "b", "c", "d"]
    assert out.non_tensor_batch[NUM_TURNS_KEY].tolist() == [4, 2, 4, 2]
    assert out.batch["rollout_log_probs"].shape == (4, R)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(config["model"].path)
    lengths = out.batch["attention_mask"][:, P:].sum(-1).tolist()
    for i, length in enumerate(lengths):
        text = tokenizer.decode(out.batch["responses"][i, :length].tolist(), skip_special_tokens=True)
        expected_scores = torch.zeros(R)
        expected_scores[length - 1] = float(len(text))
        assert out.batch["rm_scores"][i].tolist() == expected_scores.tolist()
    timing = out.meta_info["metrics"]
    for key in (
        "agent_loop/generate_sequences/mean",
        "agent_loop/compute_score/max",
        "agent_loop/num_turns/mean",
        "agent_loop/generate_sequences_wall",
    ):
        assert key in timing, key
    assert "agent_loop_metrics" not in out.meta_info


def test_routing_counters_show_both_replicas_and_sticky_turns(standalone):
    _, manager = standalone
    before = asyncio.run(manager.server_stats())
    batch = prompt_batch(
        [[1, 60 + i] for i in range(8)],
        agent_names=["two_turn_test"] * 8,
        turn_tokens=[[2, 2]] * 8,
        data_source=["test"] * 8,
    )
    asyncio.run(manager.generate_sequences_async(batch))
    after = asyncio.run(manager.server_stats())
    assert len(after) == 2
    for old, new in zip(before, after):
        routed = [n - o for n, o in zip(new.routed, old.routed)]
        assert sum(routed) == 8 and min(routed) >= 2  # 4 samples x 2 turns per worker, spread over both
        assert new.sticky_hits - old.sticky_hits == 4  # every second turn went back to its first replica
        assert new.retries == 0 and new.dead == []


def test_in_flight_bound_is_split_over_the_workers_and_loses_no_row(standalone):
    from verl.experimental.agent_loop.concurrency import MAX_IN_FLIGHT_KEY

    _, manager = standalone
    rows = [[1, 70 + i] for i in range(24)]

    def generate(meta: dict):
        batch = prompt_batch(rows, data_source=["test"] * len(rows), meta={"validate": True, **meta})
        return manager.generate_sequences(batch)

    bounded = generate({MAX_IN_FLIGHT_KEY: 4})
    unbounded = generate({})
    assert bounded.meta_info["metrics"]["agent_loop/peak_in_flight"] == 4  # 2 workers x 2, never more
    assert unbounded.meta_info["metrics"]["agent_loop/peak_in_flight"] == len(rows)  # every row at once
    assert torch.equal(bounded.batch["responses"], unbounded.batch["responses"])  # same rows, same order


def test_unknown_agent_name_fails_before_any_request(standalone):
    _, manager = standalone
    with pytest.raises(ValueError, match="agent_name 'missing_agent' is not a registered agent loop; registered: "):
        manager.generate_sequences(prompt_batch([[1, 2]], agent_names=["missing_agent"]))


def test_blocking_variant_refuses_a_running_loop(standalone):
    _, manager = standalone

    async def call():
        manager.generate_sequences(prompt_batch([[1, 2]]))

    with pytest.raises(RuntimeError, match="AgentLoopManager.generate_sequences is blocking .* await its async"):
        asyncio.run(call())


def test_killed_replica_mid_batch_loses_no_sample(standalone):
    """Runs last among the tests of the shared manager: it kills one of its replicas."""
    _, manager = standalone
    n = 12
    batch = prompt_batch(
        [[1, 10 + i] for i in range(n)], agent_names=["long_test"] * n, max_tokens=[160] * n, data_source=["test"] * n
    )

    async def run():
        task = asyncio.ensure_future(manager.generate_sequences_async(batch))
        deadline = time.monotonic() + 120
        while True:  # kill replica 0 once every worker has requests in flight on both replicas
            stats = await manager.server_stats()
            if all(min(s.in_flight) > 0 for s in stats):
                break
            assert time.monotonic() < deadline and not task.done(), "requests never got in flight on both replicas"
            await asyncio.sleep(0.02)
        manager.owned_replicas[0].kill()
        return await task, await manager.server_stats()

    out, stats = asyncio.run(run())
    assert len(out) == n
    assert out.non_tensor_batch["generated"].tolist() == [160] * n  # ignore_eos: every sample ran to the end
    assert out.batch["rm_scores"].shape == (n, 12)
    for s in stats:
        assert s.dead == [0] and s.retries >= 1


def test_a_killed_agent_loop_worker_is_named_first(standalone, caplog):
    """Runs after the replica kill: it kills agent-loop worker 1 mid-batch (the manager is done with after it)."""
    import ray

    from verl.single_controller.ray.errors import WorkerDiedError

    _, manager = standalone
    n = 8
    batch = prompt_batch(
        [[1, 10 + i] for i in range(n)], agent_names=["long_test"] * n, max_tokens=[160] * n, data_source=["test"] * n
    )
    victim = manager.workers[1]
    pid = ray.get(victim.__ray_call__.remote(lambda self: os.getpid()))

    async def run():
        task = asyncio.ensure_future(manager.generate_sequences_async(batch))
        deadline = time.monotonic() + 120
        while sum((await manager.server_stats())[1].in_flight) == 0:  # worker 1 has requests in flight
            assert time.monotonic() < deadline and not task.done(), "worker 1 never got requests in flight"
            await asyncio.sleep(0.02)
        os.kill(pid, 9)
        return await task

    with pytest.raises(WorkerDiedError) as info:
        asyncio.run(run())
    first_line = str(info.value).splitlines()[0]
    assert first_line.startswith("agent-loop worker rank 1 died during generate_sequences() on node "), first_line
    assert f"pid {pid}" in first_line and "(the worker was running the agent loops of rows 4..7" in str(info.value)
    assert info.value.role == "agent-loop worker" and info.value.rank == 1
    # the surviving worker was stopped with the batch: nothing of it can outlive the error
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(manager.workers[0].ready.remote(), timeout=30)
    assert "routing around it" not in caplog.text


@pytest.mark.slow  # the colocated e2e runs drive hybrid engines too
def test_hybrid_engines_in_actor_workers(ray_cluster, tiny_model_dir, tiny_lm):
    from omegaconf import OmegaConf

    from verl.single_controller.ray import (
        RayClassWithInitArgs,
        RayResourcePool,
        RayWorkerGroup,
        create_colocated_worker_cls,
    )

    config = OmegaConf.create(
        {
            "model": {"path": str(tiny_model_dir)},
            "rollout": {
                "prompt_length": 16,
                "response_length": 12,
                "calculate_log_probs": True,
                "ignore_eos": True,
                "free_cache_engine": True,
                "agent": {"num_workers": 1},
            },
            "trainer": {"device": "cpu", "seed": 1},
        }
    )
    pool = RayResourcePool([1], use_gpu=False, name_prefix="agent_loop_hybrid")
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    cls = RayClassWithInitArgs(ActorRolloutRefWorker, config=config, role="rollout")
    group = RayWorkerGroup(pool, create_colocated_worker_cls({"actor_rollout": cls}))
    worker_group = group.spawn(prefix_set=["actor_rollout"])["actor_rollout"]
    worker_group.init_model()
    default = asyncio.run(AgentLoopManager.create(config, worker_group=worker_group))
    default.shutdown()
    assert not default.sleep_between_batches  # on CPU sleeping frees nothing: the default skips it
    manager = asyncio.run(AgentLoopManager.create(config, worker_group=worker_group, sleep_between_batches=True))
    try:
        outs = [manager.generate_sequences(prompt_batch(PROMPTS[:2])) for _ in range(2)]  # wakes after sleeping
        worker_group.wake_up_rollout()
        batched, single, sizes = asyncio.run(_coalesced_and_single_requests(worker_group))
    finally:
        manager.shutdown()
        group.shutdown()
        pool.release()
    for out in outs:
        for i, prompt in enumerate(PROMPTS[:2]):
            rows = expected_rows(prompt, greedy(tiny_lm, prompt, 12), [1] * 12, 16, 12, 0)
            for key, row in rows.items():
                assert out.batch[key][i].tolist() == row, key
    # requests made together travel in one Ray call; each caller gets its own answer or its own error
    assert sizes == [len(PROMPTS) + 1]
    for prompt, output, alone in zip(PROMPTS, batched[:-1], single, strict=True):
        assert output.token_ids == greedy(tiny_lm, prompt, 12) == alone.token_ids
        assert output.log_probs == pytest.approx(alone.log_probs, abs=1e-6)
    assert isinstance(batched[-1], ValueError) and "prompt" in str(batched[-1])


async def _coalesced_and_single_requests(worker_group):
    from verl.workers.rollout.replica import WorkerRankReplica, worker_rank_replicas

    coalescing = worker_rank_replicas(worker_group)[0]
    one_by_one = WorkerRankReplica(coalescing.handle, 0, coalescing.method_names, coalesce=False)
    params = {"do_sample": False, "max_tokens": 12, "ignore_eos": True, "logprobs": True}
    too_long = [5] * 40  # over rollout.prompt_length=16: the engine refuses this request only
    batched = await asyncio.gather(
        *(coalescing.generate(p, params, f"b{i}") for i, p in enumerate([*PROMPTS, too_long])),
        return_exceptions=True,
    )
    single = [await one_by_one.generate(p, params, f"s{i}") for i, p in enumerate(PROMPTS)]
    return batched, single, list(coalescing.batch_sizes)


def test_hybrid_mode_needs_a_worker_serving_the_replica_contract():
    from verl.workers.rollout.replica import worker_rank_replicas

    class Group:
        role = "actor_rollout"
        bound_methods = {"generate_sequences": "actor_rollout_generate_sequences", "sleep": "actor_rollout_sleep"}
        workers = ["handle"]

    with pytest.raises(
        TypeError, match="worker group 'actor_rollout' has no 'rollout_generate', .*ActorRolloutRefWorker"
    ):
        worker_rank_replicas(Group())


def test_create_without_any_replica_source_names_the_options(tiny_model_dir):
    config = make_config(tiny_model_dir)
    with pytest.raises(ValueError, match="needs worker_group .* or rollout.nnodes > 0"):
        asyncio.run(AgentLoopManager.create(config))
