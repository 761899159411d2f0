"""A killed process of the fully-async machinery (SIGKILL on the pid its actor reports) is named first: the error's
first line says the role, its index, the node, the pid and the call in flight, and nothing printed after the kill
reads as an error before it (no bare ActorDiedError, no traceback, no other process blamed).

The message queue dies in a real run (both sides see it: the trainer waiting on it, the rollouter putting into
it); the rollouter dies under the trainer's queue-reading half (the start-up of a second real run would double the
module's time, and the rollouter is seen only by the trainer). The weight sync has no process of its own here: the
trainer drives it through the checkpoint engine, whose participants are the training ranks and the replicas, named
by their own tests.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest
import ray
from _async_runs import recipe_config
from _fake_replicas import SlowReplica

from verl.experimental.fully_async_policy.fully_async_trainer import (
    FullyAsyncTrainer,
    RolloutDiedError,
    RolloutFailedError,
)
from verl.experimental.fully_async_policy.message_queue import MessageQueue
from verl.experimental.fully_async_policy.rollouter import Rollouter
from verl.experimental.separation.deaths import ROLLOUTER
from verl.experimental.separation.task_runner import run_async_training
from verl.single_controller.ray.errors import WorkerDiedError
from verl.trainer.ppo.task_runner import TASK_RUNNER_ROLE

pytestmark = pytest.mark.ray

# a line printed after the kill that reads as an error of its own (the raylet's line about the killed worker is
# Ray's, and names the pid too)
NOISE = re.compile(r"Traceback|ActorDiedError|RayActorError|no running event loop|replica \S* ?died|ERROR", re.I)


def _actors(class_name: str) -> dict[str, dict]:
    from ray._private import state

    return {a["ActorID"]: a for a in state.actors().values() if a["ActorClassName"] == class_name}


def _new_live_actor(class_name: str, before: dict) -> dict:
    live = [a for key, a in _actors(class_name).items() if key not in before and a["State"] == "ALIVE"]
    assert len(live) == 1, f"{len(live)} new live {class_name} actor(s)"
    return live[0]


def _assert_named_first(error: BaseException, victim: dict, role: str, calls: str) -> None:
    assert isinstance(error, WorkerDiedError), f"{type(error).__name__}: {error}"
    assert isinstance(error, RolloutDiedError) and isinstance(error, RolloutFailedError)
    first_line = str(error).splitlines()[0]
    node_id = victim["Address"]["NodeID"]
    assert re.match(rf"{role} rank 0 died during {calls}\(\) on node {node_id} \(", first_line), first_line
    assert f"pid {victim['Pid']}:" in first_line, first_line
    assert error.role == role and error.rank == 0 and error.node_id == node_id


def _assert_quiet(printed: list[str]) -> None:
    noise = [line for line in printed if NOISE.search(line) and "(raylet)" not in line]
    assert not noise, "lines read as errors before the one naming the cause:\n" + "\n".join(noise[:20])


def _printed_after(capfd, settle_s: float = 1.0) -> list[str]:
    time.sleep(settle_s)  # lines the dying processes printed reach this driver
    out, err = capfd.readouterr()
    return (out + err).splitlines()


def _kill_mid_run(tmp_path, class_name: str, capfd) -> tuple[dict, dict]:
    """Start a fully-async run, SIGKILL the new ``class_name`` actor once a step is logged; (victim, outcome)."""
    from verl.utils.tracking import read_metrics

    config = recipe_config("fully_async", tmp_path, "rollout.total_rollout_steps=1600")
    before = _actors(class_name)
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["summary"] = run_async_training(config, "fully_async")
        except BaseException as err:  # noqa: BLE001 - the test inspects it
            outcome["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 240
    while not (tmp_path / "metrics.jsonl").is_file() or not read_metrics(tmp_path):  # mid-run: a step is logged
        assert thread.is_alive() and time.monotonic() < deadline, f"the run logged no step: {outcome}"
        time.sleep(0.2)
    victim = _new_live_actor(class_name, before)
    capfd.readouterr()  # what the start-up printed
    os.kill(int(victim["Pid"]), signal.SIGKILL)
    thread.join(timeout=120)
    assert not thread.is_alive(), "the run did not end within 120s of the kill"
    return victim, outcome


def test_a_killed_message_queue_ends_the_run_naming_it(ray_cluster, tmp_path, capfd):
    victim, outcome = _kill_mid_run(tmp_path, "MessageQueue", capfd)
    # the trainer waits on the queue (get, size) or sees it through the rollouter (put_many, put, size on resume)
    _assert_named_first(outcome.get("error"), victim, "message queue", r"(get|size|put_many|put)")
    _assert_quiet(_printed_after(capfd))


def test_a_killed_task_runner_is_named_as_the_trainer_and_its_weight_sync(ray_cluster, tmp_path, capfd):
    # the runner holds the trainer's loop and drives every weight sync: the process a parameter sync lives in
    victim, outcome = _kill_mid_run(tmp_path, "FullyAsyncTaskRunner", capfd)
    error = outcome.get("error")
    assert isinstance(error, WorkerDiedError), f"{type(error).__name__}: {error}"
    first_line = str(error).splitlines()[0]
    node_id = victim["Address"]["NodeID"]
    assert re.match(rf"{re.escape(TASK_RUNNER_ROLE)} rank 0 died during run\(\) on node {node_id} \(", first_line), (
        first_line
    )
    assert f"pid {victim['Pid']}:" in first_line, first_line


def test_a_killed_rollouter_stops_the_trainer_naming_it(ray_cluster, tmp_path, capfd):
    config = recipe_config("fully_async", tmp_path, "rollout.total_rollout_steps=1600")
    before = _actors("Rollouter")
    queue = ray.remote(MessageQueue).options(num_cpus=0).remote(64)
    rollouter = ray.remote(Rollouter).options(num_cpus=0, max_concurrency=100).remote(config, queue, [SlowReplica()])
    ray.get(rollouter.ready.remote(), timeout=120)
    trainer = object.__new__(FullyAsyncTrainer)  # the trainer's rollout-facing half, without workers
    trainer.queue, trainer.rollouter, trainer.queue_timeout_s, trainer.sync_wait_timeout_s = queue, rollouter, 60, 60
    trainer._rollouter_ref = rollouter.fit.remote()
    try:
        assert len(trainer._pull_groups(2)) == 2  # generating
        victim = _new_live_actor("Rollouter", before)
        capfd.readouterr()
        os.kill(int(victim["Pid"]), signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(RolloutDiedError) as waiting:
            trainer._pull_groups(10_000)
        assert time.monotonic() - start < 15
        _assert_named_first(waiting.value, victim, "rollouter", "fit")
        assert "waiting for 10000 rollout group(s)" in str(waiting.value)
        with pytest.raises(RolloutDiedError) as syncing:  # the next sync of the trainer
            trainer._call(ROLLOUTER, "pause")
        _assert_named_first(syncing.value, victim, "rollouter", "pause")
        _assert_quiet(_printed_after(capfd))
    finally:
        ray.kill(queue, no_restart=True)
