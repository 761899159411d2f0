"""Synchronous GRPO on a 3-node local Ray cluster: training ranks on two nodes, a rollout node of its own, a node
that dies mid-run, and a run that heals itself after losing a training rank twice."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray
from _runs import (
    LEARNING_STEPS,
    actors_of,
    demo_config,
    demo_overrides_for,
    last_record_per_step,
    new_actors,
    rising,
    wait_for_checkpoint,
)

from verl.single_controller.ray.node_placement import on_this_node
from verl.trainer.ppo.checkpointing import STATE_FILE
from verl.trainer.ppo.task_runner import TaskRunner, run_ppo
from verl.utils.tracking import read_metrics

MULTINODE_WORKER_NODES = 2
# Slow tier: a 30-step reference run plus four more runs (learning, a dead node, a self-healing run) take about a
# fifth of the default tier's CPU; the chaos soak (tests/chaos) kills nodes and ranks in the same tier.
pytestmark = [pytest.mark.ray, pytest.mark.multinode, pytest.mark.slow]

TRAINER = "Colocated_actor"  # class name of the colocated training workers
TWO_NODES = (
    "trainer.nnodes=2",
    "trainer.n_gpus_per_node=1",
    "trainer.save_freq=5",
    f"trainer.total_training_steps={LEARNING_STEPS}",
)
# The failure runs are shorter than the reference: with a constant learning rate, step k of a shorter run equals
# step k of the reference, so they are compared step for step.
FAILURE_STEPS = 8
FAILURE_RUN = (
    "trainer.nnodes=2",
    "trainer.n_gpus_per_node=1",
    "trainer.save_freq=2",
    f"trainer.total_training_steps={FAILURE_STEPS}",
)
_COMPARED = ("actor/pg_loss", "actor/grad_norm", "actor/entropy", "critic/score/mean", "response_length/mean")


def _same_metrics(got: dict, want: dict, steps) -> None:
    for step in steps:
        for key in _COMPARED:
            assert got[step][key] == pytest.approx(want[step][key], abs=1e-6, rel=0), (step, key)


@dataclass(frozen=True)
class ReferenceRun:
    """The undisturbed run on two training nodes: its folder, where its ranks lived, what ``ray job submit`` said."""

    run_dir: Path
    ranks: dict
    job_output: str


@pytest.fixture(scope="module")
def reference_run(multinode_cluster, tmp_path_factory):
    """The demo on two training nodes (checkpoints every 5 steps), submitted to the running cluster with ``ray job
    submit --working-dir .`` as users do; the failure tests compare their steps with it. The job's driver finds the
    cluster through $RAY_ADDRESS (set by Ray's job supervisor) and its workers import the uploaded package."""
    run_dir = tmp_path_factory.mktemp("reference")
    repo_root = Path(__file__).resolve().parents[2]
    before = actors_of(TRAINER)
    command = [
        "ray",
        "job",
        "submit",
        "--address",
        f"http://{multinode_cluster.cluster.webui_url}",
        "--working-dir",
        str(repo_root),
        "--",
        # Ray's job supervisor hands the driver RAY_ADDRESS=auto, which follows this machine's latest cluster: with
        # another test process running a cluster beside this one, that is not ours, so the driver gets our address
        # (on a real cluster, one Ray per machine, `auto` is this cluster and the prefix is not needed)
        f"RAY_ADDRESS={multinode_cluster.address}",
        "python",
        "-m",
        "verl.trainer.main_ppo",
        *demo_overrides_for(run_dir, *TWO_NODES),  # `ray job submit` quotes each for the shell
    ]
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    for _ in range(6):
        result = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=repo_root)
        output = result.stdout + result.stderr
        # the job server answers this while the head's dashboard agent (which runs job drivers) registers
        if "No available agent to submit job" not in output:
            break
        time.sleep(5)
    assert result.returncode == 0, output[-4000:]
    return ReferenceRun(run_dir, new_actors(before, TRAINER), output)


def _start(config):
    runner = ray.remote(num_cpus=0.1)(TaskRunner).options(**on_this_node(0.1)).remote()
    return runner.run.remote(config)


def test_two_training_nodes_learn_and_match_one_node(multinode_cluster, reference_run, tmp_path):
    run_dir = reference_run.run_dir
    nodes = {place.name.rsplit("_", 1)[-1]: place.node_id for place in reference_run.ranks.values()}
    assert sorted(nodes) == ["rank0", "rank1"] and nodes["rank0"] != nodes["rank1"], nodes
    assert nodes["rank0"] == multinode_cluster.node_ids()[0], "rank 0 (the rendezvous) belongs on the head node"

    before = actors_of(TRAINER)
    run_ppo(demo_config(tmp_path, "trainer.nnodes=1", "trainer.n_gpus_per_node=2", "trainer.total_training_steps=3"))
    one_node = new_actors(before, TRAINER)
    assert len(one_node) == 2 and len({place.node_id for place in one_node.values()}) == 1, one_node

    _same_metrics(last_record_per_step(run_dir), last_record_per_step(tmp_path), range(1, 4))
    scores = [record["critic/score/mean"] for record in read_metrics(run_dir)]
    assert len(scores) == LEARNING_STEPS
    assert rising(scores), f"reward over {LEARNING_STEPS} steps on two nodes: {scores}"


