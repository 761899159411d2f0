"""Old log-probs are taken under the weights that generated each sample, not the actor's current ones.

With a weight sync every 3 updates, the samples of updates 2 and 3 of a period come from the weights pushed at the
period's start while the actor has moved on: the PPO ratio must be taken against the former. The same run checks that
a recipe's overrides of verl's hooks run where verl runs them, and verl's counters and period metrics.
"""

from __future__ import annotations

import pytest
import torch
from _async_runs import recipe_config

from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer
from verl.experimental.separation.task_runner import build_trainer
from verl.utils.tracking import read_metrics

pytestmark = pytest.mark.ray

TRIGGER = 3
STEPS = 2 * TRIGGER
GROUPS = 8


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return float(((a - b).abs() * mask).max())


def _close(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> bool:
    """Equal to 1e-6 in allclose's sense (atol = rtol = 1e-6: float32 rounding of log-probs of a few nats)."""
    return bool((((a - b).abs() - 1e-6 - 1e-6 * b.abs()) * mask <= 0).all())


class _Recipe(FullyAsyncTrainer):
    """Overrides verl's hooks only to watch them."""

    def _init_models(self) -> None:
        self.seen = {"init_models": 1, "steps": []}
        super()._init_models()

    def _fit_postprocess_step(self) -> None:
        super()._fit_postprocess_step()
        period = self.metrics.get("period/fully_async/period/updates")
        self.seen["steps"].append((self.global_steps, self.local_trigger_step, self.current_param_version, period))


@pytest.fixture(scope="module")
def recorded_run(ray_cluster, tmp_path_factory):
    """A trigger-3 run whose log-prob stage is observed: each step's rows, their versions, the old log-probs the
    trainer used, the rollout engine's log-probs, and the current actor's log-probs of the same rows."""
    run_dir = tmp_path_factory.mktemp("trigger3")
    config = recipe_config(
        "fully_async",
        run_dir,
        "async_training.staleness_threshold=0",
        f"async_training.trigger_parameter_sync_step={TRIGGER}",
        "async_training.partial_rollout=false",
        "async_training.use_rollout_log_probs=true",
        "rollout.calculate_log_probs=true",
        f"data.train_batch_size={GROUPS}",
        f"actor.ppo_mini_batch_size={GROUPS}",
        f"rollout.total_rollout_steps={STEPS * GROUPS}",
        "actor.optim.lr=1e-2",
    )
    trainer = build_trainer(config, "fully_async", trainer_cls=_Recipe)
    observed: list[dict] = []
    stage = trainer._fit_compute_log_prob

    def observe(batch):
        out = stage(batch)
        current = trainer.actor_rollout_wg.compute_log_prob(out).batch["old_log_probs"]
        # on-policy updates take the old log-probs from their own forward pass (the current actor's)
        old = out.batch["old_log_probs"] if "old_log_probs" in out.batch.keys() else current
        observed.append(
            {
                "step": trainer.global_steps,
                "weight_version": trainer.weight_version,
                "versions": sorted({int(v) for v in out.non_tensor_batch["param_version_end"]}),
                "mask": out.batch["response_mask"].float(),
                "old": old.clone(),
                "rollout": out.batch["rollout_log_probs"].clone(),
                "current": current,
            }
        )
        return out

    trainer._fit_compute_log_prob = observe
    try:
        trainer.init_workers()
        # verl's publish call, before training: the trainer's next version, whatever step it is labelled with
        trainer.seen["publish"] = trainer.checkpoint_manager.update_weights(global_steps=99)["rollout/weight_version"]
        trainer.fit()
    finally:
        trainer.resource_pool_manager.release_all()
    return observed, read_metrics(run_dir), trainer


def test_old_log_probs_are_those_of_the_generating_version(recorded_run):
    observed, _, _ = recorded_run
    assert [o["step"] for o in observed] == list(range(1, STEPS + 1))
    for o in observed:
        local_step = (o["step"] - 1) % TRIGGER + 1
        # every sample of a period was generated with the version pushed at its start
        assert o["versions"] == [o["weight_version"]], o["step"]
        # the engine's log-probs are those of the generating weights: the trainer's old log-probs must match them
        assert _close(o["old"], o["rollout"], o["mask"]), (o["step"], _max_abs_diff(o["old"], o["rollout"], o["mask"]))
        moved = _max_abs_diff(o["current"], o["rollout"], o["mask"])
        if local_step == 1:
            assert _close(o["current"], o["rollout"], o["mask"]), o["step"]  # no update since the push
        else:
            assert moved > 1e-3, o["step"]  # the actor moved on; the old log-probs did not follow it


def test_importance_ratio_is_one_at_the_first_local_step(recorded_run):
    _, metrics, _ = recorded_run
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    for m in metrics:
        local_step = (m["step"] - 1) % TRIGGER + 1
        if local_step == 1:
            assert abs(m["actor/ppo_kl"]) < 1e-6, m["step"]
        else:
            assert abs(m["actor/ppo_kl"]) > 1e-6, m["step"]  # the ratio is taken against the period's start


def test_recipe_hooks_run_and_verl_counters_follow_the_sync_periods(recorded_run):
    _, metrics, trainer = recorded_run
    assert trainer.seen["init_models"] == 1 and trainer.seen["publish"] == 1
    # after each update: its position in the next period, and the version the rollout holds (one push per period)
    expected = [
        (s, s % TRIGGER + 1, 1 + s // TRIGGER, float(TRIGGER) if s % TRIGGER == 0 else None) for s in range(1, 7)
    ]
    assert trainer.seen["steps"] == expected
    for m in metrics:
        assert m["dynamic_resource/train_compute_time_s"] <= m["dynamic_resource/train_allocated_time_s"]
        assert m["training/epoch"] == 0 and "fully_async/mq_size" in m
    assert trainer.processed_samples == STEPS * GROUPS == trainer.dynamic_schedule_ctx.expected_samples
    assert trainer.dynamic_schedule_ctx.total_generated_samples >= STEPS * GROUPS
    assert trainer.last_ckpt_version == 0  # no checkpoint was saved
