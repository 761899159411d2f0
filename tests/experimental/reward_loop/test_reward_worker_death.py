"""A reward-loop worker whose process is killed (SIGKILL on the pid its actor reports) while it scores is named
first: role, index, node, pid and the call in flight, whether the driver's batch scoring or an agent-loop worker
(scoring each trajectory as it finishes) was waiting on it."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import numpy as np
import pytest
from _reward_batches import make_batch

pytestmark = pytest.mark.ray

# A custom reward function that marks its worker's pid as busy, then scores slowly: the kill lands mid-call.
SLOW_REWARD = """
import os, time

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    open(os.path.join({marks!r}, str(os.getpid())), "w").close()
    time.sleep(60)
    return 1.0
"""


@pytest.fixture(scope="module")
def rewards(ray_cluster, tiny_model_dir, tmp_path_factory):
    """Two reward-loop workers running the slow reward, shared by the tests (worker 1 is killed by the first, worker
    0 by the second); yields (config, manager, folder of the busy marks)."""
    from verl.experimental.reward_loop import RewardLoopManager
    from verl.workers.config import CustomRewardFunctionConfig, HFModelConfig, RewardConfig

    root = tmp_path_factory.mktemp("slow_reward")
    marks = root / "busy"
    marks.mkdir()
    fn = root / "slow_reward.py"
    fn.write_text(SLOW_REWARD.format(marks=str(marks)))
    reward = RewardConfig(custom_reward_function=CustomRewardFunctionConfig(path=str(fn)), num_workers=2)
    config = {
        "model": HFModelConfig(path=str(tiny_model_dir)),
        "reward": reward,
        "data": {"reward_fn_key": "data_source"},
    }
    manager = RewardLoopManager(config)
    yield config, manager, marks
    _kill_all(manager.reward_loop_worker_handles)


def _pid(handle) -> int:
    import ray

    return ray.get(handle.__ray_call__.remote(lambda self: os.getpid()), timeout=60)


def _wait_busy(marks, pid: int) -> None:
    deadline = time.monotonic() + 60
    while not (marks / str(pid)).exists():
        assert time.monotonic() < deadline, f"reward worker pid {pid} never started scoring"
        time.sleep(0.02)


def _kill_all(handles) -> None:
    import ray

    for handle in handles:
        try:
            ray.kill(handle)
        except Exception:  # noqa: BLE001 - already gone
            pass


def _assert_names(line: str, index: int, pid: int, node_id: str, method: str) -> None:
    head = f"reward worker rank {index} died during {method}() on node {node_id} ("
    assert line.startswith(head), line
    assert f", pid {pid}: " in line, line


def test_batch_scoring_names_the_killed_reward_worker(rewards, tiny_model_dir):
    import ray
    from transformers import AutoTokenizer

    from verl.single_controller.ray.errors import WorkerDiedError

    node_id = ray.get_runtime_context().get_node_id()
    _, manager, marks = rewards
    workers = manager.reward_loop_worker_handles
    pid = _pid(workers[1])
    data = make_batch(AutoTokenizer.from_pretrained(tiny_model_dir), ["1", "2"], ["1", "2"])

    async def run():
        task = asyncio.ensure_future(asyncio.to_thread(manager.compute_rm_score, data))
        await asyncio.to_thread(_wait_busy, marks, pid)
        os.kill(pid, signal.SIGKILL)
        return await task

    start = time.monotonic()
    with pytest.raises(WorkerDiedError) as info:
        asyncio.run(run())
    assert time.monotonic() - start < 45  # raised at once, not after worker 0's slow call
    _assert_names(str(info.value).splitlines()[0], 1, pid, node_id, "compute_score_batch")
    assert info.value.role == "reward worker" and info.value.rank == 1


def test_agent_loop_names_the_killed_reward_worker_not_itself(rewards, tiny_model_dir):
    """Runs after the batch-scoring test: worker 1 is dead, worker 0 (still in that test's slow call) scores."""
    import ray

    from verl.experimental.agent_loop import AgentLoopManager
    from verl.protocol import DataProto
    from verl.single_controller.ray.errors import WorkerDiedError
    from verl.workers.config import AgentLoopConfig, RolloutConfig
    from verl.workers.rollout import StandaloneReplica

    node_id = ray.get_runtime_context().get_node_id()
    base, rewards_manager, marks = rewards
    config = {**base, "rollout": None}
    config["rollout"] = RolloutConfig(
        name="hf",
        prompt_length=16,
        response_length=4,
        max_num_seqs=4,
        dtype="float32",
        ignore_eos=True,
        agent=AgentLoopConfig(num_workers=1),
    )
    replica = StandaloneReplica(config["rollout"], str(tiny_model_dir), server_kwargs={"device": "cpu"})
    handles = rewards_manager.reward_loop_worker_handles[:1]
    pid = _pid(handles[0])
    (marks / str(pid)).unlink(missing_ok=True)  # its mark of the first test's call
    manager = asyncio.run(
        AgentLoopManager.create(config, replicas=[replica], reward_loop_worker_handles=handles, reward_in_loop=True)
    )
    try:
        prompts = np.empty(2, dtype=object)
        prompts[0], prompts[1] = [1, 10], [1, 11]
        columns = {"raw_prompt_ids": prompts, "data_source": np.array(["test", "test"], dtype=object)}
        batch = DataProto.from_dict(non_tensors=columns, meta_info={"validate": True})

        async def run():
            task = asyncio.ensure_future(manager.generate_sequences_async(batch))
            await asyncio.to_thread(_wait_busy, marks, pid)
            os.kill(pid, signal.SIGKILL)
            return await task

        with pytest.raises(WorkerDiedError) as info:
            asyncio.run(run())
    finally:
        manager.shutdown()
        replica.kill()
    message = str(info.value)
    _assert_names(message.splitlines()[0], 0, pid, node_id, "compute_score")
    assert info.value.role == "reward worker" and info.value.rank == 0
    assert "(seen by agent loop worker 0 (rows 0..1))" in message and "agent-loop worker rank" not in message, message
