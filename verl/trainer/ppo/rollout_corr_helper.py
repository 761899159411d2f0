"""verl's ``rollout_corr_helper`` API (0.9.1), on this package's rollout correction (:mod:`.rollout_corr`).

Recipes written against verl call these functions directly, so they keep verl's names, arguments, return values,
batch keys (``response_mask``, ``rollout_is_weights``, ``old_log_probs``) and metric names (``rollout_corr/...``).
The maths that :mod:`.rollout_corr` and :mod:`.mismatch_helper` already do (truncated weights, ratio-band rejection,
the token veto, batch normalisation, KL/perplexity diagnostics) is called from there, not repeated.

``rollout_is`` (``token`` | ``sequence``) with ``rollout_is_threshold``: a number (or ``"2.0"``) truncates the
weights at it; ``"lower_upper"`` (IcePop) zeroes weights outside ``[lower, upper]``.

``rollout_rs`` is a comma-separated list; a token stays only if every option keeps it. ``rollout_rs_threshold``
gives one spec per option, or one shared by all. ``r = pi_train / pi_rollout``:

* verl's options. ``*_k1`` band ``pi_rollout / pi_train`` (the exponential of the mean / sum of ``-log r``) within
  ``"lower_upper"`` (a lone number ``u`` means ``1/u_u``): ``token_k1``, ``seq_sum_k1``, ``seq_mean_k1``.
  ``*_k2`` (``0.5 * log(r)^2``) and ``*_k3`` (``r - 1 - log r``) reject above an upper bound, per token
  (``token_*``) or on the response's sum, mean or max (``seq_sum_*``, ``seq_mean_*``, ``seq_max_*``).
* this package's options (``algorithm.rollout_correction.rollout_rs``): ``token``, ``sequence`` and ``geometric``
  band ``r`` itself (token ratio, product, geometric mean) within ``"lower_upper"`` or ``u`` (``1/u_u``). With a
  symmetric band they agree with ``token_k1``, ``seq_sum_k1`` and ``seq_mean_k1``.

``rollout_token_veto_threshold`` (this package's key, keyword-only here) drops every response with a token whose
``r`` is below it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, MutableMapping
from typing import Any, cast

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from verl.base_config import BaseConfig
from verl.protocol import DataProto
from verl.trainer.config.algo_config import (
    RATIO_RS_OPTIONS,
    SUPPORTED_ROLLOUT_RS_OPTIONS,
    TOKEN_LEVEL_ROLLOUT_RS_OPTIONS,
    RolloutCorrectionConfig,
    is_two_sided,
    parse_is_threshold,
    parse_rs_options,
    parse_rs_thresholds,
)
from verl.trainer.ppo._util import as_rollout_correction_config
from verl.trainer.ppo.mismatch_helper import compute_mismatch_metrics
from verl.trainer.ppo.rollout_corr import (
    LOG_RATIO_CLAMP,
    batch_weight_sum_count,
    is_weights_from_log_ratio,
    rejection_mask_from_log_ratio,
)
from verl.utils.config_builder import as_config
from verl.utils.torch_functional import masked_mean, masked_sum
from verl.workers.config.actor import PolicyLossConfig

__all__ = [
    "SAFETY_BOUND",
    "SUPPORTED_ROLLOUT_RS_OPTIONS",
    "TOKEN_LEVEL_ROLLOUT_RS_OPTIONS",
    "apply_bypass_mode",
    "bypass_policy_loss_settings",
    "compute_is_metrics",
    "compute_offpolicy_metrics",
    "compute_rollout_correction_and_add_to_batch",
    "compute_rollout_correction_and_rejection_mask",
    "compute_rollout_correction_weights",
    "compute_rollout_corr_metrics_from_logprobs",
    "compute_rollout_rejection_mask",
    "compute_rs_metrics",
]

logger = logging.getLogger(__name__)

SAFETY_BOUND = LOG_RATIO_CLAMP  # |log ratio| is clamped to this before exponentiating
# verl's k1 options are this package's ratio options (RATIO_RS_OPTIONS, levels of :func:`rejection_mask`) on 1 / r
_K1_LEVELS: dict[str, str] = {"token_k1": "token", "seq_sum_k1": "sequence", "seq_mean_k1": "geometric"}
_SEQ_AGGREGATES = ("seq_sum", "seq_mean", "seq_max")


# ------------------------------------------------------------------------------------------- rejection
def _masked_row_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    filled = values.masked_fill(~mask.bool(), float("-inf")).max(-1).values
    return torch.where(torch.isinf(filled), torch.zeros_like(filled), filled)


def _rs_option(
    option: str, log_ratio: torch.Tensor, mask: torch.Tensor, lower: float | None, upper: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, float, float]:
    """(kept tokens, per-token statistic, per-response statistic or None, metric upper, metric lower)."""
    clamped = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    if is_two_sided(option):
        assert lower is not None  # _rs_bounds gives every two-sided option a lower bound
        sign, level = (1.0, option) if option in RATIO_RS_OPTIONS else (-1.0, _K1_LEVELS[option])
        kept = rejection_mask_from_log_ratio(sign * log_ratio, mask, level, upper, lower).bool()
        token_stat = sign * clamped  # the log of the banded ratio
        seq_stat = None
        if level == "sequence":
            seq_stat = masked_sum(token_stat, mask, axis=-1)
        elif level == "geometric":
            seq_stat = masked_mean(token_stat, mask, axis=-1)
        stat = token_stat if seq_stat is None else seq_stat.unsqueeze(-1).expand_as(token_stat)
        return kept, stat, seq_stat, math.log(upper), math.log(lower)
    token_stat = 0.5 * clamped.square() if option.endswith("k2") else torch.exp(clamped) - 1.0 - clamped
    if option in TOKEN_LEVEL_ROLLOUT_RS_OPTIONS:
        return (token_stat <= upper) & mask.bool(), token_stat, None, upper, 0.0
    aggregate = option.rsplit("_", 1)[0]
    if aggregate == "seq_sum":
        seq_stat = masked_sum(token_stat, mask, axis=-1)
    elif aggregate == "seq_mean":
        seq_stat = masked_mean(token_stat, mask, axis=-1)
    else:
        seq_stat = _masked_row_max(token_stat, mask)
    kept = (seq_stat <= upper).unsqueeze(-1) & mask.bool()
    return kept, seq_stat.unsqueeze(-1).expand_as(token_stat), seq_stat, upper, 0.0


def _rejected_fractions(kept: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor) -> tuple[float, float]:
    """(fraction of valid tokens dropped, fraction of ``rows`` losing at least one valid token)."""
    valid = mask.bool()
    token_frac = masked_mean((~kept & valid).float(), mask).item()
    touched = (~kept & valid).any(-1)
    seq_frac = (touched & rows).sum().item() / max(int(rows.sum().item()), 1)
    return token_frac, seq_frac


def compute_rollout_rejection_mask(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_rs: str | None = "token_k1",
    rollout_rs_threshold: str | float | None = None,
    *,
    rollout_token_veto_threshold: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``response_mask`` without the tokens/responses some ``rollout_rs`` option rejects (see the module docstring),
    and ``rollout_rs_*`` metrics (per option and overall). ``log_ratio`` is ``log pi_train - log pi_rollout``."""
    if rollout_rs is not None and not isinstance(rollout_rs, str):
        raise ValueError(f"rollout_rs must be a comma-separated string, got {rollout_rs!r}")
    if rollout_rs is None and rollout_token_veto_threshold is None:
        raise ValueError("compute_rollout_rejection_mask: set rollout_rs (or rollout_token_veto_threshold)")
    if log_ratio.shape[0] == 0:
        return response_mask, {}
    options = parse_rs_options(rollout_rs) if rollout_rs is not None else []
    bounds = parse_rs_thresholds(options, rollout_rs_threshold) if options else {}
    valid = response_mask.bool()
    rows = response_mask.sum(-1) > 0
    combined = valid.clone()
    metrics: dict[str, float] = {}
    for option in options:
        lower, upper = bounds[option]
        kept, stat, seq_stat, metric_upper, metric_lower = _rs_option(option, log_ratio, response_mask, lower, upper)
        metrics.update(
            compute_rs_metrics(
                option,
                stat,
                response_mask,
                rows,
                level="token" if seq_stat is None else "sequence",
                per_sequence_values=seq_stat,
                rollout_rs_threshold=metric_upper,
                rollout_rs_threshold_lower=metric_lower,
                apply_lower_threshold=lower is not None,
            )
        )
        token_frac, seq_frac = _rejected_fractions(kept, response_mask, rows)
        metrics[f"rollout_rs_{option}_masked_fraction"] = token_frac
        metrics[f"rollout_rs_{option}_seq_masked_fraction"] = seq_frac
        combined &= kept
    if rollout_token_veto_threshold is not None:
        veto = float(rollout_token_veto_threshold)
        kept = rejection_mask_from_log_ratio(log_ratio, response_mask, None, None, None, veto).bool()
        token_frac, seq_frac = _rejected_fractions(kept, response_mask, rows)
        metrics["rollout_rs_token_veto_masked_fraction"] = token_frac
        metrics["rollout_rs_token_veto_seq_masked_fraction"] = seq_frac
        combined &= kept
    metrics["rollout_rs_masked_fraction"] = masked_mean((valid & ~combined).float(), response_mask).item()
    # verl divides by every row of the batch here, empty ones included
    metrics["rollout_rs_seq_masked_fraction"] = (valid & ~combined).any(-1).float().mean().item()
    return (response_mask * combined.to(response_mask.dtype)).to(response_mask.dtype), metrics


