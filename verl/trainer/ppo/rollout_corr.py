"""Importance-sampling correction for samples drawn by a rollout policy that differs from the trainer's.

The rollout engine's log-probs (`rollout_log_probs`) are the behaviour policy; the trainer's recomputed
`old_log_probs` are the proximal policy. Their ratio, truncated at `rollout_is_threshold`, becomes the
`rollout_is_weights` that the policy loss multiplies in. Mismatch metrics are reported whenever both
log-probs are present, so a run shows how far rollout and trainer drift apart even without correction.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.protocol import DataProto
from verl.utils.torch_functional import masked_mean

IS_LEVELS = ("token", "sequence")
LOG_RATIO_CLAMP = 20.0


def _get(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    value = config.get(key, default) if hasattr(config, "get") else getattr(config, key, default)
    return default if value is None else value


def compute_rollout_is_weights(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor, level: str,
    threshold: float,
) -> torch.Tensor:
    """Truncated importance weights pi_old / pi_rollout at token or sequence level, zero outside the mask."""
    if level not in IS_LEVELS:
        raise ValueError(f"algorithm.rollout_correction.rollout_is={level!r}; expected one of {list(IS_LEVELS)}")
    mask = response_mask.to(old_log_prob.dtype)
    log_ratio = (old_log_prob - rollout_log_prob) * mask
    if level == "sequence":
        log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(old_log_prob)
    weights = torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).clamp(max=float(threshold))
    return (weights * mask).detach()


def mismatch_metrics(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """KL(rollout || trainer) estimates and the effective sample size of the raw token ratios."""
    log_ratio = old_log_prob - rollout_log_prob
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    mask = response_mask.bool()
    k1 = masked_mean(-log_ratio, response_mask).item()
    k3 = masked_mean(ratio - 1 - log_ratio, response_mask).item()
    selected = ratio[mask]
    ess = (selected.sum() ** 2 / (selected.numel() * (selected**2).sum())).item() if selected.numel() else 1.0
    return {"rollout_corr/mismatch_kl_k1": k1, "rollout_corr/mismatch_kl_k3": k3, "rollout_corr/ess": ess}


def apply_rollout_correction(batch: DataProto, config: Any) -> dict[str, float]:
    """Add `rollout_is_weights` to the batch when configured; return mismatch and weight metrics."""
    keys = batch.batch.keys()
    if "rollout_log_probs" not in keys or "old_log_probs" not in keys:
        return {}
    response_mask = batch.batch["response_mask"]
    old_log_prob, rollout_log_prob = batch.batch["old_log_probs"], batch.batch["rollout_log_probs"]
    metrics = mismatch_metrics(old_log_prob, rollout_log_prob, response_mask)
    level = _get(config, "rollout_is", None)
    if level:
        weights = compute_rollout_is_weights(
            old_log_prob, rollout_log_prob, response_mask, str(level), float(_get(config, "rollout_is_threshold", 2.0))
        )
        batch.batch["rollout_is_weights"] = weights
        metrics["rollout_corr/is_weight_mean"] = masked_mean(weights, response_mask).item()
        threshold = float(_get(config, "rollout_is_threshold", 2.0))
        metrics["rollout_corr/is_truncated_frac"] = masked_mean((weights >= threshold).float(), response_mask).item()
    return metrics
