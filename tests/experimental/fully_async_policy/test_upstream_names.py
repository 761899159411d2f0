"""verl's module paths of the async recipes: the sample assembly, the metric aggregator, the queue client, the
scheduling context and the pool helpers do what their names say, on this package's machinery."""

from __future__ import annotations

import asyncio

import pytest
import ray
import torch
from omegaconf import OmegaConf

from verl.experimental.fully_async_policy.detach_utils import (
    MetricsAggregator,
    RolloutSample,
    assemble_batch_from_rollout_samples,
)
from verl.experimental.fully_async_policy.dynamic_schedule import DynamicScheduleContext
from verl.experimental.fully_async_policy.message_queue import END_OF_STREAM, MessageQueue, MessageQueueClient
from verl.protocol import DataProto
from verl.trainer.ppo.utils import Role


def _sample(index: int) -> RolloutSample:
    batch = DataProto.from_dict({"x": torch.full((2, 1), index)})
    return RolloutSample(batch=batch, index=index, uid=f"u{index}", start_version=0, end_version=0, num_aborts=0)


def test_samples_are_assembled_in_stream_order_whatever_order_they_finished():
    batch = assemble_batch_from_rollout_samples([_sample(2), _sample(0), _sample(1)])
    assert batch.batch["x"].flatten().tolist() == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="no rollout samples"):
        assemble_batch_from_rollout_samples([])


def test_metrics_aggregator_folds_a_sync_period():
    aggregator = MetricsAggregator(total_gpus=2)
    aggregator.add_step_metrics(
        {
            "timing_s/step": 1.0,
            "actor/pg_loss": 1.0,
            "response_length/max": 5,
            "fully_async/param_version": 3,
            "note": "text",
        },
        sample_count=1,
        timestamp=10.0,
    )
    aggregator.add_step_metrics(
        {"timing_s/step": 2.0, "actor/pg_loss": 4.0, "response_length/max": 9, "fully_async/param_version": 4},
        sample_count=3,
        timestamp=12.5,
    )
    out = aggregator.get_aggregated_metrics()
    assert out["timing_s/step"] == 3.0  # seconds add up
    assert out["actor/pg_loss"] == pytest.approx((1.0 * 1 + 4.0 * 3) / 4)  # sample-weighted mean
    assert out["response_length/max"] == 9
    assert out["fully_async/param_version"] == 4  # a counter keeps its last value
    assert out["fully_async/period/updates"] == 2 and out["fully_async/period/wall_s"] == 2.5
    assert "note" not in out
    aggregator.reset()
    assert aggregator.get_aggregated_metrics() == {}


def test_schedule_context_derives_the_period_and_checks_the_budget():
    context = DynamicScheduleContext(
        required_samples=8,
        trigger_parameter_sync_step=3,
        total_generated_samples=30,
        expected_samples=24,
        buffer_samples=4,
        step_wait_times=[1.0, 3.0],
        step_wait_samples=[2, 2],
    )
    assert context.step_required_samples == 24
    assert context.ahead_samples == 6 and not context.within_budget
    assert context.mean_wait_per_sample_s == 1.0
    with pytest.raises(ValueError, match="trigger_parameter_sync_step"):
        DynamicScheduleContext(
            required_samples=8,
            trigger_parameter_sync_step=0,
            total_generated_samples=0,
            expected_samples=0,
            buffer_samples=0,
        )


def test_pool_helpers_give_training_roles_and_the_rollout_pools_of_their_own():
    from verl.experimental.one_step_off_policy.main_ppo import create_resource_pool_manager, create_role_worker_mapping

    config = OmegaConf.create(
        {
            "trainer": {"nnodes": 1, "n_gpus_per_node": 2, "device": "cpu"},
            "rollout": {"nnodes": 1, "n_gpus_per_node": 1},
            "actor": {"strategy": "fsdp", "use_kl_loss": False},
            "critic": {"enable": None},
            "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
        }
    )
    manager = create_resource_pool_manager(config, [Role.Actor, Role.Rollout])
    assert manager.resource_pool_spec == {"global_pool": [2], "rollout_pool": [1]}
    assert manager.mapping == {Role.Actor: "global_pool", Role.Rollout: "rollout_pool"}
    with pytest.raises(ValueError, match="no pool for role"):
        create_resource_pool_manager(config, [Role.Env])
    mapping, group_cls = create_role_worker_mapping(config)
    assert set(mapping) == {Role.Actor} and group_cls.__name__ == "RayWorkerGroup"


def test_upstream_module_names_are_this_package_classes():
    from verl.experimental.fully_async_policy.fully_async_rollouter import FullyAsyncRollouter
    from verl.experimental.fully_async_policy.fully_async_trainer import TrainingStopException
    from verl.experimental.fully_async_policy.rollouter import Rollouter
    from verl.trainer.ppo.ray_trainer import StopTraining

    assert FullyAsyncRollouter is Rollouter and TrainingStopException is StopTraining


@pytest.mark.ray
def test_queue_client_round_trips_samples_by_reference(ray_cluster):
    queue = ray.remote(MessageQueue).options(num_cpus=0).remote(4)
    client = MessageQueueClient(queue, timeout_s=10)

    async def produce_and_consume():
        await client.put_sample(_sample(5))
        assert await client.get_queue_size() == 1
        return await client.get_sample()

    got = asyncio.run(produce_and_consume())
    assert got.index == 5 and got.batch.batch["x"].flatten().tolist() == [5, 5]
    ray.get(queue.put.remote(END_OF_STREAM, 5.0))
    assert client.get_sample_sync() is None
    assert client.get_sample_sync() is None  # the end of the stream stays for every later reader
    assert client.get_statistics_sync()["queue/total_get"] == 1
