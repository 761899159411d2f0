"""Policy losses that reshape or replace PPO's clipped ratio: SAPO, GMPO (geo_mean), DRO and DPPO.

Same call convention and metrics as :mod:`verl.trainer.ppo.policy_loss`:

- ``sapo``: a smooth sigmoid gate on the ratio instead of a hard clip (temperatures ``tau_pos`` for
  positive advantages, ``tau_neg`` for the rest); always aggregated ``seq-mean-token-mean``.
- ``geo_mean`` (GMPO): the sequence ratio is the geometric mean of the token ratios, each clipped in
  log space, times the sequence's mean advantage; one loss per sequence.
- ``dro``: ``-(A log pi - beta/2 (log pi - log pi_old)^2)``: a policy gradient with a quadratic
  trust-region penalty instead of a clip (``policy_loss.dro_beta`` > 0).
- ``dppo_tv`` / ``dppo_kl``: a policy gradient ``-A * sg(min(r, c)) * log pi`` that drops tokens whose
  probability already moved beyond a divergence bound in the advantage's direction (total variation
  ``|p - p_old|`` or the binary KL of the token's probability); ``clip_ratio_low`` / ``clip_ratio_high``
  are those bounds, ``clip_ratio_c`` truncates the importance ratio.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch

from verl.trainer.ppo._util import as_actor_config
from verl.trainer.ppo.policy_loss import _apply_is_weights, _log_ratio, _metrics, aggregate, register_policy_loss
from verl.utils.torch_functional import masked_mean
from verl.workers.config.actor import ActorConfig

__all__ = [
    "compute_policy_loss_sapo",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_dro",
    "compute_policy_loss_dppo_tv",
    "compute_policy_loss_dppo_kl",
]


def _bounds(config: ActorConfig) -> tuple[float, float]:
    # ActorConfig.__post_init__ fills clip_ratio_low / clip_ratio_high from clip_ratio
    return float(cast(float, config.clip_ratio_low)), float(cast(float, config.clip_ratio_high))


@register_policy_loss("sapo")
def compute_policy_loss_sapo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """SAPO: per token -A * f(r), f(r) = sigmoid(tau (r - 1)) * 4 / tau.

    f has slope 1 at r = 1 (the plain policy gradient on-policy) and flattens smoothly as the
    ratio moves away, so off-policy tokens are damped instead of cut. ``tau_pos`` applies to
    positive advantages, ``tau_neg`` to the others. SAPO averages per
    sequence, so ``loss_agg_mode`` is ignored in favour of ``seq-mean-token-mean``.
    """
    config = as_actor_config(config)
    del loss_agg_mode
    log_ratio = _log_ratio(old_log_prob, log_prob, response_mask)
    ratio = torch.exp(log_ratio)
    tau_pos, tau_neg = float(config.tau_pos), float(config.tau_neg)
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"actor.tau_pos / actor.tau_neg must be > 0 for sapo, got {tau_pos} / {tau_neg}")
    tau = torch.where(advantages > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    pg_losses = _apply_is_weights(-gate * advantages, rollout_is_weights)
    pg_loss = aggregate(pg_losses, response_mask, "seq-mean-token-mean", config)
    return pg_loss, _metrics(masked_mean(-log_ratio, response_mask), 0.0, 0.0)


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GMPO: per sequence -mean(A) * exp(mean_t clip_A(log r_t)), averaged over sequences.

    Each token's log-ratio is clipped to [-low, high] only on the side the advantage pushes
    (pessimistic, as in PPO); the geometric mean is far less sensitive to one outlier token than
    GSPO's exponent of a sum. Advantages are taken per sequence (their mean over the response);
    ``rollout_is_weights`` enter as their per-sequence geometric mean. ``loss_agg_mode`` is
    ignored: the loss is one value per sequence, averaged over sequences that have tokens.
    """
    config = as_actor_config(config)
    del loss_agg_mode
    low, high = _bounds(config)
    if old_log_prob.shape != log_prob.shape or log_prob.shape != response_mask.shape:
        raise ValueError(
            f"geo_mean: old_log_prob {tuple(old_log_prob.shape)}, log_prob {tuple(log_prob.shape)} "
            f"and response_mask {tuple(response_mask.shape)} must have the same shape"
        )
    mask = response_mask.to(log_prob.dtype)
    log_ratio = log_prob - old_log_prob
    sign = torch.sign(advantages)
    clamped = torch.clamp(log_ratio, -low, high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clamped)
    lengths = mask.sum(-1)
    seq_ratio = torch.exp((pessimistic * mask).sum(-1) / (lengths + 1e-8))
    seq_advantage = (advantages * mask).sum(-1) / (lengths + 1e-8)
    pg_losses = -seq_advantage * seq_ratio
    if rollout_is_weights is not None:
        log_w = torch.log(rollout_is_weights.detach() + 1e-10)
        pg_losses = pg_losses * torch.exp((log_w * mask).sum(-1) / (lengths + 1e-8))
    has_tokens = (lengths > 0).to(mask.dtype).unsqueeze(-1)
    pg_loss = aggregate(pg_losses.unsqueeze(-1), has_tokens, "seq-mean-token-sum", config)
    clipped = torch.ne(log_ratio, clamped)
    clipfrac = masked_mean((clipped & (advantages > 0)).to(mask.dtype), response_mask)
    clipfrac_lower = masked_mean((clipped & (advantages < 0)).to(mask.dtype), response_mask)
    return pg_loss, _metrics(masked_mean(-log_ratio, response_mask), clipfrac, clipfrac_lower)


