"""Advantage estimators against float64 references written as plain Python loops."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.config.algo_config import AlgoConfig
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import (
    AdvantageEstimator,
    compute_advantage,
    get_adv_estimator_fn,
    register_adv_est,
)

# Group sizes include singletons; masks include an empty-tailed row and an interior hole.
GROUP_SIZES = [4, 1, 3, 2, 1, 5]


def make_batch(seed: int, response_length: int = 7, dense: bool = False):
    """Random rewards / values / masks with right padding; rewards only where the mask is set."""
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    uids, n = [], 0
    for g, size in enumerate(GROUP_SIZES):
        uids += [f"prompt-{g}"] * size
        n += size
    order = list(range(n))
    rng.shuffle(order)  # group members need not be adjacent
    uids = [uids[i] for i in order]
    mask = torch.zeros(n, response_length)
    for i in range(n):
        mask[i, : rng.randint(1, response_length)] = 1
    mask[0, 2] = 0  # a hole, like a tool observation inside a multi-turn response
    mask[0, 0] = 1
    if dense:
        rewards = torch.randn(n, response_length, generator=gen) * mask
    else:
        rewards = torch.zeros(n, response_length)
        for i in range(n):
            last = int(mask[i].nonzero().max())
            rewards[i, last] = float(torch.randn(1, generator=gen))
    values = torch.randn(n, response_length, generator=gen)
    index = np.array(uids, dtype=object)
    return rewards, mask, values, index


def as_lists(t: torch.Tensor) -> list[list[float]]:
    return t.double().tolist()


def groups_of(index) -> dict:
    out: dict = {}
    for row, uid in enumerate(index):
        out.setdefault(uid, []).append(row)
    return out


def ref_whiten(x: list[list[float]], mask: list[list[float]]) -> list[list[float]]:
    picked = [x[i][t] for i in range(len(x)) for t in range(len(x[i])) if mask[i][t]]
    mean = sum(picked) / len(picked)
    var = sum((v - mean) ** 2 for v in picked) / (len(picked) - 1)
    return [
        [(x[i][t] - mean) / math.sqrt(var + 1e-8) if mask[i][t] else 0.0 for t in range(len(x[i]))]
        for i in range(len(x))
    ]


def ref_scores(rewards):
    return [sum(row) for row in as_lists(rewards)]


def broadcast(per_row: list[float], mask: list[list[float]]) -> list[list[float]]:
    return [[per_row[i] if mask[i][t] else 0.0 for t in range(len(mask[i]))] for i in range(len(mask))]


def assert_close(actual: torch.Tensor, expected: list[list[float]], atol: float = 1e-5) -> None:
    torch.testing.assert_close(actual.double(), torch.tensor(expected, dtype=torch.float64), atol=atol, rtol=1e-5)


# ----------------------------------------------------------------------------- registry


def test_enum_names_match_registry():
    assert {e.value for e in AdvantageEstimator} == {
        "gae",
        "grpo",
        "grpo_passk",
        "rloo",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
        "remax",
        "opo",
        "gpg",
        "rloo_vectorized",
        "grpo_vectorized",
        "optimal_token_baseline",
        "tir_optimal_token_baseline",
        "gdpo",
    }
    for est in AdvantageEstimator:
        assert get_adv_estimator_fn(est) is get_adv_estimator_fn(est.value)
    assert AdvantageEstimator.GRPO == "grpo" and str(AdvantageEstimator.GRPO) == "grpo"


def test_unknown_estimator_lists_registered_names():
    with pytest.raises(ValueError, match="Unknown advantage estimator simply: nope ") as err:
        get_adv_estimator_fn("nope")
    assert "grpo" in str(err.value) and "gae" in str(err.value) and "rloo" in str(err.value)


def test_duplicate_registration_with_other_function_raises_same_function_is_ok():
    grpo = get_adv_estimator_fn("grpo")
    assert register_adv_est("grpo")(grpo) is grpo  # idempotent

    def other(**kwargs):
        raise AssertionError

    with pytest.raises(ValueError, match="'grpo' is already registered"):
        register_adv_est("grpo")(other)
    assert get_adv_estimator_fn("grpo") is grpo


def test_custom_estimator_registers_and_runs_through_compute_advantage():
    name = "test_custom_constant"

    @register_adv_est(name)
    def constant(token_level_rewards, response_mask):  # accepts only what it needs
        adv = torch.full_like(token_level_rewards, 2.0) * response_mask
        return adv, adv

    try:
        rewards, mask, _, index = make_batch(0)
        data = _make_data_proto({"token_level_rewards": rewards, "response_mask": mask}, {"uid": index})
        compute_advantage(data, name)
        assert torch.equal(data.batch["advantages"], 2.0 * mask)
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop(name)


# ----------------------------------------------------------------------------- estimators


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.9, 0.8)])
def test_gae_matches_reference(seed, gamma, lam):
    rewards, mask, values, _ = make_batch(seed, dense=True)
    adv, ret = get_adv_estimator_fn("gae")(
        token_level_rewards=rewards, values=values, response_mask=mask, gamma=gamma, lam=lam
    )
    r, m, v = as_lists(rewards), as_lists(mask), as_lists(values)
    raw = [[0.0] * len(row) for row in r]
    exp_ret = [[0.0] * len(row) for row in r]
    for i in range(len(r)):
        valid = [t for t in range(len(r[i])) if m[i][t]]
        gae, next_value = 0.0, 0.0
        for t in reversed(valid):  # masked positions are skipped entirely
            delta = r[i][t] + gamma * next_value - v[i][t]
            gae = delta + gamma * lam * gae
            raw[i][t] = gae
            exp_ret[i][t] = gae + v[i][t]
            next_value = v[i][t]
    assert_close(ret, exp_ret)
    assert_close(adv, ref_whiten(raw, m))


def test_gae_reads_gamma_lam_from_config_and_requires_values():
    rewards, mask, values, _ = make_batch(3, dense=True)
    cfg = AlgoConfig(gamma=0.5, lam=0.7)
    fn = get_adv_estimator_fn("gae")
    a1, _ = fn(token_level_rewards=rewards, values=values, response_mask=mask, config=cfg)
    a2, _ = fn(token_level_rewards=rewards, values=values, response_mask=mask, gamma=0.5, lam=0.7)
    torch.testing.assert_close(a1, a2)
    with pytest.raises(ValueError, match=r"gae needs `values`.*data.batch\['values'\]"):
        fn(token_level_rewards=rewards, values=None, response_mask=mask)


def ref_group_baseline(scores, index, std_norm: bool, eps: float = 1e-6):
    out = [0.0] * len(scores)
    for rows in groups_of(index).values():
        if len(rows) == 1:
            continue  # singleton: baseline is its own score -> 0
        mean = sum(scores[r] for r in rows) / len(rows)
        std = math.sqrt(sum((scores[r] - mean) ** 2 for r in rows) / (len(rows) - 1))
        for r in rows:
            out[r] = (scores[r] - mean) / (std + eps) if std_norm else scores[r] - mean
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("std_norm", [True, False])
def test_grpo_and_dr_grpo_match_reference(seed, std_norm):
    rewards, mask, _, index = make_batch(seed, dense=seed == 2)
    adv, ret = get_adv_estimator_fn("grpo")(
        token_level_rewards=rewards, response_mask=mask, index=index, norm_adv_by_std_in_grpo=std_norm
    )
    expected = broadcast(ref_group_baseline(ref_scores(rewards), index, std_norm), as_lists(mask))
    assert_close(adv, expected)
    assert torch.equal(adv, ret)


def test_grpo_singleton_groups_get_zero_advantage():
    rewards = torch.tensor([[3.0, 0.0], [1.0, 0.0], [2.0, 0.0]])
    mask = torch.ones(3, 2)
    index = np.array(["a", "b", "b"], dtype=object)
    for name in ("grpo", "rloo", "reinforce_plus_plus_baseline", "opo"):
        adv, _ = get_adv_estimator_fn(name)(token_level_rewards=rewards, response_mask=mask, index=index)
        assert torch.all(adv[0] == 0), name
        assert adv[1, 0] < 0 < adv[2, 0], name


def test_grpo_reads_norm_flag_from_config_and_needs_index():
    rewards, mask, _, index = make_batch(4)
    fn = get_adv_estimator_fn("grpo")
    cfg = {"norm_adv_by_std_in_grpo": False}
    a_cfg, _ = fn(token_level_rewards=rewards, response_mask=mask, index=index, config=cfg)
    a_arg, _ = fn(token_level_rewards=rewards, response_mask=mask, index=index, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(a_cfg, a_arg)
    with pytest.raises(ValueError, match=r"grpo needs `index`.*uid"):
        fn(token_level_rewards=rewards, response_mask=mask)
    with pytest.raises(ValueError, match="index has 2 entries but the batch has"):
        fn(token_level_rewards=rewards, response_mask=mask, index=index[:2])


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("std_norm", [True, False])
def test_grpo_passk_matches_reference(seed, std_norm):
    rewards, mask, _, _ = make_batch(seed)
    n = rewards.shape[0]
    ids = [i // 3 for i in range(n)]
    if n % 3 == 1:
        ids[-1] = ids[-2]  # no singleton: pass@k needs two responses per prompt
    index = np.array([f"g{g}" for g in ids], dtype=object)
    adv, _ = get_adv_estimator_fn("grpo_passk")(
        token_level_rewards=rewards, response_mask=mask, index=index, norm_adv_by_std_in_grpo=std_norm
    )
    scores = ref_scores(rewards)
    per_row = [0.0] * n
    for rows in groups_of(index).values():
        ranked = sorted(rows, key=lambda r: -scores[r])
        best, second = ranked[0], ranked[1]
        gap = scores[best] - scores[second]
        mean = sum(scores[r] for r in rows) / len(rows)
        std = math.sqrt(sum((scores[r] - mean) ** 2 for r in rows) / (len(rows) - 1))
        per_row[best] = gap / (std + 1e-6) if std_norm else gap
    assert_close(adv, broadcast(per_row, as_lists(mask)))
    assert int((adv.abs().sum(-1) > 0).sum()) == len(groups_of(index))  # exactly one reinforced per group


def test_grpo_passk_ties_and_singletons():
    mask = torch.ones(4, 2)
    rewards = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.5, 0.0]])
    tied = np.array(["a", "a", "a", "b"], dtype=object)
    with pytest.raises(ValueError, match=r"grpo_passk needs at least 2 responses per prompt.*'b'"):
        get_adv_estimator_fn("grpo_passk")(token_level_rewards=rewards, response_mask=mask, index=tied)
    index = np.array(["a", "a", "a", "a"], dtype=object)
    adv, _ = get_adv_estimator_fn("grpo_passk")(token_level_rewards=rewards, response_mask=mask, index=index)
    assert torch.all(adv == 0)  # best two tie -> no pass@k gain


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rloo_matches_reference(seed):
    rewards, mask, _, index = make_batch(seed, dense=seed == 2)
    adv, _ = get_adv_estimator_fn("rloo")(token_level_rewards=rewards, response_mask=mask, index=index)
    scores = ref_scores(rewards)
    per_row = [0.0] * len(scores)
    for rows in groups_of(index).values():
        for r in rows:
            others = [scores[o] for o in rows if o != r]
            per_row[r] = scores[r] - sum(others) / len(others) if others else 0.0
    assert_close(adv, broadcast(per_row, as_lists(mask)))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_plus_plus_matches_reference(seed, gamma):
    rewards, mask, _, _ = make_batch(seed, dense=True)
    adv, ret = get_adv_estimator_fn("reinforce_plus_plus")(token_level_rewards=rewards, response_mask=mask, gamma=gamma)
    r, m = as_lists(rewards), as_lists(mask)
    exp_ret = [[0.0] * len(row) for row in r]
    for i in range(len(r)):
        running = 0.0
        for t in reversed(range(len(r[i]))):
            if m[i][t]:
                running = r[i][t] + gamma * running
                exp_ret[i][t] = running
    assert_close(ret, exp_ret)
    assert_close(adv, ref_whiten(exp_ret, m))


@pytest.mark.parametrize("seed", [0, 1])
def test_reinforce_plus_plus_baseline_matches_reference(seed):
    rewards, mask, _, index = make_batch(seed)
    adv, _ = get_adv_estimator_fn("reinforce_plus_plus_baseline")(
        token_level_rewards=rewards, response_mask=mask, index=index
    )
    m = as_lists(mask)
    centred = broadcast(ref_group_baseline(ref_scores(rewards), index, std_norm=False), m)
    assert_close(adv, ref_whiten(centred, m))


@pytest.mark.parametrize("seed", [0, 1])
def test_remax_matches_reference(seed):
    rewards, mask, _, _ = make_batch(seed, dense=True)
    baselines = torch.randn(rewards.shape[0], generator=torch.Generator().manual_seed(seed))
    adv, ret = get_adv_estimator_fn("remax")(
        token_level_rewards=rewards, response_mask=mask, reward_baselines=baselines
    )
    r, m, b = as_lists(rewards), as_lists(mask), baselines.double().tolist()
    exp_ret = [
        [sum(r[i][k] for k in range(t, len(r[i])) if m[i][k]) if m[i][t] else 0.0 for t in range(len(r[i]))]
        for i in range(len(r))
    ]
    exp_adv = [[exp_ret[i][t] - b[i] if m[i][t] else 0.0 for t in range(len(r[i]))] for i in range(len(r))]
    assert_close(ret, exp_ret)
    assert_close(adv, exp_adv)
    with pytest.raises(ValueError, match=r"remax needs `reward_baselines`"):
        get_adv_estimator_fn("remax")(token_level_rewards=rewards, response_mask=mask)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_opo_matches_reference(seed):
    rewards, mask, _, index = make_batch(seed, dense=seed == 2)
    adv, _ = get_adv_estimator_fn("opo")(token_level_rewards=rewards, response_mask=mask, index=index)
    scores, m = ref_scores(rewards), as_lists(mask)
    lengths = [sum(row) for row in m]
    per_row = [0.0] * len(scores)
    for rows in groups_of(index).values():
        baseline = sum(lengths[r] * scores[r] for r in rows) / sum(lengths[r] for r in rows)
        for r in rows:
            per_row[r] = scores[r] - baseline
    assert_close(adv, broadcast(per_row, m))


def test_shape_mismatch_is_reported():
    with pytest.raises(ValueError, match=r"rloo: response_mask shape \(2, 3\) does not match"):
        get_adv_estimator_fn("rloo")(
            token_level_rewards=torch.zeros(2, 4), response_mask=torch.ones(2, 3), index=np.array(["a", "a"])
        )


# ----------------------------------------------------------------------------- DataProto glue


def _make_data_proto(tensors, non_tensors):
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


@pytest.mark.parametrize("estimator", list(AdvantageEstimator))
def test_compute_advantage_over_dataproto_matches_direct_call(estimator):
    rewards, mask, values, index = make_batch(5)
    n, r = rewards.shape
    if estimator == AdvantageEstimator.GRPO_PASSK:
        index = np.array([f"g{i // 2}" for i in range(n)], dtype=object)
        if n % 2:
            index[-1] = index[-2]
    prompt_len = 3
    tensors = {
        "token_level_rewards": rewards,
        "values": values,
        "reward_baselines": torch.randn(n),
        "old_log_probs": -torch.rand(n, r),  # optimal token baselines
        "sum_pi_squared": torch.rand(n, r) * 0.5,
        "responses": torch.ones(n, r, dtype=torch.long),
        "attention_mask": torch.cat([torch.ones(n, prompt_len), mask], dim=-1).long(),
    }
    data = _make_data_proto(tensors, {"uid": index})
    out = compute_advantage(data, estimator, gamma=0.95, lam=0.9, norm_adv_by_std_in_grpo=False)
    assert torch.equal(out.batch["response_mask"], mask.long())  # derived from attention_mask
    direct_adv, direct_ret = get_adv_estimator_fn(estimator)(
        token_level_rewards=rewards,
        response_mask=mask.long(),
        values=values,
        index=index,
        gamma=0.95,
        lam=0.9,
        norm_adv_by_std_in_grpo=False,
        reward_baselines=tensors["reward_baselines"],
        old_log_probs=tensors["old_log_probs"],
        sum_pi_squared=tensors["sum_pi_squared"],
    )
    torch.testing.assert_close(out.batch["advantages"], direct_adv)
    torch.testing.assert_close(out.batch["returns"], direct_ret)


def test_compute_advantage_names_missing_inputs():
    rewards, mask, _, index = make_batch(0)
    with pytest.raises(KeyError, match="token_level_rewards"):
        compute_advantage(_make_data_proto({"response_mask": mask}, {"uid": index}), "grpo")
    with pytest.raises(KeyError, match=r"no 'response_mask'.*data.batch\['responses'\] is missing"):
        compute_advantage(_make_data_proto({"token_level_rewards": rewards}, {"uid": index}), "grpo")
    data = _make_data_proto({"token_level_rewards": rewards, "response_mask": mask}, {"uid": index})
    with pytest.raises(ValueError, match=r"gae needs `values`"):
        compute_advantage(data, "gae")
    with pytest.raises(ValueError, match="Unknown advantage estimator simply: nope "):
        compute_advantage(data, "nope")
    no_uid = _make_data_proto({"token_level_rewards": rewards, "response_mask": mask}, {"x": index})
    with pytest.raises(ValueError, match=r"uid"):
        compute_advantage(no_uid, "grpo")
