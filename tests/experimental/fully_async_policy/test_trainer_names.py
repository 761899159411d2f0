"""FullyAsyncTrainer under verl's names, without workers: the sync-period counters, when a step syncs, the metrics of
a pulled batch, the period aggregate, the queue handover, resume-once, trainer-side validation; and the task runners
at verl's module paths."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl.experimental.fully_async_policy.detach_utils import MetricsAggregator
from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer
from verl.experimental.fully_async_policy.message_queue import END_OF_STREAM
from verl.experimental.fully_async_policy.sample import RolloutSample
from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.utils import Role


def _trainer(trigger: int = 3, groups: int = 2) -> FullyAsyncTrainer:
    trainer = object.__new__(FullyAsyncTrainer)
    trainer.trigger_parameter_sync_step, trainer.groups_per_update = trigger, groups
    trainer.local_updates, trainer.weight_version, trainer._weights_unpushed = 0, 0, False
    trainer.consumed_groups, trainer.consumed_indices, trainer.leftover_groups = 0, [], 0
    trainer._stale_this_period = trainer.stale_trajectory_processed = 0
    trainer._step_wait_times, trainer._step_wait_samples = [], []
    trainer.metrics, trainer.timing_raw, trainer._rollouter_ref, trainer.rollouter = {}, {}, None, None
    trainer.role_worker_mapping = {Role.Actor: object}
    return trainer


def test_verl_counters_follow_this_trainers_own():
    trainer = _trainer(trigger=3, groups=4)
    trainer._actor_warmed_up = lambda: True
    positions = []
    for _ in range(4):
        positions.append(trainer.local_trigger_step)
        trainer._fit_update_local_step()
    assert positions == [1, 2, 3, 1] and trainer._weights_unpushed
    trainer.current_param_version = 5
    assert trainer.weight_version == 5 and trainer.current_param_version == 5
    trainer.consumed_groups = 12
    assert trainer.required_samples == 4 and trainer.processed_samples == 12
    assert trainer.train_role is Role.Actor
    trainer.actor_wg = "group"
    assert trainer.get_actor_wg() == "group"
    trainer.set_total_train_steps(7)  # no workers yet: the optimizers will follow it too
    assert trainer.total_train_steps == trainer.total_training_steps == 7


def test_weights_sync_at_each_period_end_and_after_the_last_update():
    trainer = _trainer(trigger=3)
    trainer._actor_warmed_up = lambda: True
    trainer.total_training_steps = 5

    def sync(metrics: dict) -> dict:
        trainer._weights_unpushed = False
        return {"rollouter/pause_s": 0.0}

    trainer._sync_rollouter = sync
    synced = []
    for step in range(1, 6):
        trainer.global_steps = step
        trainer._fit_update_local_step()
        if trainer._fit_update_weights() is not None:
            synced.append(step)
    assert synced == [3, 5]  # step 5 ends mid-period: the last update is still published


def test_collected_metrics_count_stale_groups_and_keep_the_batch_meta():
    trainer = _trainer()
    trainer.weight_version, trainer.consumed_groups = 2, 3
    batch = DataProto.from_dict(
        {"x": torch.zeros(3, 1)},
        non_tensors={"num_aborts": np.array([0, 2, 0], dtype=object)},
        meta_info={"trajectory_param_versions": [2, 1, 0], "fully_async/partial/aborts": 2.0, "other": 1},
    )
    metrics: dict = {}
    trainer._collect_metrics_from_samples(batch, metrics)
    assert metrics["fully_async/stale_groups"] == 2.0 and metrics["fully_async/staleness/max"] == 2.0
    assert [metrics[f"fully_async/staleness/{k}"] for k in range(3)] == [1.0, 1.0, 1.0]
    assert metrics["fully_async/partial/aborted_samples"] == 1.0 and metrics["fully_async/partial/aborts"] == 2.0
    assert "other" not in metrics
    trainer._collect_metrics_from_samples(batch, {})
    assert trainer.stale_trajectory_processed == 4


def test_samples_from_the_queue_make_a_batch_or_none_at_the_end():
    trainer = _trainer(groups=2)
    trainer.use_rollout_log_probs = True
    trainer.ppo_config = SimpleNamespace(data=SimpleNamespace(train_batch_size=2))
    trainer.train_dataloader = [0, 1]  # 4 prompts per epoch
    trainer.queue = SimpleNamespace(size=SimpleNamespace(remote=lambda: 1))
    trainer._get = lambda value, what, timeout_s=None: value

    def sample(index: int, start_version: int) -> RolloutSample:
        rows = DataProto.from_dict({"x": torch.full((1, 1), index)}, non_tensors={"num_aborts": np.array([0])})
        return RolloutSample(rows, index, f"u{index}", start_version, start_version, num_aborts=0)

    trainer._pull_groups = lambda count: [sample(5, 1), sample(4, 0)]
    epoch, batch = trainer._get_samples_from_queue()
    assert epoch == 1 and batch.batch["x"].flatten().tolist() == [4, 5]
    assert batch.meta_info["trajectory_param_versions"] == [0, 1]
    assert trainer.consumed_indices == [4, 5] and trainer._step_wait_samples == [1]  # one group was queued
    trainer._pull_groups = lambda count: [sample(6, 1), END_OF_STREAM]
    assert trainer._get_samples_from_queue() == (None, None) and trainer.leftover_groups == 1


def test_period_aggregate_joins_the_step_that_ends_a_multi_update_period():
    trainer = _trainer()
    trainer.metrics_aggregator = MetricsAggregator(total_gpus=2)
    trainer.metrics_aggregator.add_step_metrics({"actor/pg_loss": 1.0}, sample_count=2)
    trainer._fit_log_aggregated_training_metrics({"rollouter/pause_s": 0.5})
    assert trainer.metrics == {}  # one update: the step's own metrics are the period's
    for loss in (1.0, 3.0):
        trainer.metrics_aggregator.add_step_metrics({"actor/pg_loss": loss}, sample_count=2)
    trainer._fit_log_aggregated_training_metrics({"rollouter/pause_s": 0.5})
    assert trainer.metrics["period/actor/pg_loss"] == 2.0 and trainer.metrics["period/rollouter/pause_s"] == 0.5
    assert trainer.metrics["period/fully_async/period/updates"] == 2.0
    assert trainer.metrics_aggregator.step_count == 0
    trainer.timing_raw = {"update_actor": 2.0, "old_log_prob": 1.0, "gen": 5.0}
    trainer._record_train_resource_utilization(10.0)
    assert trainer.metrics["dynamic_resource/train_compute_time_s"] == 3.0
    assert trainer.metrics["dynamic_resource/train_allocated_time_s"] == 10.0


def test_queue_handover_and_resume_happen_before_fit_only(monkeypatch):
    trainer = _trainer()
    client = SimpleNamespace(queue_actor="queue")
    trainer.set_message_queue_client(client)
    assert trainer.message_queue_client is client and trainer.queue == "queue"
    loads = []
    monkeypatch.setattr(RayPPOTrainer, "_load_checkpoint", lambda self: loads.append(1))
    trainer._resumed, trainer.weight_version = False, 3
    assert trainer.load_checkpoint() == 3
    trainer._load_checkpoint()  # fit's own load: already done
    assert loads == [1]
    trainer._rollouter_ref = object()
    with pytest.raises(RuntimeError, match="before fit"):
        trainer.set_message_queue_client(client)
    with pytest.raises(RuntimeError, match="before fit"):
        trainer.set_rollouter(object())


def test_trainer_side_validation_is_the_hook_validate_calls(monkeypatch):
    monkeypatch.setattr(RayPPOTrainer, "_validate", lambda self, merged=False: {"val/score": 1.0})

    class Recipe(FullyAsyncTrainer):
        def _trainer_side_validate(self) -> dict:
            return {**super()._trainer_side_validate(), "recipe": 1.0}

    trainer = object.__new__(Recipe)
    trainer.use_trainer_do_validate = True
    assert trainer._validate() == {"val/score": 1.0, "recipe": 1.0}


def test_task_runners_sit_at_verl_paths_and_run_in_verl_steps(monkeypatch, tmp_path):
    from verl.experimental.fully_async_policy.fully_async_main import FullyAsyncTaskRunner
    from verl.experimental.one_step_off_policy.main_ppo import OneStepTaskRunner
    from verl.experimental.separation.task_runner import TASK_RUNNERS, AsyncTaskRunner, _load

    assert _load(TASK_RUNNERS["fully_async"]) is FullyAsyncTaskRunner
    assert _load(TASK_RUNNERS["one_step_off"]) is OneStepTaskRunner
    assert OneStepTaskRunner().kind == "one_step_off" and issubclass(OneStepTaskRunner, AsyncTaskRunner)

    calls: list[str] = []
    trainer = SimpleNamespace(
        rollouter="rollouter",
        queue="queue",
        message_queue_client="client",
        total_train_steps=4,
        fit=lambda: calls.append("fit"),
    )

    class Runner(FullyAsyncTaskRunner):
        def add_workers(self, config):
            calls.append("add_workers")
            return "group_cls"

        def _create_trainer(self, config):
            calls.append("_create_trainer")
            self.components["trainer"] = trainer

        def result(self, config, trainer):
            return {"trained": calls[-1] == "fit"}

    runner = Runner()
    assert not runner.running and runner.components == {} and not runner.shutdown_event.is_set()
    config = OmegaConf.create({"trainer": {"max_restarts": 0}})
    assert runner.run(config) == {"trained": True, "restarts": 0, "restart_causes": []}
    assert calls == ["add_workers", "_create_trainer", "fit"]
    assert runner.components["rollouter"] == "rollouter" and runner.components["message_queue_client"] == "client"
    assert runner.components["total_train_steps"] == 4 and runner.shutdown_event.is_set() and not runner.running

    # a lost process: the runner rebuilds trainer and rollout once (trainer.max_restarts=1) and trains again
    from verl.single_controller.ray.errors import WorkerDiedError

    died = WorkerDiedError("actor rank 0 died during update_actor()", role="actor", rank=0, method="update_actor")
    fits = iter([died, None])

    def fit() -> None:
        calls.append("fit")
        error = next(fits)
        if error is not None:
            raise error

    calls.clear()
    trainer.fit = fit
    summary = Runner().run(OmegaConf.create({"trainer": {"max_restarts": 1, "default_local_dir": str(tmp_path)}}))
    assert calls == ["add_workers", "_create_trainer", "fit"] * 2
    assert summary["restarts"] == 1 and summary["restart_causes"] == [str(died)]
    with pytest.raises(WorkerDiedError):  # no restart left
        fits = iter([died, died])
        Runner().run(OmegaConf.create({"trainer": {"max_restarts": 1, "default_local_dir": str(tmp_path)}}))
