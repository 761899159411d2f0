"""Covariance-based entropy control (Clip-Cov, KL-Cov; "The Entropy Mechanism of RL for Reasoning LMs").

Policy entropy collapses fastest through tokens whose log-probability and advantage covary most:
raising an already likely token that has a high advantage. Both losses pick a small share of such
tokens (``policy_loss.clip_cov_ratio`` / ``kl_cov_ratio`` of the batch's tokens) and restrain only
those; every other token gets the plain PPO-clip surrogate.

- ``clip_cov``: a random subset of the tokens whose centred covariance lies in
  (``clip_cov_lb``, ``clip_cov_ub``) and that PPO's clip did not already stop loses its gradient.
- ``kl_cov``: the top tokens by covariance get a ``ppo_kl_coef * |log r|`` penalty added.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.trainer.ppo._util import as_actor_config
from verl.trainer.ppo.policy_loss import _apply_is_weights, _log_ratio, aggregate, register_policy_loss
from verl.utils.torch_functional import masked_mean

__all__ = ["compute_policy_loss_clip_cov", "compute_policy_loss_kl_cov"]


def _centred_covariance(advantages: torch.Tensor, log_prob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token (A - mean A) * (log p - mean log p) with means over the masked tokens (no gradient)."""
    log_prob = log_prob.detach()
    return (advantages - masked_mean(advantages, mask)) * (log_prob - masked_mean(log_prob, mask))


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip with the gradient of a random ``clip_cov_ratio`` share of high-covariance tokens removed.

    ``pg_clipfrac`` is the share of tokens removed this way.
    """
    config = as_actor_config(config)
    policy_loss = config.policy_loss
    share = float(policy_loss.clip_cov_ratio)
    lower, upper = float(policy_loss.clip_cov_lb), float(policy_loss.clip_cov_ub)
    if share <= 0:
        raise ValueError(f"actor.policy_loss.clip_cov_ratio must be > 0 for loss_mode=clip_cov, got {share}")
    low, high = float(config.clip_ratio_low), float(config.clip_ratio_high)

    log_ratio = _log_ratio(old_log_prob, log_prob, response_mask)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    valid = response_mask > 0
    already_clipped = (clipped > unclipped) & valid

    covariance = _centred_covariance(advantages, log_prob, response_mask)
    candidates = torch.nonzero(valid & ~already_clipped & (covariance > lower) & (covariance < upper))
    budget = max(int(share * float(response_mask.sum())), 1)
    chosen = candidates[torch.randperm(len(candidates), device=candidates.device)[:budget]]
    keep = torch.ones_like(advantages)
    keep[chosen[:, 0], chosen[:, 1]] = 0.0

    pg_losses = _apply_is_weights(torch.maximum(unclipped, clipped) * keep, rollout_is_weights)
    pg_loss = aggregate(pg_losses, response_mask, loss_agg_mode, config)
    metrics = {
        "actor/pg_clipfrac": masked_mean((keep == 0).to(ratio.dtype), response_mask).item(),
        "actor/ppo_kl": masked_mean(-log_ratio, response_mask).detach().item(),
    }
    return pg_loss, metrics


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Unclipped surrogate -A * r, plus ``ppo_kl_coef * |log r|`` on the top ``kl_cov_ratio`` share of tokens
    by covariance. ``actor/ppo_kl`` reports the mean absolute log-ratio."""
    config = as_actor_config(config)
    share = float(config.policy_loss.kl_cov_ratio)
    coef = float(config.policy_loss.ppo_kl_coef)
    if share <= 0:
        raise ValueError(f"actor.policy_loss.kl_cov_ratio must be > 0 for loss_mode=kl_cov, got {share}")

    log_ratio = _log_ratio(old_log_prob, log_prob, response_mask)
    ratio = torch.exp(log_ratio)
    pg_losses = -advantages * ratio
    valid = response_mask > 0
    n_valid = int(valid.sum())
    if n_valid > 0:
        covariance = _centred_covariance(advantages, log_prob, response_mask)
        flat = torch.nonzero(valid.flatten()).flatten()
        top = torch.topk(covariance.flatten()[flat], k=max(1, int(n_valid * share))).indices
        penalised = torch.zeros(valid.numel(), dtype=torch.bool, device=valid.device)
        penalised[flat[top]] = True
        pg_losses = torch.where(penalised.view_as(valid), pg_losses + coef * log_ratio.abs(), pg_losses)

    pg_losses = _apply_is_weights(pg_losses, rollout_is_weights)
    pg_loss = aggregate(pg_losses, response_mask, loss_agg_mode, config)
    return pg_loss, {"actor/ppo_kl": masked_mean(log_ratio.abs(), response_mask).detach().item()}