def test_standalone_rollout_node_learns_with_verified_weights(multinode_cluster, tmp_path):
    before_trainers, before_servers = actors_of(TRAINER), actors_of("RolloutServer")
    run_ppo(
        demo_config(
            tmp_path,
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=2",
            "rollout.nnodes=1",
            "rollout.n_gpus_per_node=2",
            f"trainer.total_training_steps={LEARNING_STEPS}",
        )
    )
    trainers = {place.node_id for place in new_actors(before_trainers, TRAINER).values()}
    servers = new_actors(before_servers, "RolloutServer")
    assert len(trainers) == 1 and len(servers) == 2, (trainers, servers)
    assert len({place.node_id for place in servers.values()}) == 1
    assert trainers.isdisjoint(place.node_id for place in servers.values()), "the rollout shares the trainer's node"

    records = read_metrics(tmp_path)
    # every step pushed its update to the replicas, which reported the version and the trainer's checksum
    assert [record["rollout/weight_version"] for record in records] == list(range(1, LEARNING_STEPS + 1))
    scores = [record["critic/score/mean"] for record in records]
    assert rising(scores), f"reward over {LEARNING_STEPS} steps with a standalone rollout node: {scores}"


def test_ray_job_submit_runs_the_demo_on_two_nodes(reference_run):
    """The reference run went through ``ray job submit``: the job succeeded, ran from the uploaded package, logged
    every step and put one training rank on each node."""
    assert "succeeded" in reference_run.job_output and "_ray_pkg_" in reference_run.job_output
    assert [record["step"] for record in read_metrics(reference_run.run_dir)] == list(range(1, LEARNING_STEPS + 1))
    assert len(reference_run.ranks) == 2
    assert len({place.node_id for place in reference_run.ranks.values()}) == 2, reference_run.ranks


def test_a_dead_node_is_named_and_the_run_resumes_on_the_survivors(multinode_cluster, reference_run, tmp_path):
    config = demo_config(tmp_path, *FAILURE_RUN, "trainer.resume_mode=auto")
    before = actors_of(TRAINER)
    pending = _start(config)
    saved = wait_for_checkpoint(tmp_path, 4)
    rank1 = next(place for place in new_actors(before, TRAINER).values() if place.name.endswith("_rank1"))
    node = next(node for node in multinode_cluster.nodes if node.node_id == rank1.node_id)
    start = time.monotonic()
    multinode_cluster.kill_node(node)
    with pytest.raises(ray.exceptions.RayTaskError) as failure:
        ray.get(pending, timeout=60)
    detected_s = time.monotonic() - start
    message = str(failure.value)
    assert rank1.node_id in message and "rank 1" in message and "actor" in message, message
    print(f"dead node {rank1.node_id[:12]} reported after {detected_s:.1f}s")

    try:
        resumed_from = int((tmp_path / "latest_checkpointed_iteration.txt").read_text())
        assert resumed_from >= saved and (tmp_path / f"global_step_{resumed_from}" / STATE_FILE).is_file()
        # the surviving cluster: once its health checks have given the node up (until then it counts as alive)
        multinode_cluster.wait_until_dead(rank1.node_id, timeout_s=120)
        run_ppo(config)  # two nodes are left: the head and the other worker node
        _same_metrics(
            last_record_per_step(tmp_path),
            last_record_per_step(reference_run.run_dir),
            range(resumed_from + 1, FAILURE_STEPS + 1),
        )
    finally:
        multinode_cluster.add_node()  # a replacement machine for the tests that follow


def _kill_rank1(before: dict, after_step: int, run_dir) -> str:
    """SIGKILL the live training rank 1 that is not in ``before`` once a checkpoint >= ``after_step`` exists."""
    wait_for_checkpoint(run_dir, after_step)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        live = [
            key for key, place in new_actors(before, TRAINER).items() if place.alive and place.name.endswith("_rank1")
        ]
        if live:
            os.kill(actors_of(TRAINER)[live[0]].pid, signal.SIGKILL)
            return live[0]
        time.sleep(0.2)
    raise TimeoutError("no live training rank 1 to kill")


def test_a_run_heals_itself_after_losing_a_training_rank_twice(multinode_cluster, reference_run, tmp_path):
    config = demo_config(tmp_path, *FAILURE_RUN, "trainer.max_restarts=2", "trainer.resume_mode=disable")
    before = actors_of(TRAINER)
    pending = _start(config)
    first = _kill_rank1(before, 2, tmp_path)
    before[first] = None
    _kill_rank1(before, 4, tmp_path)
    ray.get(pending, timeout=600)

    records = last_record_per_step(tmp_path)
    assert sorted(records) == list(range(1, FAILURE_STEPS + 1))
    assert records[FAILURE_STEPS]["training/restarts"] == 2
    _same_metrics(records, last_record_per_step(reference_run.run_dir), range(1, FAILURE_STEPS + 1))