def compute_rs_metrics(
    option_name: str,
    rs_statistic: torch.Tensor,
    response_mask: torch.Tensor,
    seq_valid_mask: torch.Tensor,
    *,
    level: str,
    per_sequence_values: torch.Tensor | None,
    rollout_rs_threshold: float,
    rollout_rs_threshold_lower: float,
    apply_lower_threshold: bool,
) -> dict[str, float]:
    """``rollout_rs_<option>_*`` statistics of one rejection criterion, so a run shows how close its samples sit to
    the thresholds: token-level mean/max/min/std and fractions beyond them, then the same per response (``seq_*``).
    Thresholds are in the statistic's own units (log ratio for the two-sided options)."""
    if not response_mask.any():
        raise ValueError("compute_rs_metrics: response_mask selects no token")
    prefix = f"rollout_rs_{option_name}"
    valid = response_mask.bool()
    upper, lower = float(rollout_rs_threshold), float(rollout_rs_threshold_lower)
    seq = per_sequence_values if per_sequence_values is not None else masked_mean(rs_statistic, response_mask, -1)
    seq = seq.reshape(seq.shape[0], -1)[:, 0][seq_valid_mask]
    by_sequence = level == "sequence" and seq.numel() > 0
    metrics = {f"{prefix}_mean": masked_mean(rs_statistic, response_mask).item()}
    if by_sequence:
        metrics[f"{prefix}_max"], metrics[f"{prefix}_min"] = seq.max().item(), seq.min().item()
        high, low = (seq > upper).float().mean().item(), (seq < lower).float().mean().item()
    else:
        metrics[f"{prefix}_max"] = rs_statistic.masked_fill(~valid, float("-inf")).max().item()
        metrics[f"{prefix}_min"] = rs_statistic.masked_fill(~valid, float("inf")).min().item()
        high = masked_mean((rs_statistic > upper).float(), response_mask).item()
        low = masked_mean((rs_statistic < lower).float(), response_mask).item()
    metrics[f"{prefix}_fraction_high"] = high
    metrics[f"{prefix}_fraction_low"] = low if apply_lower_threshold else 0.0
    if response_mask.sum() > 1:
        bounded = rs_statistic.clamp(min=lower if apply_lower_threshold else 0.0, max=upper)
        mean = masked_mean(bounded, response_mask)
        metrics[f"{prefix}_std"] = (
            (masked_mean(bounded.square(), response_mask) - mean.square()).clamp(min=0).sqrt().item()
        )
    else:
        metrics[f"{prefix}_std"] = 0.0
    if seq.numel() == 0:
        names = ("seq_mean", "seq_std", "seq_max", "seq_min", "seq_max_deviation", "seq_fraction_high")
        metrics.update({f"{prefix}_{name}": 0.0 for name in (*names, "seq_fraction_low")})
        return metrics
    metrics[f"{prefix}_seq_mean"] = seq.mean().item()
    metrics[f"{prefix}_seq_std"] = seq.std().item() if seq.numel() > 1 else 0.0
    metrics[f"{prefix}_seq_max"] = seq.max().item()
    metrics[f"{prefix}_seq_min"] = seq.min().item()
    metrics[f"{prefix}_seq_max_deviation"] = seq.abs().max().item()  # the ideal value is 0
    metrics[f"{prefix}_seq_fraction_high"] = (seq > upper).float().mean().item()
    if apply_lower_threshold:
        metrics[f"{prefix}_seq_fraction_low"] = (seq < lower).float().mean().item()
    return metrics


