"""Estimators added for verl compatibility: optimal token baselines, gpg, gdpo, the *_vectorized names,
registry lookups through core_algos, PF-PPO resampling and the multi-trajectory GRPO helper."""

from __future__ import annotations

from enum import Enum

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import (
    AdvantageEstimator,
    compute_advantage,
    compute_gdpo_outcome_advantage,
    compute_gpg_outcome_advantage,
    compute_grpo_outcome_advantage,
    compute_multi_turn_optimal_token_baseline_advantage,
    compute_optimal_token_baseline_advantage,
    compute_pf_ppo_reweight_data,
    get_adv_estimator_fn,
    register_adv_est,
)
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories


def _otb_inputs():
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float64)
    old_log_probs = torch.log(torch.full_like(rewards, 0.5))
    sum_pi_squared = torch.full_like(rewards, 0.5)  # per-step energy 1 - 2 * 0.5 + 0.5 = 0.5
    return rewards, mask, old_log_probs, sum_pi_squared


def test_optimal_token_baseline_by_hand():
    rewards, mask, old, spsq = _otb_inputs()
    index = np.array(["p", "p", "p"], dtype=object)
    adv, returns = compute_optimal_token_baseline_advantage(rewards, mask, index, old, spsq, handle_zero_tail=False)
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1, 1, 0], [2, 2, 0, 0], [3, 3, 3, 3]], dtype=torch.float64))
    # energies W_t = 0.5 * (t + 1) over each row's tokens; B_t = sum G W / sum W over the rows present at t
    g = returns
    w = 0.5 * (torch.arange(4, dtype=torch.float64) + 1)
    for t in range(4):
        present = mask[:, t].bool()
        baseline = (g[present, t] * w[t]).sum() / (w[t] * present.sum() + 1e-8)
        torch.testing.assert_close(adv[present, t], g[present, t] - baseline)
    assert torch.all(adv[~mask.bool()] == 0)
    # zero tail: past the second-longest response (3 tokens) the longest one's baseline is 0
    adv_tail, _ = compute_optimal_token_baseline_advantage(rewards, mask, index, old, spsq, handle_zero_tail=True)
    assert adv_tail[2, 3] == returns[2, 3] and torch.equal(adv_tail[:, :3], adv[:, :3])


def test_tir_baseline_skips_tool_tokens_and_singletons_get_zero():
    rewards, mask, old, spsq = _otb_inputs()
    index = np.array(["p", "p", "p"], dtype=object)
    same, _ = compute_multi_turn_optimal_token_baseline_advantage(rewards, mask, index, old, spsq)
    plain, _ = compute_optimal_token_baseline_advantage(rewards, mask, index, old, spsq)
    torch.testing.assert_close(same, plain)  # left-aligned masks without holes: the alignments agree
    holes = mask.clone()
    holes[2, 1] = 0  # a tool token inside row 2: its third generated token now lines up with the others' third
    tir, _ = compute_multi_turn_optimal_token_baseline_advantage(rewards, holes, index, old, spsq, None, False)
    returns = (rewards * holes).flip(-1).cumsum(-1).flip(-1)
    energy = ((1 - 2 * torch.exp(old) + spsq) * holes).cumsum(-1)
    # slot 1 of row 2 is position 2: baseline over (row0, pos1), (row1, pos1), (row2, pos2)
    cells = [(0, 1), (1, 1), (2, 2)]
    num = sum(returns[i, t] * energy[i, t] for i, t in cells)
    den = sum(energy[i, t] for i, t in cells)
    assert tir[2, 2].item() == pytest.approx((returns[2, 2] - num / (den + 1e-8)).item())
    assert tir[2, 1] == 0
    alone, _ = compute_optimal_token_baseline_advantage(
        rewards, mask, np.array(["a", "b", "b"], dtype=object), old, spsq
    )
    assert torch.all(alone[0] == 0)


def test_token_baselines_need_the_actor_statistics():
    rewards, mask, _, _ = _otb_inputs()
    with pytest.raises(ValueError, match="calculate_sum_pi_squared"):
        compute_optimal_token_baseline_advantage(rewards, mask, np.array(["p"] * 3, dtype=object))


def test_gpg_scales_centred_scores_by_the_rewarded_fraction():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 2.0]])
    mask = torch.ones_like(rewards)
    adv, _ = compute_gpg_outcome_advantage(rewards, mask, np.array(["a", "a", "b", "b"], dtype=object), f_norm=2.0)
    alpha = 4 / 2  # 2 of 4 responses have a non-zero score
    expected = alpha * torch.tensor([0.5, -0.5, -1.0, 1.0]) / 2.0
    torch.testing.assert_close(adv, expected.unsqueeze(-1).expand_as(rewards))


