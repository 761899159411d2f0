"""The registered policy losses beyond PPO-clip: sapo, geo_mean, dro, dppo_tv/kl, clip_cov, kl_cov, bypass_mode,
plus the REINFORCE loss and the deprecated functional compute_policy_loss."""

from __future__ import annotations

import warnings

import pytest
import torch

from verl.trainer.ppo.core_algos import (
    compute_policy_loss,
    compute_policy_loss_reinforce,
    compute_policy_loss_vanilla,
    get_policy_loss_fn,
)


def _inputs(seed: int = 0, n: int = 5, r: int = 7):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, r, generator=g, dtype=torch.float64) * 3
    new = old + 0.4 * torch.randn(n, r, generator=g, dtype=torch.float64)
    adv = torch.randn(n, r, generator=g, dtype=torch.float64)
    mask = torch.ones(n, r, dtype=torch.float64)
    mask[1, 4:] = 0
    mask[3, 2:] = 0
    return old, new, adv, mask


def _run(name, old, new, adv, mask, config, mode="token-mean", weights=None):
    log_prob = new.clone().requires_grad_(True)
    loss, metrics = get_policy_loss_fn(name)(old, log_prob, adv, mask, mode, config, weights)
    loss.backward()
    return loss, log_prob.grad, metrics


def test_registry_holds_verls_loss_modes():
    for name in (
        "vanilla",
        "gspo",
        "gpg",
        "cispo",
        "sapo",
        "geo_mean",
        "dro",
        "dppo_tv",
        "dppo_kl",
        "clip_cov",
        "kl_cov",
        "bypass_mode",
    ):
        assert callable(get_policy_loss_fn(name))


def test_sapo_is_the_policy_gradient_on_policy_and_damps_far_tokens():
    old, _, adv, mask = _inputs()
    # On-policy (r = 1) the gate's slope is 1, so the gradient is GPG's (-A grad log pi) under the same aggregation.
    _, grad_sapo, _ = _run("sapo", old, old, adv, mask, {"tau_pos": 1.0, "tau_neg": 1.05})
    _, grad_pg, _ = _run("gpg", old, old, adv, mask, None, mode="seq-mean-token-mean")
    torch.testing.assert_close(grad_sapo, grad_pg)
    # Far off-policy tokens get a much smaller gradient than under the unclipped surrogate.
    far = old + 3.0
    _, grad_far, _ = _run("sapo", old, far, adv, mask, {"tau_pos": 1.0, "tau_neg": 1.05})
    assert grad_far[mask.bool()].abs().max() < grad_pg[mask.bool()].abs().max() * 0.5 + 1e-12


def test_dro_matches_its_formula_and_needs_beta():
    old, new, adv, mask = _inputs(1)
    loss, _, metrics = _run("dro", old, new, adv, mask, {"policy_loss": {"dro_beta": 0.2}})
    per_token = -(new * adv - 0.1 * (new - old) ** 2)
    assert loss.item() == pytest.approx(((per_token * mask).sum() / mask.sum()).item())
    assert metrics["actor/ppo_kl"] == pytest.approx(((old - new) * mask).sum().item() / mask.sum().item())
    with pytest.raises(ValueError, match="policy_loss.dro_beta must be a positive number"):
        _run("dro", old, new, adv, mask, {"policy_loss": {"dro_beta": None}})


def test_geo_mean_is_one_loss_per_sequence():
    old, new, adv, mask = _inputs(2)
    low = high = 0.2
    loss, _, metrics = _run("geo_mean", old, new, adv, mask, {"clip_ratio": 0.2})
    expected = []
    for i in range(mask.shape[0]):
        m = mask[i].bool()
        a, d = adv[i, m], (new - old)[i, m]
        seq_adv = a.mean()
        clipped = torch.where(
            a > 0, torch.minimum(d, torch.full_like(d, high)), torch.maximum(d, torch.full_like(d, -low))
        )
        clipped = torch.where(a == 0, torch.zeros_like(d), clipped)
        expected.append(-seq_adv * torch.exp(clipped.mean()))
    assert loss.item() == pytest.approx(torch.stack(expected).mean().item())
    assert 0.0 <= metrics["actor/pg_clipfrac"] <= 1.0


def test_dppo_tv_drops_tokens_that_already_moved_past_the_bound():
    old = torch.log(torch.tensor([[0.5, 0.5, 0.5, 0.5]], dtype=torch.float64))
    new = torch.log(torch.tensor([[0.9, 0.55, 0.1, 0.45]], dtype=torch.float64))
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)
    mask = torch.ones_like(adv)
    _, grad, metrics = _run("dppo_tv", old, new, adv, mask, {"clip_ratio": 0.2})
    # token 0 rose by 0.4 > 0.2 with A > 0, token 2 fell by 0.4 with A < 0: both dropped; 1 and 3 stay
    assert grad[0, 0] == 0 and grad[0, 2] == 0 and grad[0, 1] != 0 and grad[0, 3] != 0
    assert metrics["actor/pg_clipfrac"] == pytest.approx(0.5)


