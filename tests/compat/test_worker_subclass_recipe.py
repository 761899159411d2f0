"""A recipe that subclasses verl's FSDP worker and actor (upstream_recipe/worker_subclass/), run as
``python -m worker_subclass.main_worker_subclass``: its ``_build_model_optimizer`` adds an auxiliary head to the
policy and gives it to the optimizer, its ``init_model`` swaps in its own ``DataParallelPPOActor`` subclass, whose
``_forward_micro_batch`` computes the head's loss and whose ``_optimizer_step`` back-propagates it before the step."""

from __future__ import annotations

import math
import os

import pytest
from recipe_runs import read_jsonl, run_recipe

pytestmark = pytest.mark.ray

MODULE = "worker_subclass.main_worker_subclass"
STEPS = 3
# Two mini-batches per step: the second is off-policy, so the trainer scores old log-probs (compute_log_prob) and
# the recipe's _forward_micro_batch serves the scoring path as well as the update.
OVERRIDES = ("actor_rollout_ref.actor.ppo_mini_batch_size=8",)
SAMPLES_PER_MINI_BATCH = 8 * 8  # prompts x rollout.n on the one trainer process
MICRO_BATCH = 64  # rollout.log_prob_micro_batch_size_per_gpu and actor.ppo_micro_batch_size_per_gpu (capped)


def test_worker_and_actor_hooks_of_a_recipe_take_effect(tmp_path):
    result = run_recipe(MODULE, tmp_path, int(os.environ.get("VERL_TEST_SEED", "1")), STEPS, *OVERRIDES)
    assert result.returncode == 0, result.stderr[-4000:]
    metrics = read_jsonl(tmp_path / "metrics.jsonl")
    assert [row["step"] for row in metrics] == list(range(1, STEPS + 1))
    for row in metrics:
        # the recipe's actor got verl's per-rank sizes: 16 prompts x 8 responses, mini-batches of 8 prompts
        assert row["aux/mini_batch_size"] == SAMPLES_PER_MINI_BATCH
        assert row["aux/optimizer_steps"] == 2  # update_policy stepped through the recipe's _optimizer_step
        assert row["aux/update_calls"] == 2 * SAMPLES_PER_MINI_BATCH / MICRO_BATCH  # each update micro-batch
        assert row["aux/scoring_calls"] == 16 * 8 / MICRO_BATCH  # compute_log_prob went through the override too
        assert math.isfinite(row["aux/calibration_loss"]) and row["aux/calibration_loss"] > 0
        # the head added in _build_model_optimizer is in the optimizer: it moved from its initial weights
        assert row["aux/weight_shift"] > 0
        assert math.isfinite(row["actor/grad_norm"])
