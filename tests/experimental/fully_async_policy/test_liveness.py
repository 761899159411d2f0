"""Liveness of the fully-async pair: a stalled or dead side stops the other within bounded time, naming the cause;
empty prompt groups are dropped and counted, never enqueued."""

from __future__ import annotations

import time

import pytest
import ray
from _async_runs import recipe_config
from _fake_replicas import FailingReplica, SlowReplica

from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer, RolloutFailedError
from verl.experimental.fully_async_policy.message_queue import END_OF_STREAM, MessageQueue
from verl.experimental.fully_async_policy.rollouter import Rollouter

pytestmark = pytest.mark.ray


def _start(config, replicas, **kwargs):
    queue = ray.remote(MessageQueue).options(num_cpus=0).remote(64)
    rollouter = ray.remote(Rollouter).options(num_cpus=0, max_concurrency=100).remote(config, queue, replicas, **kwargs)
    ray.get(rollouter.ready.remote(), timeout=120)
    return queue, rollouter


def _consumer(queue, fit_ref, timeout_s=30.0):
    """The trainer's queue-reading half, without workers."""
    trainer = object.__new__(FullyAsyncTrainer)
    trainer.queue, trainer._rollouter_ref, trainer.queue_timeout_s = queue, fit_ref, timeout_s
    return trainer


def test_empty_groups_are_dropped_and_counted(ray_cluster, tmp_path):
    config = recipe_config("fully_async", tmp_path, "rollout.total_rollout_steps=3")
    queue, rollouter = _start(config, [FailingReplica()])
    stats = ray.get(rollouter.fit.remote(), timeout=120)
    assert stats["groups_started"] == 3 and stats["groups_dropped_empty"] == 3 and stats["groups_enqueued"] == 0
    assert stats["samples_failed"] == 3 * int(config.rollout.n)
    queue_stats = ray.get(queue.get_statistics.remote())
    assert queue_stats["queue/total_put"] == 0
    assert ray.get(queue.get.remote(1, 1.0)) == [END_OF_STREAM]


def test_a_trainer_that_stops_syncing_stops_the_rollouter_with_the_cause(ray_cluster, tmp_path):
    """No weight sync arrives (the trainer is gone): the rollouter gives up after sync_wait_timeout_s, and whoever
    reads the queue learns why."""
    config = recipe_config("fully_async", tmp_path, "rollout.total_rollout_steps=64")
    queue, rollouter = _start(config, [SlowReplica()], sync_wait_timeout_s=2.0)
    fit_ref = rollouter.fit.remote()
    start = time.monotonic()
    with pytest.raises(ray.exceptions.RayTaskError, match="is the trainer alive"):
        ray.get(fit_ref, timeout=60)
    assert time.monotonic() - start < 30
    consumer = _consumer(queue, fit_ref)
    with pytest.raises(RolloutFailedError, match="is the trainer alive"):
        consumer._pull_groups(64)  # fewer groups than the budget let through: it must fail, not hang


def test_a_dead_rollouter_stops_the_trainer_within_bounded_time(ray_cluster, tmp_path):
    config = recipe_config("fully_async", tmp_path, "rollout.total_rollout_steps=64")
    queue, rollouter = _start(config, [SlowReplica(delay_s=0.5)])
    fit_ref = rollouter.fit.remote()
    consumer = _consumer(queue, fit_ref)
    ray.kill(rollouter, no_restart=True)
    start = time.monotonic()
    with pytest.raises(RolloutFailedError, match="rollouter failed: .*(Actor|actor)"):
        consumer._pull_groups(64)
    assert time.monotonic() - start < 15