# ------------------------------------------------------------------------------------------- IS weights
def _global_mean(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """total / count, summed over ranks first when torch.distributed runs (every rank normalises alike)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        pair = torch.stack([total, count])
        torch.distributed.all_reduce(pair)
        total, count = pair[0], pair[1]
    return total / count if count > 0 else torch.zeros_like(total)


def compute_rollout_correction_weights(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str = "token",
    rollout_is_threshold: str | float = 2.0,
    rollout_is_batch_normalize: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Detached IS weights ``pi_train / pi_rollout`` (``rollout_is``: per token or per response), truncated at the
    threshold or, for a ``"lower_upper"`` threshold, zeroed outside the band; zero on padding. With
    ``rollout_is_batch_normalize`` they are rescaled to a batch mean of 1 (``rollout_is_batch_norm_factor``).
    Metrics are ``rollout_is_*`` without a prefix (:func:`compute_is_metrics`)."""
    if rollout_is not in ("token", "sequence"):
        raise ValueError(f"rollout_is={rollout_is!r}; expected 'token' or 'sequence'")
    upper, lower = parse_is_threshold(rollout_is_threshold)
    raw = is_weights_from_log_ratio(log_ratio, response_mask, rollout_is)
    if lower is None:
        weights = raw.clamp(max=upper)
    else:
        weights = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    if rollout_is == "sequence":
        metric_log_ratio = masked_sum(log_ratio, response_mask, axis=-1).unsqueeze(-1)
    else:
        metric_log_ratio = log_ratio
    metrics = compute_is_metrics(weights, raw, metric_log_ratio, response_mask, rollout_is, upper, lower)
    if lower is not None:
        outside = (raw < lower) | (raw > upper)
        metrics["rollout_is_oob_ratio"] = masked_mean(outside.float(), response_mask).item()
    if rollout_is_batch_normalize:
        mean = _global_mean(*batch_weight_sum_count(weights, response_mask.to(weights.dtype), rollout_is))
        if mean > 1e-8:
            weights = weights / mean
            metrics["rollout_is_batch_norm_factor"] = mean.item()
        else:
            metrics["rollout_is_batch_norm_factor"] = 1.0
    return weights.detach(), metrics


def compute_is_metrics(
    rollout_is_weights: torch.Tensor,
    raw_rollout_is_weights: torch.Tensor,
    log_ratio_for_metrics: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str,
    rollout_is_threshold: float,
    rollout_is_threshold_lower: float | None = None,
) -> dict[str, float]:
    """``rollout_is_*`` statistics: mean/max/min/std and effective sample size of the applied weights, the fraction
    of raw ratios beyond ``[lower, threshold]`` (``lower`` defaults to ``1/threshold``), and per-response
    ``seq_*`` figures. At sequence level max/min and the fractions come from the unclamped log ratio
    (``log_ratio_for_metrics``, one per response), since the weights themselves are truncated."""
    if not response_mask.any():
        raise ValueError("compute_is_metrics: response_mask selects no token")
    upper = float(rollout_is_threshold)
    lower = 1.0 / upper if rollout_is_threshold_lower is None else float(rollout_is_threshold_lower)
    weights, raw, valid = rollout_is_weights, raw_rollout_is_weights, response_mask.bool()
    metrics = {"rollout_is_mean": masked_mean(weights, response_mask).item()}
    if rollout_is == "sequence":
        log_ratio = log_ratio_for_metrics
        metrics["rollout_is_max"] = math.exp(min(log_ratio.max().item(), SAFETY_BOUND))
        metrics["rollout_is_min"] = math.exp(log_ratio.min().item())
        metrics["rollout_is_ratio_fraction_high"] = (log_ratio > math.log(upper)).float().mean().item()
        metrics["rollout_is_ratio_fraction_low"] = (log_ratio < math.log(lower)).float().mean().item()
    else:
        metrics["rollout_is_ratio_fraction_high"] = masked_mean((raw > upper).float(), response_mask).item()
        metrics["rollout_is_ratio_fraction_low"] = masked_mean((raw < lower).float(), response_mask).item()
        metrics["rollout_is_max"] = weights.masked_fill(~valid, float("-inf")).max().item()
        metrics["rollout_is_min"] = weights.masked_fill(~valid, float("inf")).min().item()
    bounded = weights.clamp(min=0.0, max=upper)
    mean = masked_mean(bounded, response_mask)
    if response_mask.sum() > 1:
        variance = masked_mean(bounded.square(), response_mask) - mean.square()
        metrics["rollout_is_std"] = variance.clamp(min=0).sqrt().item()
    else:
        metrics["rollout_is_std"] = 0.0
    normalised = bounded / (mean + 1e-8)
    metrics["rollout_is_eff_sample_size"] = 1.0 / masked_mean(normalised.square(), response_mask).item()
    if weights.dim() > 1:
        per_seq = masked_mean(weights, response_mask, axis=-1)
        raw_per_seq = masked_mean(raw, response_mask, axis=-1)
        metrics["rollout_is_seq_mean"] = per_seq.mean().item()
        metrics["rollout_is_seq_std"] = per_seq.std().item() if per_seq.numel() > 1 else 0.0
        metrics["rollout_is_seq_max"] = per_seq.max().item()
        metrics["rollout_is_seq_min"] = per_seq.min().item()
        metrics["rollout_is_seq_max_deviation"] = (per_seq - 1.0).abs().max().item()
        # raw means: a mean of truncated weights never exceeds the threshold
        metrics["rollout_is_seq_fraction_high"] = (raw_per_seq > upper).float().mean().item()
        metrics["rollout_is_seq_fraction_low"] = (raw_per_seq < lower).float().mean().item()
    return metrics


# ---------------------------------------------------------------------------------------------- pipeline
def compute_rollout_correction_and_rejection_mask(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str | None = None,
    rollout_is_threshold: str | float | None = 2.0,
    rollout_is_batch_normalize: bool = False,
    rollout_rs: str | None = None,
    rollout_rs_threshold: str | float | None = None,
    *,
    rollout_token_veto_threshold: float | None = None,
) -> tuple[DataProto | None, torch.Tensor, dict[str, float]]:
    """(``rollout_is_weights`` as a DataProto or None, the response mask after rejection, ``rollout_corr/*``
    metrics). Weights are computed over the incoming mask, rejection independently; off-policy diagnostics
    (:func:`compute_offpolicy_metrics`) are always reported."""
    if not response_mask.any():
        raise ValueError("compute_rollout_correction_and_rejection_mask: response_mask selects no token")
    if old_log_prob.shape != rollout_log_prob.shape or old_log_prob.shape != response_mask.shape:
        raise ValueError(
            f"old_log_prob {tuple(old_log_prob.shape)}, rollout_log_prob {tuple(rollout_log_prob.shape)} and "
            f"response_mask {tuple(response_mask.shape)} must have the same shape"
        )
    log_ratio = old_log_prob - rollout_log_prob
    metrics: dict[str, float] = {}
    weights = None
    if rollout_is is not None and rollout_is_threshold is not None:
        weights, is_metrics = compute_rollout_correction_weights(
            log_ratio, response_mask, rollout_is, rollout_is_threshold, rollout_is_batch_normalize
        )
        metrics.update(is_metrics)
    kept = response_mask.clone()
    if rollout_rs is not None or rollout_token_veto_threshold is not None:
        kept, rs_metrics = compute_rollout_rejection_mask(
            log_ratio,
            response_mask,
            rollout_rs,
            rollout_rs_threshold,
            rollout_token_veto_threshold=rollout_token_veto_threshold,
        )
        metrics.update(rs_metrics)
    metrics.update(compute_offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask))
    proto = None if weights is None else DataProto.from_dict(tensors={"rollout_is_weights": weights})
    return proto, kept, {f"rollout_corr/{key}": _scalar(value) for key, value in metrics.items()}


