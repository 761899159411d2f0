"""Bypass mode: train directly on the rollout engine's log-probs, skipping the trainer's old log-prob pass.

In bypass mode the trainer passes ``rollout_log_probs`` as ``old_log_prob``, so the policy ratio is
pi_current / pi_rollout. The ``bypass_mode`` loss applies the rollout correction itself, from the
update's own (detached) log-probs, as configured in ``actor.policy_loss.rollout_correction``:

- ``loss_type: ppo_clip`` (default): PPO-clip on that ratio; the clip already bounds the off-policy
  step, so importance weights are computed for the metrics but not applied (that would count the
  correction twice).
- ``loss_type: reinforce``: :func:`compute_policy_loss_reinforce`, ``-w * A * log pi`` with the
  truncated weights ``w`` (``rollout_is``, ``rollout_is_threshold``, ``rollout_is_batch_normalize``).

Rejection sampling (``rollout_rs``, ``rollout_rs_threshold``, ``rollout_rs_threshold_lower``,
``rollout_token_veto_threshold``) removes tokens from the loss mask in both cases. The mechanics are
those of :mod:`verl.trainer.ppo.rollout_corr`, which the non-bypass trainer path uses on the batch. verl's spellings
(an IcePop ``"lower_upper"`` ``rollout_is_threshold``, verl's ``rollout_rs`` options and comma lists) are applied as
verl's bypass loss applies them, by ``rollout_corr_helper``; batch normalisation stays within the micro-batch.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.trainer.config.algo_config import RolloutCorrectionConfig
from verl.trainer.ppo._util import as_actor_config, as_rollout_correction_config
from verl.trainer.ppo.policy_loss import aggregate, compute_policy_loss_vanilla, register_policy_loss
from verl.trainer.ppo.rollout_corr import (
    _normalized,
    _weight_metrics,
    compute_rollout_is_weights,
    mismatch_metrics,
    rejection_mask,
    uses_verl_options,
)
from verl.trainer.ppo.rollout_corr_helper import correction_from_config
from verl.utils.torch_functional import masked_mean

__all__ = ["compute_policy_loss_reinforce", "compute_policy_loss_bypass_mode"]

LOSS_TYPES = ("ppo_clip", "reinforce")


def compute_policy_loss_reinforce(
    rollout_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-sum",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """REINFORCE: ``-A * log pi``, times the (detached) importance weights when given; no ratio, no clip.

    ``actor/ppo_kl`` is the k1 estimate of KL(rollout || current) over the mask.
    """
    config = as_actor_config(config)
    if rollout_log_prob.shape != log_prob.shape or log_prob.shape != response_mask.shape:
        raise ValueError(
            f"reinforce: rollout_log_prob {tuple(rollout_log_prob.shape)}, log_prob "
            f"{tuple(log_prob.shape)} and response_mask {tuple(response_mask.shape)} must match"
        )
    pg_losses = -advantages * log_prob
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights.detach()
    pg_loss = aggregate(pg_losses, response_mask, loss_agg_mode, config)
    kl = masked_mean(rollout_log_prob - log_prob, response_mask)
    return pg_loss, {"actor/ppo_kl": kl.detach().item()}


def _correction(
    log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor, spec: RolloutCorrectionConfig
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """(importance weights or None, mask after rejection, metrics) from the update's detached log-probs."""
    current = log_prob.detach()
    metrics = mismatch_metrics(current, rollout_log_prob, response_mask)
    if uses_verl_options(spec):
        return _verl_correction(current, rollout_log_prob, response_mask, spec, metrics)
    rs_level, veto = spec.rollout_rs, spec.rollout_token_veto_threshold
    mask = response_mask
    if rs_level or veto is not None:
        upper, lower = spec.rollout_rs_threshold, spec.rollout_rs_threshold_lower
        mask = rejection_mask(
            current,
            rollout_log_prob,
            response_mask,
            rs_level or None,
            None if upper is None else float(upper),
            None if lower is None else float(lower),
            None if veto is None else float(veto),
        )
        metrics["rollout_corr/rs_rejected_token_frac"] = (1 - mask.sum() / response_mask.sum().clamp(min=1)).item()
    level = spec.rollout_is
    if not level:
        return None, mask, metrics
    threshold = float(spec.rollout_is_threshold)
    weights = compute_rollout_is_weights(current, rollout_log_prob, mask, str(level), threshold)
    metrics.update(_weight_metrics(weights, mask, threshold))
    if spec.rollout_is_batch_normalize:
        weights = _normalized(weights, mask, str(level))
    return weights, mask, metrics


def _verl_correction(
    current: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    spec: RolloutCorrectionConfig,
    metrics: dict[str, float],
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """:func:`_correction` for verl's spellings, as verl's bypass loss computes it: weights over the incoming mask,
    rejection by ``rollout_corr_helper``, verl's ``rollout_corr/*`` metrics. ``rollout_is_batch_normalize`` divides
    by this micro-batch's mean (verl averages over the ranks' current micro-batches, a collective this loss avoids:
    ranks may run different numbers of micro-batches)."""
    if not response_mask.any():
        return (None if spec.rollout_is is None else torch.zeros_like(current)), response_mask, metrics
    weights, mask, helper_metrics = correction_from_config(
        current, rollout_log_prob, response_mask, spec, batch_normalize=False
    )
    metrics.update(helper_metrics)
    if weights is not None and spec.rollout_is_batch_normalize:
        weights = _normalized(weights, response_mask.to(weights.dtype), str(spec.rollout_is))
    return weights, mask, metrics


@register_policy_loss("bypass_mode")
def compute_policy_loss_bypass_mode(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Bypass-mode loss; ``old_log_prob`` holds the rollout log-probs. ``rollout_is_weights`` is ignored:
    the weights are recomputed here from the current policy."""
    del rollout_is_weights
    config = as_actor_config(config)
    spec = config.policy_loss.rollout_correction
    if spec is None:
        raise ValueError(
            "loss_mode=bypass_mode needs actor.policy_loss.rollout_correction: the rollout-correction settings "
            "(loss_type, rollout_is, rollout_is_threshold, rollout_rs, ...) as in algorithm.rollout_correction"
        )
    spec = as_rollout_correction_config(spec, "actor.policy_loss.rollout_correction")
    loss_type = spec.loss_type
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"rollout_correction.loss_type={loss_type!r}; expected one of {list(LOSS_TYPES)}")
    with torch.no_grad():
        weights, mask, correction_metrics = _correction(log_prob, old_log_prob, response_mask, spec)
    if loss_type == "reinforce":
        pg_loss, metrics = compute_policy_loss_reinforce(
            old_log_prob, log_prob, advantages, mask, loss_agg_mode, config, rollout_is_weights=weights
        )
    else:
        pg_loss, metrics = compute_policy_loss_vanilla(
            old_log_prob, log_prob, advantages, mask, loss_agg_mode, config, rollout_is_weights=None
        )
    metrics.update(correction_metrics)
    return pg_loss, metrics
