"""verl's earlier rollout importance-sampling API (``mismatch_helper``), on this package's rollout correction.

Between 0.5 and 0.6 verl corrected the rollout/trainer mismatch with one function taking the knobs as arguments:
``compute_rollout_importance_weights(old_log_prob, rollout_log_prob, response_mask, rollout_is_level,
rollout_is_mode, rollout_is_threshold, rollout_is_threshold_lower, rollout_is_veto_threshold)``. It returns the IS
weights as a DataProto (``rollout_is_weights``, never zeroed by rejection), the response mask with rejections applied
and ``mismatch/*`` metrics. The maths is :mod:`verl.trainer.ppo.rollout_corr`'s (weights, rejection, the token veto):

* ``rollout_is_level``: ``token`` (per-token ratio), ``sequence`` (product over the response) or ``geometric``
  (geometric mean over the response);
* ``rollout_is_mode``: ``truncate`` clips the weights at ``rollout_is_threshold`` and rejects nothing; ``mask``
  keeps the true ratios and drops tokens/responses whose ratio leaves ``[lower, threshold]`` (``lower`` defaults to
  ``1 / threshold``);
* ``rollout_is_veto_threshold``: any token with a ratio below it drops its whole response, in both modes.

Without ``rollout_is_threshold`` nothing is computed: ``(None, response_mask, {})``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from verl.protocol import DataProto
from verl.trainer.ppo.rollout_corr import LOG_RATIO_CLAMP, compute_rollout_is_weights, rejection_mask
from verl.utils.torch_functional import masked_mean

__all__ = ["compute_mismatch_metrics", "compute_rollout_importance_weights"]

IS_LEVELS = ("token", "sequence", "geometric")
IS_MODES = ("truncate", "mask")


def _weights(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor, level: str, cap: float
) -> torch.Tensor:
    if level != "geometric":
        return compute_rollout_is_weights(old_log_prob, rollout_log_prob, response_mask, level, cap)
    mask = response_mask.to(old_log_prob.dtype)
    mean_log_ratio = masked_mean(old_log_prob - rollout_log_prob, mask, axis=-1).unsqueeze(-1)
    weights = torch.exp(mean_log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).clamp(max=cap)
    return (weights.expand_as(old_log_prob) * mask).detach()


def _item(value: torch.Tensor | float) -> float:
    return float(value.detach().item()) if isinstance(value, torch.Tensor) else float(value)


def _weight_metrics(weights: torch.Tensor, response_mask: torch.Tensor, upper: float, lower: float) -> dict[str, float]:
    mask = response_mask.bool()
    selected = weights[mask]
    bounded = weights.clamp(min=lower, max=upper)
    mean_bounded = masked_mean(bounded, response_mask)
    variance = masked_mean(bounded.square(), response_mask) - mean_bounded.square()
    normalised = bounded / (mean_bounded + 1e-8)
    per_seq = masked_mean(weights, response_mask, axis=-1)
    return {
        "rollout_is_mean": _item(masked_mean(weights, response_mask)),
        "rollout_is_max": _item(selected.max()),
        "rollout_is_min": _item(selected.min()),
        "rollout_is_std": _item(variance.clamp(min=0).sqrt()) if selected.numel() > 1 else 0.0,
        "rollout_is_eff_sample_size": _item(1.0 / masked_mean(normalised.square(), response_mask)),
        "rollout_is_ratio_fraction_high": _item(masked_mean((weights > upper).float(), response_mask)),
        "rollout_is_ratio_fraction_low": _item(masked_mean((weights < lower).float(), response_mask)),
        "rollout_is_seq_mean": _item(per_seq.mean()),
        "rollout_is_seq_max": _item(per_seq.max()),
        "rollout_is_seq_min": _item(per_seq.min()),
    }


def compute_mismatch_metrics(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor | None, response_mask: torch.Tensor
) -> dict[str, float]:
    """How far the trainer's and the rollout's log-probs drift apart (keys without the ``mismatch/`` prefix).

    ``mismatch_kl``/``mismatch_k3_kl``: KL(rollout || trainer) by the k1 and k3 estimators; ``*_ppl`` /
    ``*_log_ppl``: each policy's per-response perplexity averaged over responses; ``mismatch_log_ppl_diff*`` and
    ``mismatch_ppl_ratio``: rollout vs trainer per response. Without ``rollout_log_prob`` only the trainer's
    perplexity is reported.
    """
    if not response_mask.any():
        raise ValueError("compute_mismatch_metrics: response_mask selects no token")
    trainer_mean = masked_mean(old_log_prob, response_mask, axis=-1)
    metrics = {
        "mismatch_training_ppl": _item(torch.exp(-trainer_mean).mean()),
        "mismatch_training_log_ppl": _item((-trainer_mean).mean()),
    }
    if rollout_log_prob is None:
        return metrics
    log_ratio = old_log_prob - rollout_log_prob
    rollout_mean = masked_mean(rollout_log_prob, response_mask, axis=-1)
    log_ppl_diff = rollout_mean - trainer_mean
    metrics.update(
        {
            "mismatch_kl": _item(masked_mean(-log_ratio, response_mask)),
            "mismatch_k3_kl": _item(masked_mean(torch.exp(log_ratio) - log_ratio - 1, response_mask)),
            "mismatch_rollout_ppl": _item(torch.exp(-rollout_mean).mean()),
            "mismatch_rollout_log_ppl": _item((-rollout_mean).mean()),
            "mismatch_log_ppl_diff": _item(log_ppl_diff.mean()),
            "mismatch_log_ppl_abs_diff": _item(log_ppl_diff.abs().mean()),
            "mismatch_log_ppl_diff_max": _item(log_ppl_diff.max()),
            "mismatch_log_ppl_diff_min": _item(log_ppl_diff.min()),
            "mismatch_ppl_ratio": _item(torch.exp(log_ppl_diff).mean()),
        }
    )
    return metrics


def compute_rollout_importance_weights(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is_level: str = "token",
    rollout_is_mode: str = "truncate",
    rollout_is_threshold: float | None = None,
    rollout_is_threshold_lower: float | None = None,
    rollout_is_veto_threshold: float | None = None,
) -> tuple[DataProto | None, torch.Tensor, dict[str, Any]]:
    """IS weights, the rejection-applied response mask and ``mismatch/*`` metrics (see the module docstring)."""
    if rollout_is_threshold is None:
        return None, response_mask, {}
    if rollout_is_level not in IS_LEVELS:
        raise ValueError(f"rollout_is_level={rollout_is_level!r}; expected one of {list(IS_LEVELS)}")
    if rollout_is_mode not in IS_MODES:
        raise ValueError(f"rollout_is_mode={rollout_is_mode!r}; expected one of {list(IS_MODES)}")
    if not response_mask.any():
        raise ValueError("compute_rollout_importance_weights: response_mask selects no token")
    upper = float(rollout_is_threshold)
    lower = float(rollout_is_threshold_lower) if rollout_is_threshold_lower is not None else 1.0 / upper
    veto = None if rollout_is_veto_threshold is None else float(rollout_is_veto_threshold)
    true_weights = _weights(old_log_prob, rollout_log_prob, response_mask, rollout_is_level, math.inf)
    metrics: dict[str, Any] = _weight_metrics(true_weights, response_mask, upper, lower)
    vetoed = rejection_mask(old_log_prob, rollout_log_prob, response_mask, None, None, None, veto)
    valid_rows = response_mask.sum(-1) > 0
    metrics["rollout_is_veto_fraction"] = _item((valid_rows & (vetoed.sum(-1) == 0)).float().mean())
    if rollout_is_mode == "truncate":
        weights = true_weights.clamp(max=upper)
        modified_mask = vetoed
    else:
        weights = true_weights
        kept = rejection_mask(old_log_prob, rollout_log_prob, response_mask, rollout_is_level, upper, lower, None)
        metrics["rollout_is_masked_fraction"] = _item(masked_mean(1.0 - kept.float(), response_mask))
        metrics["rollout_is_seq_masked_fraction"] = _item(
            (valid_rows & (response_mask.bool() & ~kept.bool()).any(-1)).float().mean()
        )
        modified_mask = kept * vetoed
    metrics.update(compute_mismatch_metrics(old_log_prob, rollout_log_prob, response_mask))
    weights_proto = DataProto.from_dict(tensors={"rollout_is_weights": weights * response_mask})
    return weights_proto, modified_mask, {f"mismatch/{key}": value for key, value in metrics.items()}