def test_gdpo_normalises_each_component_separately():
    mask = torch.ones(4, 3)
    index = np.array(["a", "a", "b", "b"], dtype=object)
    big = np.array([100.0, 0.0, 100.0, 0.0], dtype=np.float32)
    small = np.array([0.0, 1.0, 1.0, 0.0], dtype=np.float32)
    config = {"gdpo_reward_keys": ["big", "small"], "gdpo_reward_weights": [1.0, 1.0]}
    adv, ret = compute_gdpo_outcome_advantage(
        torch.zeros(4, 3), mask, index, config=config, non_tensor_batch={"big": big, "small": small}, batch={}
    )
    # per component, GRPO gives +-1/sqrt(2) in every group: the sums are 0, sqrt(2), 0 ... then whitened
    g_big, _ = compute_grpo_outcome_advantage(torch.tensor(big).unsqueeze(-1).expand(4, 3) / 3, mask, index)
    g_small, _ = compute_grpo_outcome_advantage(torch.tensor(small).unsqueeze(-1).expand(4, 3) / 3, mask, index)
    total = g_big + g_small
    expected = (total - total.mean()) / total.std().clamp(min=1e-8)
    torch.testing.assert_close(adv, expected, atol=1e-4, rtol=1e-4)
    assert torch.equal(adv, ret)
    with pytest.raises(ValueError, match="algorithm.gdpo_reward_keys"):
        compute_gdpo_outcome_advantage(torch.zeros(4, 3), mask, index, config={}, non_tensor_batch={}, batch={})
    with pytest.raises(KeyError, match="'missing'"):
        compute_gdpo_outcome_advantage(
            torch.zeros(4, 3),
            mask,
            index,
            config={"gdpo_reward_keys": ["missing"]},
            non_tensor_batch={"big": big},
            batch={},
        )


def test_vectorized_names_and_enum_keys():
    assert get_adv_estimator_fn("grpo_vectorized") is get_adv_estimator_fn("grpo")
    assert get_adv_estimator_fn("rloo_vectorized") is get_adv_estimator_fn(AdvantageEstimator.RLOO)

    class Mine(Enum):
        EST = "test_enum_keyed_estimator"

    @register_adv_est(Mine.EST)
    def est(token_level_rewards, response_mask, **kwargs):
        return token_level_rewards, token_level_rewards

    try:
        assert get_adv_estimator_fn("test_enum_keyed_estimator") is est
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop("test_enum_keyed_estimator")


def test_core_algos_registry_can_be_swapped(monkeypatch):
    swapped = {"gae": lambda **kwargs: None}
    monkeypatch.setattr(core_algos, "ADV_ESTIMATOR_REGISTRY", swapped)
    assert get_adv_estimator_fn("gae") is swapped["gae"]
    register_adv_est("only_in_swapped")(len)
    assert swapped["only_in_swapped"] is len
    with pytest.raises(ValueError, match="Unknown advantage estimator simply: grpo"):
        get_adv_estimator_fn("grpo")
    # compute_advantage still finds the package's own estimators
    data = DataProto.from_dict(
        tensors={"token_level_rewards": torch.tensor([[1.0], [0.0]]), "response_mask": torch.ones(2, 1)},
        non_tensors={"uid": np.array(["u", "u"], dtype=object)},
    )
    out = compute_advantage(data, "grpo")
    assert out.batch["advantages"][0, 0] > 0 > out.batch["advantages"][1, 0]


def test_pf_ppo_resamples_rows_with_their_meta_info():
    scores = torch.tensor([[5.0], [0.1], [0.2], [-3.0]])
    data = DataProto.from_dict(
        tensors={"token_level_scores": scores, "row": torch.arange(4)},
        non_tensors={"uid": np.array(list("abcd"), dtype=object)},
        meta_info={"per_row": [10, 11, 12, 13], "shared": [1, 2]},
    )
    torch.manual_seed(0)
    out = compute_pf_ppo_reweight_data(data, reweight_method="max_min")
    rows = out.batch["row"].tolist()
    assert len(rows) == 4 and set(rows) <= {0, 3}  # only the extremes (others keep a 1e-8 weight)
    assert out.non_tensor_batch["uid"].tolist() == [list("abcd")[i] for i in rows]
    assert out.meta_info["per_row"] == [10 + i for i in rows] and out.meta_info["shared"] == [1, 2]
    with pytest.raises(ValueError, match="reweight_method 'median'"):
        compute_pf_ppo_reweight_data(data, reweight_method="median")


def test_multi_trajectory_grpo_uses_each_sessions_final_output():
    rewards = torch.tensor([[0.0, 9.0], [1.0, 0.0], [5.0, 5.0], [0.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 1], [0, 1], [1, 0]])
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": np.array(["q"] * 4, dtype=object)},
    )
    keys = ["q_s0_0", "q_s0_1", "q_s1_0", "q_s2_0"]  # session s0 has two outputs; its last (row 1) counts
    out = compute_advantage_for_multi_trajectories(data, keys, AdvantageEstimator.GRPO)
    scores = torch.tensor([1.0, 10.0, 0.0])  # finals: row 1, row 2, row 3
    per_session = (scores - scores.mean()) / (scores.std() + 1e-6)
    expected = per_session[[0, 0, 1, 2]].unsqueeze(-1) * mask
    torch.testing.assert_close(out.batch["advantages"], expected)
    with pytest.raises(ValueError, match="'bad-key'"):
        compute_advantage_for_multi_trajectories(data, ["bad-key"] * 4, "grpo")