@register_policy_loss("dro")
def compute_policy_loss_dro(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DRO: -(A * log pi - beta/2 * (log pi - log pi_old)^2), beta = ``actor.policy_loss.dro_beta`` (> 0)."""
    config = as_actor_config(config)
    beta = config.policy_loss.dro_beta
    if beta is None or float(beta) <= 0:
        raise ValueError(f"actor.policy_loss.dro_beta must be a positive number for loss_mode=dro, got {beta!r}")
    if old_log_prob.shape != log_prob.shape or log_prob.shape != response_mask.shape:
        raise ValueError(
            f"dro: old_log_prob {tuple(old_log_prob.shape)}, log_prob {tuple(log_prob.shape)} and "
            f"response_mask {tuple(response_mask.shape)} must have the same shape"
        )
    log_ratio = log_prob - old_log_prob
    pg_losses = -(log_prob * advantages - 0.5 * float(beta) * log_ratio.square())
    pg_losses = _apply_is_weights(pg_losses, rollout_is_weights)
    pg_loss = aggregate(pg_losses, response_mask, loss_agg_mode, config)
    return pg_loss, _metrics(masked_mean(-log_ratio, response_mask), 0.0, 0.0)


TrustRegion = Callable[[torch.Tensor, torch.Tensor, float, float], tuple[torch.Tensor, torch.Tensor]]


def _dppo_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    config: ActorConfig,
    rollout_is_weights: torch.Tensor | None,
    inside: TrustRegion,
) -> tuple[torch.Tensor, dict[str, float]]:
    low, high = _bounds(config)
    clip_c = float(config.clip_ratio_c)
    log_ratio = _log_ratio(old_log_prob, log_prob, response_mask)
    ratio = torch.exp(log_ratio)
    may_rise, may_fall = inside(log_prob.detach(), old_log_prob, low, high)
    keep = torch.where(advantages > 0, may_rise, may_fall).to(log_prob.dtype)
    truncated = torch.clamp(ratio, max=clip_c).detach()
    pg_losses = _apply_is_weights(-advantages * truncated * log_prob * keep, rollout_is_weights)
    pg_loss = aggregate(pg_losses, response_mask, loss_agg_mode, config)
    clipfrac = masked_mean(1.0 - keep, response_mask)
    truncfrac = masked_mean((ratio > clip_c).to(keep.dtype) * keep, response_mask)
    return pg_loss, _metrics(masked_mean(-log_ratio, response_mask), clipfrac, truncfrac)


def _total_variation_region(log_prob, old_log_prob, low, high):
    """(may the token's probability rise, may it fall): its move so far is within the bound on that side."""
    shift = torch.exp(log_prob) - torch.exp(old_log_prob)
    return shift <= high, shift >= -low


def _binary_kl_region(log_prob, old_log_prob, low, high):
    """As above with the KL between the Bernoulli "this token / any other" under the old and the new policy."""
    prob, old_prob = torch.exp(log_prob), torch.exp(old_log_prob)
    binary_kl = old_prob * (old_log_prob - log_prob) + (1.0 - old_prob) * torch.log(
        (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8)
    )
    return (binary_kl <= high) | (prob <= old_prob), (binary_kl <= low) | (prob >= old_prob)


@register_policy_loss("dppo_tv")
def compute_policy_loss_dppo_tv(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPPO (binary total variation): drop tokens whose probability moved more than ``clip_ratio_high``
    up (A > 0) or ``clip_ratio_low`` down (A <= 0). ``pg_clipfrac`` counts dropped tokens,
    ``pg_clipfrac_lower`` kept tokens whose ratio was truncated at ``clip_ratio_c``."""
    config = as_actor_config(config)
    return _dppo_loss(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        loss_agg_mode,
        config,
        rollout_is_weights,
        _total_variation_region,
    )


@register_policy_loss("dppo_kl")
def compute_policy_loss_dppo_kl(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPPO (binary KL): like ``dppo_tv`` with the binary KL of the token's probability as the divergence;
    a token is only dropped when it moved past the bound in the direction the advantage pushes."""
    config = as_actor_config(config)
    return _dppo_loss(
        old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights, _binary_kl_region
    )
