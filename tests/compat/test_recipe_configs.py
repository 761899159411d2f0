"""Recipes that bring their own config: one whose ``main`` resolves the config before handing it over
(upstream_recipe/resolved_handover/), one with keys and an actor config class of its own and DAPO's reward blocks in
verl's spelling (upstream_recipe/own_keys/). Each runs with ``python -m`` on verl's command line."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from recipe_runs import read_jsonl, run_recipe

pytestmark = pytest.mark.ray

STEPS = 2


def _seed() -> int:
    return int(os.environ.get("VERL_TEST_SEED", "1"))


def test_a_recipe_that_resolves_before_the_hand_over_trains_with_its_values(tmp_path):
    result = run_recipe("resolved_handover.main_resolved", tmp_path, _seed(), STEPS)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "set twice" not in result.stderr
    metrics = read_jsonl(tmp_path / "metrics.jsonl")
    assert [row["step"] for row in metrics] == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        rows = read_jsonl(tmp_path / "rollouts" / f"{step}.jsonl")
        assert set(Counter(row["uid"] for row in rows).values()) == {8}  # actor_rollout_ref.rollout.n=8 arrived
    assert all(0.0 <= row["critic/score/mean"] <= 1.0 for row in metrics)


def test_a_recipe_s_own_keys_class_and_reward_blocks_reach_its_code(tmp_path):
    # response length 8 with an overlong buffer of 4: responses of 5 tokens or more are penalised
    result = run_recipe("own_keys.main_own_keys", tmp_path, _seed(), STEPS)
    assert result.returncode == 0, result.stderr[-4000:]
    metrics = read_jsonl(tmp_path / "metrics.jsonl")
    assert [row["step"] for row in metrics] == list(range(1, STEPS + 1))
    for row in metrics:
        assert row["recipe/length_bonus"] == row["recipe/length_bonus_typed"] == 0.25
        assert row["recipe/bonus_every"] == 2.0 and row["recipe/bonus_floor"] == 0.5
        assert row["recipe/own_actor_config"] == 1.0
    rows = [row for step in range(1, STEPS + 1) for row in read_jsonl(tmp_path / "rollouts" / f"{step}.jsonl")]
    # reward_model.reward_manager=dapo with the overlong buffer of the recipe's YAML scored these samples
    assert all("overlong_reward" in row and "overlong" in row for row in rows)
    assert any(row["overlong_reward"] < 0 for row in rows)
    assert all(row["overlong_reward"] <= 0 for row in rows)
