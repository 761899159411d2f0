"""A standalone rollout replica whose process is killed (SIGKILL on the pid its actor reports) is named first: role,
rank, node, pid and the call in flight. The router names the dead replica only (and routes around it while another
is alive); when none is left, the error names every dead one, also through the agent-loop workers."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time

import pytest
from _rollout_helpers import rollout_config

from verl.experimental.agent_loop.server_manager import AllReplicasDeadError, AsyncLLMServerManager
from verl.workers.rollout import StandaloneReplica

pytestmark = pytest.mark.ray

LONG = {"temperature": 0.0, "ignore_eos": True, "max_tokens": 200}
ROUTER_LOG = "verl.experimental.agent_loop.server_manager"


def _pid(replica: StandaloneReplica) -> int:
    import ray

    return ray.get(replica.actor.__ray_call__.remote(lambda self: os.getpid()), timeout=60)


def _replicas(tiny_model_dir, count: int) -> list[StandaloneReplica]:
    config = rollout_config(prompt_length=16, response_length=200, max_model_len=220)
    return [
        StandaloneReplica(config, str(tiny_model_dir), server_kwargs={"device": "cpu"}, replica_rank=rank)
        for rank in range(count)
    ]


def _kill_all(replicas: list[StandaloneReplica]) -> None:
    for replica in replicas:
        try:
            replica.kill()
        except Exception:  # noqa: BLE001 - already gone
            pass


async def _until_in_flight(manager: AsyncLLMServerManager, tasks: list, index: int) -> None:
    deadline = time.monotonic() + 60
    while manager.stats().in_flight[index] == 0:
        assert time.monotonic() < deadline and not any(t.done() for t in tasks), "no request got in flight"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)  # the request has reached the server


def _assert_names(line: str, rank: int, pid: int, node_id: str) -> None:
    head = f"rollout replica rank {rank} died during generate() on node {node_id} ("
    assert head in line and f", pid {pid}: " in line.split(head, 1)[1], line


def test_router_names_the_dead_replica_only_then_every_dead_one(ray_cluster, tiny_model_dir, caplog):
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    replicas = _replicas(tiny_model_dir, 2)
    try:
        pids = [_pid(r) for r in replicas]
        manager = AsyncLLMServerManager(replicas, request_timeout_s=120)

        def start(prefix: str, count: int) -> list:
            return [
                asyncio.ensure_future(manager.generate(f"{prefix}{i}", prompt_ids=[3, 4 + i], sampling_params=LONG))
                for i in range(count)
            ]

        async def run():
            first = start("a", 4)  # two on each replica
            await _until_in_flight(manager, first, 1)
            os.kill(pids[1], signal.SIGKILL)
            survived = await asyncio.gather(*first, return_exceptions=True)
            second = start("b", 2)
            await _until_in_flight(manager, second, 0)
            os.kill(pids[0], signal.SIGKILL)
            return survived, await asyncio.gather(*second, return_exceptions=True)

        with caplog.at_level(logging.WARNING, logger=ROUTER_LOG):
            survived, lost = asyncio.run(run())
    finally:
        _kill_all(replicas)

    # replica 1's requests were routed around it: no sample lost while replica 0 lived
    assert [type(out).__name__ for out in survived] == ["TokenOutput"] * 4, survived
    records = [r.getMessage() for r in caplog.records if r.name == ROUTER_LOG]
    assert len(records) == 2, records  # one line per dead replica, none for a live one
    _assert_names(records[0], 1, pids[1], node_id)
    assert records[0].startswith("rollout replica rank 1 died during generate()"), records[0]
    assert "routing around it: replica(s) [0] left" in records[0] and "\n" not in records[0], records[0]
    assert "rank 0" not in records[0] and "ActorDiedError" not in records[0], records[0]
    _assert_names(records[1], 0, pids[0], node_id)
    assert records[1].startswith("rollout replica rank 0 died") and "no replica left" in records[1], records[1]
    # with none left, the error's first line names every dead replica, its node, pid and call
    for error in lost:
        assert isinstance(error, AllReplicasDeadError), error
        first = str(error).splitlines()[0]
        assert "every rollout replica has died (2 of 2): " in first, first
        _assert_names(first, 0, pids[0], node_id)
        _assert_names(first, 1, pids[1], node_id)


def test_agent_loop_manager_names_every_dead_replica_first(ray_cluster, tiny_model_dir):
    import numpy as np
    import ray

    from verl.experimental.agent_loop import AgentLoopManager
    from verl.protocol import DataProto
    from verl.workers.config import AgentLoopConfig, HFModelConfig, RewardConfig

    node_id = ray.get_runtime_context().get_node_id()
    replicas = _replicas(tiny_model_dir, 1)
    rollout = rollout_config(
        prompt_length=16, response_length=200, max_model_len=220, ignore_eos=True, agent=AgentLoopConfig(num_workers=1)
    )
    config = {"rollout": rollout, "model": HFModelConfig(path=str(tiny_model_dir)), "reward": RewardConfig()}
    manager = asyncio.run(AgentLoopManager.create(config, replicas=replicas, reward_in_loop=False))
    pid = _pid(replicas[0])
    prompts = np.empty(2, dtype=object)
    prompts[0], prompts[1] = [1, 10], [1, 11]
    batch = DataProto.from_dict(non_tensors={"raw_prompt_ids": prompts}, meta_info={"validate": True})

    async def run():
        task = asyncio.ensure_future(manager.generate_sequences_async(batch))
        deadline = time.monotonic() + 60
        while sum((await manager.server_stats())[0].in_flight) == 0:
            assert time.monotonic() < deadline and not task.done(), "no request got in flight"
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        os.kill(pid, signal.SIGKILL)
        return await task

    try:
        with pytest.raises(AllReplicasDeadError) as info:
            asyncio.run(run())
    finally:
        manager.shutdown()
        _kill_all(replicas)
    first = str(info.value).splitlines()[0]
    assert "every rollout replica has died (1 of 1): " in first, first
    _assert_names(first, 0, pid, node_id)
    assert "(seen by agent loop worker 0 (rows 0..1))" in str(info.value), str(info.value)
