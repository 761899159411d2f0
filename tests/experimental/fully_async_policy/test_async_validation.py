"""Validation in fully-async runs, on the rollout side and on the trainer side, with a bound on in-flight requests.

Each run validates before training and every 2 steps; the ``val-core/*`` metrics must appear at exactly those steps,
training must go on as if validation had not happened (every step, every group consumed once, weights synced every
step), and no more than ``rollout.val_kwargs.max_in_flight`` validation trajectories may run at once.
"""

from __future__ import annotations

import pytest
from _async_runs import ON_POLICY, recipe_config

from verl.experimental.separation.task_runner import run_async_training
from verl.utils.tracking import read_metrics

pytestmark = pytest.mark.ray

STEPS = 4
GROUPS = 8
VAL_PROMPTS = 32  # the first rows of the demo's 64 validation prompts
MAX_IN_FLIGHT = 8


# The trainer side validates in the trainer's process between updates; its run is the longer one and the rollouter side
# checks the same bookkeeping, so it runs in the slow tier.
@pytest.mark.parametrize("side", ["rollouter", pytest.param("trainer", marks=pytest.mark.slow)])
def test_validation_steps_metrics_and_in_flight_bound(ray_cluster, tmp_path, side):
    config = recipe_config(
        "fully_async",
        tmp_path,
        *ON_POLICY,
        f"async_training.use_trainer_do_validate={'true' if side == 'trainer' else 'false'}",
        f"data.train_batch_size={GROUPS}",
        f"actor.ppo_mini_batch_size={GROUPS}",
        f"rollout.total_rollout_steps={STEPS * GROUPS}",
        "trainer.val_before_train=true",
        "trainer.test_freq=2",
        f"rollout.val_kwargs.max_in_flight={MAX_IN_FLIGHT}",
        f"data.val_max_samples={VAL_PROMPTS}",
    )
    summary = run_async_training(config, "fully_async")
    records = read_metrics(tmp_path)
    validated = [r for r in records if any(k.startswith("val-core/") for k in r)]
    assert [r["step"] for r in validated] == [0, 2, 4]
    for record in validated:
        assert 0 < record["val-aux/peak_in_flight"] <= MAX_IN_FLIGHT, record["step"]
    trained = [r for r in records if "actor/pg_loss" in r]
    assert [r["step"] for r in trained] == list(range(1, STEPS + 1))
    assert [r["fully_async/consumed_groups"] for r in trained] == [GROUPS * (s + 1) for s in range(STEPS)]
    assert [r["fully_async/param_version"] for r in trained] == list(range(STEPS))
    assert summary["consumed_indices"] == list(range(STEPS * GROUPS))
    assert summary["weight_version"] == STEPS
    assert set(summary["replica_versions"]) == {STEPS}