def test_kl_cov_penalises_only_the_top_covariance_tokens():
    old, new, adv, mask = _inputs(3)
    config = {"policy_loss": {"kl_cov_ratio": 0.1, "ppo_kl_coef": 1.0}}
    with_penalty, _, _ = _run("kl_cov", old, new, adv, mask, config)
    ratio = torch.exp(new - old)
    plain = ((-adv * ratio) * mask).sum() / mask.sum()
    extra = (with_penalty.detach() - plain).item() * mask.sum().item()
    cov = (adv - (adv * mask).sum() / mask.sum()) * (new - (new * mask).sum() / mask.sum())
    k = int(mask.sum().item() * 0.1)
    top = torch.topk(cov[mask.bool()], k).indices
    assert extra == pytest.approx((new - old)[mask.bool()][top].abs().sum().item())


def test_clip_cov_removes_the_gradient_of_a_share_of_tokens():
    old, new, adv, mask = _inputs(4)
    config = {"clip_ratio": 10.0, "policy_loss": {"clip_cov_ratio": 0.2, "clip_cov_lb": -100.0, "clip_cov_ub": 100.0}}
    _, grad, metrics = _run("clip_cov", old, new, adv, mask, config)
    removed = int(mask.sum().item() * 0.2)
    assert int(((grad == 0) & mask.bool()).sum()) == removed
    assert metrics["actor/pg_clipfrac"] == pytest.approx(removed / mask.sum().item())


def test_bypass_mode_dispatches_on_loss_type():
    rollout, new, adv, mask = _inputs(5)
    ppo = {"clip_ratio": 0.2, "policy_loss": {"rollout_correction": {"loss_type": "ppo_clip", "rollout_is": "token"}}}
    loss, _, metrics = _run("bypass_mode", rollout, new, adv, mask, ppo)
    vanilla, _ = compute_policy_loss_vanilla(rollout, new, adv, mask, "token-mean", {"clip_ratio": 0.2})
    assert loss.item() == pytest.approx(vanilla.item())  # the weights are reported, not applied
    assert "rollout_corr/is_weight_mean" in metrics and "rollout_corr/mismatch_kl_k1" in metrics

    spec = {"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": 1.5}
    loss, _, _ = _run("bypass_mode", rollout, new, adv, mask, {"policy_loss": {"rollout_correction": spec}})
    weights = torch.exp(new - rollout).clamp(max=1.5) * mask
    expected, _ = compute_policy_loss_reinforce(rollout, new, adv, mask, "token-mean", None, weights)
    assert loss.item() == pytest.approx(expected.item())
    with pytest.raises(ValueError, match="needs actor.policy_loss.rollout_correction"):
        _run("bypass_mode", rollout, new, adv, mask, {"clip_ratio": 0.2})
    with pytest.raises(ValueError, match=r"actor.policy_loss.rollout_correction.loss_type: must be one of .*got 'a2c'"):
        _run("bypass_mode", rollout, new, adv, mask, {"policy_loss": {"rollout_correction": {"loss_type": "a2c"}}})


def test_reinforce_is_weighted_log_likelihood():
    rollout, new, adv, mask = _inputs(6)
    loss, metrics = compute_policy_loss_reinforce(rollout, new, adv, mask, "token-mean")
    assert loss.item() == pytest.approx(((-adv * new) * mask).sum().item() / mask.sum().item())
    assert metrics["actor/ppo_kl"] == pytest.approx(((rollout - new) * mask).sum().item() / mask.sum().item())


def test_deprecated_compute_policy_loss_equals_vanilla():
    old, new, adv, mask = _inputs(7)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss, clipfrac, ppo_kl, clipfrac_lower = compute_policy_loss(
            old, new, adv, mask, cliprange=0.2, cliprange_high=0.3, clip_ratio_c=3.0
        )
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    expected, metrics = compute_policy_loss_vanilla(
        old, new, adv, mask, config={"clip_ratio": 0.2, "clip_ratio_high": 0.3, "clip_ratio_c": 3.0}
    )
    assert loss.item() == pytest.approx(expected.item())
    assert clipfrac.item() == pytest.approx(metrics["actor/pg_clipfrac"])
    assert ppo_kl.item() == pytest.approx(metrics["actor/ppo_kl"])
    assert clipfrac_lower.item() == pytest.approx(metrics["actor/pg_clipfrac_lower"])
