"""Bypass mode (``algorithm.rollout_correction.bypass_mode=true``) in the synchronous, one-step-off and fully-async
trainers: the rollout's log-probs serve as the old log-probs, no pass recomputes them, and the update corrects for
the engine/trainer mismatch (here a bfloat16 engine against a float32 trainer) with truncated importance weights
(TIS) and rejection of tokens whose ratio is out of bounds (MIS), whose metrics appear."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from verl.utils.tracking import read_metrics

sys.path.insert(0, str(Path(__file__).parent / "fully_async_policy"))
from _async_runs import base_overrides, recipe_config  # noqa: E402

pytestmark = pytest.mark.ray

STEPS = 2
GROUPS = 4
BYPASS = (
    "algorithm.rollout_correction.bypass_mode=true",
    "algorithm.rollout_correction.rollout_is=token",
    "algorithm.rollout_correction.rollout_is_threshold=2.0",
    "algorithm.rollout_correction.rollout_rs=token",
    "algorithm.rollout_correction.rollout_rs_threshold=1.002",
    "rollout.calculate_log_probs=true",
    "rollout.dtype=bfloat16",
    f"data.train_batch_size={GROUPS}",
    f"actor.ppo_mini_batch_size={GROUPS}",
    f"trainer.total_training_steps={STEPS}",
)


def _run(mode: str, run_dir: Path) -> list[dict]:
    if mode == "sync":
        from verl.trainer.config.compose import compose_ppo_config
        from verl.trainer.main_ppo import resolve_config
        from verl.trainer.ppo.task_runner import run_ppo

        config, _ = resolve_config(compose_ppo_config(base_overrides(run_dir, *BYPASS)))
        run_ppo(config)
    else:
        from verl.experimental.separation.task_runner import run_async_training

        extra = [f"rollout.total_rollout_steps={STEPS * GROUPS}", "async_training.use_rollout_log_probs=true"]
        if mode == "fully_async":
            extra += ["async_training.staleness_threshold=0", "async_training.partial_rollout=false"]
        run_async_training(recipe_config(mode, run_dir, *BYPASS, *extra), mode)
    return read_metrics(run_dir)


# the fully-async run stays in the default tier; the other two trainers share its stage code (CI budget)
@pytest.mark.parametrize(
    "mode",
    [pytest.param("sync", marks=pytest.mark.slow), pytest.param("one_step_off", marks=pytest.mark.slow), "fully_async"],
)
def test_bypass_trains_on_the_rollout_log_probs_with_correction_metrics(ray_cluster, tmp_path, mode):
    records = [r for r in _run(mode, tmp_path) if "actor/pg_loss" in r]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    for record in records:
        assert record["training/old_log_prob_pass"] == 0.0, record["step"]  # no recompute
        # the ratio is taken against the bfloat16 engine's log-probs: it is not 1, as the update's own would be
        assert abs(record["actor/ppo_kl"]) > 1e-6, record["step"]
        assert record["rollout_corr/mismatch_kl_k3"] > 0, record["step"]
        for key in (
            "rollout_corr/is_weight_mean",
            "rollout_corr/is_truncated_frac",
            "rollout_corr/rs_rejected_token_frac",
        ):
            assert key in record, (record["step"], key)
        assert 0 < record["rollout_corr/rs_rejected_token_frac"] < 1, record["step"]
