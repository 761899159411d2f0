"""Fully-async GRPO with the trainer and the rollout on different nodes of a 2-node local Ray cluster, and the
rollout node dying mid-run."""

from __future__ import annotations

import time

import pytest
import ray
from _runs import LEARNING_STEPS, actors_of, demo_overrides_for, new_actors, rising
from omegaconf import OmegaConf

from verl.experimental.fully_async_policy.fully_async_main import CONFIG_DIR, CONFIG_NAME
from verl.experimental.separation.entry import compose_recipe_config
from verl.experimental.separation.task_runner import AsyncTaskRunner, run_async_training
from verl.single_controller.ray.node_placement import on_this_node
from verl.utils.tracking import read_metrics

MULTINODE_WORKER_NODES = 1
pytestmark = [pytest.mark.ray, pytest.mark.multinode, pytest.mark.slow]  # a learning run: the slow tier

GROUPS = 16  # data.train_batch_size of the demo: prompts per training step
LAYOUT = (
    "trainer.nnodes=1",
    "trainer.n_gpus_per_node=1",
    "rollout.nnodes=1",
    "rollout.n_gpus_per_node=1",
    "async_training.staleness_threshold=0.5",
    "async_training.trigger_parameter_sync_step=1",
    "async_training.partial_rollout=true",
)


def _config(run_dir, steps: int, *extra: str):
    overrides = demo_overrides_for(run_dir, *LAYOUT, f"rollout.total_rollout_steps={steps * GROUPS}", *extra)
    return compose_recipe_config(CONFIG_DIR, CONFIG_NAME, overrides)


def test_rollout_and_trainer_on_different_nodes_learn(multinode_cluster, tmp_path):
    before_trainer, before_servers = actors_of("Colocated"), actors_of("RolloutServer")
    summary = run_async_training(_config(tmp_path, LEARNING_STEPS), "fully_async")
    trainer_nodes = {place.node_id for place in new_actors(before_trainer, "Colocated").values()}
    server_nodes = {place.node_id for place in new_actors(before_servers, "RolloutServer").values()}
    assert len(trainer_nodes) == 1 and len(server_nodes) == 1 and trainer_nodes != server_nodes, (
        trainer_nodes,
        server_nodes,
    )

    consumed = summary["consumed_indices"]
    assert len(consumed) == len(set(consumed)) == LEARNING_STEPS * GROUPS, "a group was lost or consumed twice"
    assert summary["replica_versions"] == [summary["weight_version"]], "the rollout node missed the last weights"
    scores = [record["critic/score/mean"] for record in read_metrics(tmp_path)]
    assert len(scores) == LEARNING_STEPS
    assert rising(scores), f"reward over {LEARNING_STEPS} fully-async steps across two nodes: {scores}"


@pytest.mark.slow  # CI budget; the sync dead-node test stays
def test_losing_the_rollout_node_names_it(multinode_cluster, tmp_path):
    """The rollout node dies while the trainer waits for samples: the run ends naming the rollout replica's rank
    and its node."""
    before = actors_of("RolloutServer")
    config = _config(tmp_path, 200)
    runner = AsyncTaskRunner.options(**on_this_node(0.1)).remote()
    pending = runner.run.remote(OmegaConf.to_container(config, resolve=True), "fully_async")
    deadline = time.monotonic() + 300
    while not (tmp_path / "metrics.jsonl").is_file():  # training has started: the rollout serves requests
        assert time.monotonic() < deadline, "the run never logged a step"
        time.sleep(0.2)
    server = next(iter(new_actors(before, "RolloutServer").values()))
    node = next(node for node in multinode_cluster.nodes if node.node_id == server.node_id)
    start = time.monotonic()
    multinode_cluster.kill_node(node)
    try:
        with pytest.raises(ray.exceptions.RayTaskError) as failure:
            ray.get(pending, timeout=90)
        detected_s = time.monotonic() - start
        message = str(failure.value)
        # named by the request path (rollout rank 0) or the weight sync (the replica), with the node either way
        assert server.node_id in message and ("rollout rank 0" in message or "replica" in message), message
        assert detected_s < 60, f"the run took {detected_s:.1f}s to report the dead rollout node"
        print(f"dead rollout node {server.node_id[:12]} reported after {detected_s:.1f}s")
    finally:
        multinode_cluster.add_node()
