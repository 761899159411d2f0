"""A recipe's own policy loss and advantage estimator, registered with verl's public decorators and picked with
verl's command line (``algorithm.adv_estimator=loo_grpo``, ``actor_rollout_ref.actor.policy_loss.loss_mode=log_clip``),
run as ``python -m custom_algo_recipe.main_custom`` (upstream_recipe/custom_algo_recipe/)."""

from __future__ import annotations

import importlib
import math
import os
import sys
from pathlib import Path

import pytest
import torch
from recipe_runs import RECIPE_ROOT, read_jsonl, run_recipe

from verl.trainer.config.algo_config import AlgoConfig
from verl.trainer.ppo import core_algos
from verl.workers.config.actor import ActorConfig

STEPS = 60  # the learning run (slow tier)
WIRING_STEPS = 3  # the default tier's run: the recipe's estimator and loss run, no learning claim
# Reward rise over the run, measured with seeds 1, 2, 3 at 60 steps: first-10 mean 0.0100 / 0.0116 / 0.0113,
# last-10 mean 0.1256 / 0.1457 / 0.1171 (12.6x / 12.5x / 10.3x). Asserted: last-10 at least 5x first-10.
MIN_RISE = 5.0


OVERRIDES = (
    "algorithm.adv_estimator=loo_grpo",
    "actor_rollout_ref.actor.policy_loss.loss_mode=log_clip",
    # Two mini-batches per step: the second is updated off-policy, so the loss's clip has something to do.
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    f"custom_reward_function.path={RECIPE_ROOT / 'digit_recipe' / 'reward.py'}",
    "custom_reward_function.name=compute_score",
)


def _run_recipe(run_dir: Path, seed: int, steps: int) -> list[dict]:
    """Runs the recipe and returns its per-step metrics; the recipe's config alone gets its module into the
    workers (VERL_USE_EXTERNAL_MODULES is dropped from the environment)."""
    result = run_recipe(
        "custom_algo_recipe.main_custom", run_dir, seed, steps, *OVERRIDES, drop_env=("VERL_USE_EXTERNAL_MODULES",)
    )
    assert result.returncode == 0, result.stderr[-4000:]
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [row["step"] for row in metrics] == list(range(1, steps + 1))
    return metrics


def _check_recipe_algorithm_ran(metrics: list[dict]) -> None:
    """Every step's update went through the recipe's loss (metrics only it reports) and its advantages came from
    the recipe's estimator (returns are rewards to go, in [0, 1] for this reward, while advantages are centred)."""
    for row in metrics:
        assert 0.0 <= row["recipe/log_clip/clipfrac"] <= 1.0
        assert row["recipe/log_clip/max_abs_log_ratio"] >= 0.0
        assert 0.0 <= row["critic/returns/min"] <= row["critic/returns/max"] <= 1.0
    assert any(row["recipe/log_clip/max_abs_log_ratio"] > 0.0 for row in metrics)  # off-policy mini-batches
    assert any(row["critic/advantages/min"] < 0.0 for row in metrics)


@pytest.fixture
def recipe_algos(monkeypatch):
    """The recipe's module imported here, registering into copies of verl's registries (restored afterwards)."""
    monkeypatch.setattr(core_algos, "ADV_ESTIMATOR_REGISTRY", dict(core_algos.ADV_ESTIMATOR_REGISTRY))
    monkeypatch.setattr(core_algos, "POLICY_LOSS_REGISTRY", dict(core_algos.POLICY_LOSS_REGISTRY))
    monkeypatch.syspath_prepend(str(RECIPE_ROOT))
    names = ("custom_algo_recipe", "custom_algo_recipe.algos")
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield importlib.import_module("custom_algo_recipe.algos")
    for name in names:
        sys.modules.pop(name, None)


def test_recipe_estimator_and_loss_are_found_by_name(recipe_algos):
    """What the command line names resolves to the recipe's functions, and they compute the recipe's algorithm."""
    estimator = core_algos.get_adv_estimator_fn("loo_grpo")
    rewards = torch.zeros(5, 3)
    rewards[0, 1] = 1.0  # group "a": scores 1, 0, 0, 0 (the first response ends after two tokens)
    mask = torch.tensor([[1, 1, 0]] + [[1, 1, 1]] * 4, dtype=torch.float32)
    index = ["a", "a", "a", "a", "b"]  # "b" has a single response: no baseline, advantage 0
    adv, returns = estimator(rewards, mask, index=index, config=AlgoConfig(norm_adv_by_std_in_grpo=True))
    # leave-one-out baselines 0 and 1/3, divided by the group std 0.5
    assert adv[:, 0].tolist() == pytest.approx([2.0, -2 / 3, -2 / 3, -2 / 3, 0.0], abs=1e-5)
    assert torch.equal(adv, adv[:, :1] * mask)
    assert returns[0].tolist() == [1.0, 1.0, 0.0] and returns[1:].abs().sum() == 0  # rewards to go
    adv, _ = estimator(rewards, mask, index=index, config=AlgoConfig(norm_adv_by_std_in_grpo=False))
    assert adv[:, 0].tolist() == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3, 0.0])

    loss_fn = core_algos.get_policy_loss_fn("log_clip")
    old = torch.zeros(2, 2)
    new = torch.tensor([[0.5, 0.1], [-0.5, 0.0]])  # log-ratios; clip_ratio 0.2 bounds them to [-0.2, 0.2]
    advantages = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    config = ActorConfig(clip_ratio=0.2, global_batch_info={})
    loss, metrics = loss_fn(old, new, advantages, torch.ones(2, 2), "token-mean", config)
    expected = (-math.exp(0.2) - math.exp(0.1) + math.exp(-0.2) + 1.0) / 4
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert metrics["recipe/log_clip/clipfrac"] == 0.5
    assert metrics["recipe/log_clip/max_abs_log_ratio"] == pytest.approx(0.5)


@pytest.mark.ray
@pytest.mark.slow  # a recipe run of its own costs over a minute; the default tier resolves both names above
def test_recipe_trains_with_its_own_loss_and_estimator(tmp_path):
    seed = int(os.environ.get("VERL_TEST_SEED", "1"))
    _check_recipe_algorithm_ran(_run_recipe(tmp_path, seed, WIRING_STEPS))


@pytest.mark.ray
@pytest.mark.slow  # a 60-step learning run per seed
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_recipe_reward_rises_with_its_own_loss_and_estimator(tmp_path, seed):
    metrics = _run_recipe(tmp_path, seed, STEPS)
    _check_recipe_algorithm_ran(metrics)
    scores = [row["critic/score/mean"] for row in metrics]
    first, last = sum(scores[:10]) / 10, sum(scores[-10:]) / 10
    assert last >= MIN_RISE * first, f"reward did not rise: first-10 mean {first:.4f}, last-10 mean {last:.4f}"
