"""agg_loss's global-batch normalisation (token-sum, batch_num_tokens, global_batch_size, dp_size) and its
forwarding from the value loss and from the policy losses (``config.global_batch_info``)."""

from __future__ import annotations

import pytest
import torch

from verl.trainer.ppo.core_algos import LOSS_AGG_MODES, agg_loss, compute_value_loss, get_policy_loss_fn


def _batch(seed: int = 0, n: int = 8, r: int = 6):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, r + 1, (n,), generator=g)
    mask = (torch.arange(r).unsqueeze(0) < lengths.unsqueeze(1)).double()
    return torch.randn(n, r, generator=g, dtype=torch.float64), mask


def _global(mask: torch.Tensor) -> dict:
    return {"batch_num_tokens": mask.sum(), "global_batch_size": mask.shape[0]}


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("splits", [2, 4])
def test_micro_batch_losses_add_up_to_the_mini_batch_loss(mode, splits):
    loss, mask = _batch()
    whole = agg_loss(loss, mask, mode, **_global(mask), loss_scale_factor=6)
    parts = sum(
        agg_loss(l_, m_, mode, **_global(mask), loss_scale_factor=6)
        for l_, m_ in zip(loss.chunk(splits), mask.chunk(splits))
    )
    torch.testing.assert_close(parts, whole)
    # Without the global counts every micro-batch is its own mean (token-sum has no denominator).
    if mode != "token-sum":
        assert agg_loss(loss, mask, mode, loss_scale_factor=6) == pytest.approx(whole.item())


def test_token_sum_and_dp_scaling():
    loss, mask = _batch()
    assert agg_loss(loss, mask, "token-sum").item() == pytest.approx((loss * mask).sum().item())
    # each of 2 ranks scales by dp; the gradient all-reduce averages: the mean of the rank losses is the global one
    ranks = [
        agg_loss(l_, m_, "token-mean", dp_size=2, batch_num_tokens=mask.sum())
        for l_, m_ in zip(loss.chunk(2), mask.chunk(2))
    ]
    torch.testing.assert_close(torch.stack(ranks).mean(), agg_loss(loss, mask, "token-mean"))
    with pytest.raises(ValueError, match="dp_size=2 needs the global batch_num_tokens"):
        agg_loss(loss, mask, "token-mean", dp_size=2)
    with pytest.raises(ValueError, match="global_batch_size"):
        agg_loss(loss, mask, "seq-mean-token-mean", dp_size=2)


def test_all_masked_micro_batch_gives_zero_not_nan():
    loss, mask = _batch()
    for mode in LOSS_AGG_MODES:
        assert agg_loss(loss, torch.zeros_like(mask), mode).item() == 0.0


def test_value_loss_forwards_normalisation_but_not_to_clipfrac():
    vpreds, mask = _batch(1)
    returns, values = torch.randn_like(vpreds), torch.randn_like(vpreds)
    local, clipfrac = compute_value_loss(vpreds, returns, values, mask, cliprange_value=0.3)
    scaled, clipfrac2 = compute_value_loss(
        vpreds, returns, values, mask, cliprange_value=0.3, batch_num_tokens=2 * mask.sum()
    )
    torch.testing.assert_close(scaled, local / 2)
    torch.testing.assert_close(clipfrac, clipfrac2)


@pytest.mark.parametrize("name", ["vanilla", "gspo", "cispo", "dro", "dppo_tv", "kl_cov"])
def test_policy_losses_use_global_batch_info(name):
    log_prob_all, mask = _batch(2)
    old = log_prob_all - 0.1 * torch.randn_like(log_prob_all)
    adv = torch.randn_like(log_prob_all)
    base = {"clip_ratio": 0.2, "policy_loss": {"dro_beta": 0.1, "kl_cov_ratio": 0.5}}
    fn = get_policy_loss_fn(name)
    whole, _ = fn(old, log_prob_all, adv, mask, "seq-mean-token-mean", base)
    info = {"global_batch_info": {"global_batch_size": mask.shape[0]}}
    if name == "kl_cov":  # its penalised tokens are chosen per call, so compare a single full "micro-batch"
        parts = fn(old, log_prob_all, adv, mask, "seq-mean-token-mean", {**base, **info})[0]
    else:
        parts = sum(
            fn(o, lp, a, m, "seq-mean-token-mean", {**base, **info})[0]
            for o, lp, a, m in zip(old.chunk(4), log_prob_all.chunk(4), adv.chunk(4), mask.chunk(4))
        )
    torch.testing.assert_close(parts, whole)