def _scalar(value: Any) -> Any:
    return value.item() if isinstance(value, torch.Tensor) else value


def compute_offpolicy_metrics(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor | None, response_mask: torch.Tensor
) -> dict[str, Any]:
    """Unprefixed diagnostics of the trainer/rollout gap: ``training_ppl``/``training_log_ppl`` always; with
    rollout log-probs also ``kl``, ``k3_kl``, ``rollout_ppl``, ``rollout_log_ppl``, ``log_ppl_diff*``,
    ``ppl_ratio`` (:func:`~verl.trainer.ppo.mismatch_helper.compute_mismatch_metrics`) and the chi-square
    divergences ``chi2_token`` = E[r^2] - 1 and ``chi2_seq`` = E[(prod r)^2] - 1, i.e. the IS weights' variance."""
    metrics = {
        key.removeprefix("mismatch_"): value
        for key, value in compute_mismatch_metrics(old_log_prob, rollout_log_prob, response_mask).items()
    }
    if rollout_log_prob is None:
        return metrics
    log_ratio = old_log_prob - rollout_log_prob
    token_ratio_sq = torch.exp(2.0 * log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    metrics["chi2_token"] = (masked_mean(token_ratio_sq, response_mask) - 1.0).item()
    seq_log_ratio = masked_sum(log_ratio, response_mask, axis=-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    metrics["chi2_seq"] = (torch.exp(2.0 * seq_log_ratio).mean() - 1.0).item()
    return metrics


def _rs_threshold_spec(config: RolloutCorrectionConfig) -> str | float | None:
    """``rollout_rs_threshold``, joined with this package's ``rollout_rs_threshold_lower`` as ``"lower_upper"``."""
    upper, lower = config.rollout_rs_threshold, config.rollout_rs_threshold_lower
    if lower is None or not isinstance(upper, int | float):
        return upper
    return f"{float(lower)!r}_{float(upper)!r}"


def compute_rollout_correction_and_add_to_batch(
    batch: DataProto, rollout_corr_config: Any
) -> tuple[DataProto, dict[str, float]]:
    """Apply ``rollout_corr_config`` (a ``RolloutCorrectionConfig``, DictConfig or dict) to ``batch``: always
    replace ``response_mask`` with the rejection-applied mask, add ``rollout_is_weights`` when ``rollout_is`` is
    set, and return ``(batch, rollout_corr/* metrics)``. Needs ``old_log_probs`` and ``rollout_log_probs``.
    ``None`` means a ``RolloutCorrectionConfig()`` (metrics only)."""
    config = as_rollout_correction_config(rollout_corr_config)
    missing = [key for key in ("old_log_probs", "rollout_log_probs", "response_mask") if key not in batch.batch.keys()]
    if missing:
        raise KeyError(f"compute_rollout_correction_and_add_to_batch: the batch has no {missing}")
    weights, kept, metrics = correction_from_config(
        batch.batch["old_log_probs"], batch.batch["rollout_log_probs"], batch.batch["response_mask"], config
    )
    batch.batch["response_mask"] = kept
    if weights is not None:
        batch.batch["rollout_is_weights"] = weights
    return batch, metrics


def correction_from_config(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    config: RolloutCorrectionConfig,
    *,
    batch_normalize: bool | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """:func:`compute_rollout_correction_and_rejection_mask` with the settings of ``config``: (``rollout_is_weights``
    or None, the mask after rejection, ``rollout_corr/*`` metrics). ``batch_normalize`` overrides
    ``config.rollout_is_batch_normalize`` (the bypass loss normalises per micro-batch itself). The trainer's own
    pass (:mod:`.rollout_corr`, :mod:`.policy_loss_bypass`) calls this for verl's spellings."""
    normalize = config.rollout_is_batch_normalize if batch_normalize is None else batch_normalize
    proto, kept, metrics = compute_rollout_correction_and_rejection_mask(
        old_log_prob,
        rollout_log_prob,
        response_mask,
        rollout_is=config.rollout_is,
        rollout_is_threshold=config.rollout_is_threshold,
        rollout_is_batch_normalize=normalize,
        rollout_rs=config.rollout_rs,
        rollout_rs_threshold=_rs_threshold_spec(config),
        rollout_token_veto_threshold=config.rollout_token_veto_threshold,
    )
    weights = None if proto is None else proto.batch["rollout_is_weights"]
    return weights, kept, metrics


def compute_rollout_corr_metrics_from_logprobs(
    log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """:func:`compute_offpolicy_metrics` of the current policy against the rollout, prefixed ``rollout_corr/``: an
    actor calls it during the update to follow the gap as training moves away from the rollout policy."""
    metrics = compute_offpolicy_metrics(log_prob, rollout_log_prob, response_mask)
    return {f"rollout_corr/{key}": _scalar(value) for key, value in metrics.items()}


# ------------------------------------------------------------------------------------------- bypass mode
def _plain_config(config: Any) -> dict[str, Any]:
    if isinstance(config, BaseConfig):
        return config.to_dict()
    if isinstance(config, DictConfig):
        return cast(dict[str, Any], OmegaConf.to_container(config, resolve=True))
    if isinstance(config, Mapping):
        return dict(config)
    raise TypeError(f"rollout_corr_config must be a RolloutCorrectionConfig, DictConfig or dict, got {config!r}")


def bypass_policy_loss_settings(rollout_corr_config: Any) -> dict[str, Any]:
    """The ``actor.policy_loss`` fields bypass mode sets: the ``bypass_mode`` loss, which applies the rollout
    correction itself, and that correction as a plain dict. For a frozen ``PolicyLossConfig``:
    ``dataclasses.replace(policy_loss, **bypass_policy_loss_settings(corr))``."""
    if rollout_corr_config is None:
        raise ValueError("bypass mode needs the rollout correction config: the bypass_mode loss reads its settings")
    return {"loss_mode": "bypass_mode", "rollout_correction": _plain_config(rollout_corr_config)}


def apply_bypass_mode(
    batch: DataProto,
    rollout_corr_config: Any = None,
    policy_loss_config: Any = None,
) -> None:
    """Bypass mode: train on the rollout's log-probs, skipping the old log-prob pass. Sets
    ``old_log_probs := rollout_log_probs`` in ``batch`` and, when ``policy_loss_config`` is given (a DictConfig or
    dict, changed in place), routes it to the ``bypass_mode`` loss with ``rollout_corr_config`` as its
    ``rollout_correction``. A frozen ``PolicyLossConfig`` cannot be changed in place: use
    :func:`bypass_policy_loss_settings` with ``dataclasses.replace``."""
    if "rollout_log_probs" not in batch.batch.keys():
        raise ValueError(
            "algorithm.rollout_correction.bypass_mode=true needs rollout log-probs: "
            "set rollout.calculate_log_probs=true"
        )
    if policy_loss_config is not None:
        if not isinstance(policy_loss_config, MutableMapping):
            raise TypeError(
                f"apply_bypass_mode: cannot route {type(policy_loss_config).__name__} in place (it is frozen); pass "
                "the DictConfig (trainer.config.actor.policy_loss) or use dataclasses.replace(policy_loss, "
                "**bypass_policy_loss_settings(rollout_corr_config))"
            )
        settings = bypass_policy_loss_settings(rollout_corr_config)
        _route_in_place(policy_loss_config, settings)
    batch.batch["old_log_probs"] = batch.batch["rollout_log_probs"]


def _route_in_place(policy_loss_config: MutableMapping, settings: dict[str, Any]) -> None:
    current = as_config(policy_loss_config, PolicyLossConfig, "actor.policy_loss").loss_mode
    if current not in ("vanilla", "bypass_mode"):
        logger.warning(
            "algorithm.rollout_correction.bypass_mode=true replaces actor.policy_loss.loss_mode=%s with bypass_mode",
            current,
        )
    if isinstance(policy_loss_config, DictConfig):
        with open_dict(policy_loss_config):
            policy_loss_config.update(settings)
    else:
        policy_loss_config.update(settings)
