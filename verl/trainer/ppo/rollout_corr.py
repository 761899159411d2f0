"""Importance-sampling correction for samples drawn by a rollout policy that differs from the trainer's.

The rollout engine's log-probs (`rollout_log_probs`) are the behaviour policy; the trainer's recomputed
`old_log_probs` are the proximal policy. Their ratio, truncated at `rollout_is_threshold`, becomes the
`rollout_is_weights` that the policy loss multiplies in. Mismatch metrics are reported whenever both
log-probs are present, so a run shows how far rollout and trainer drift apart even without correction.

Rejection comes before the weights: `rollout_rs` drops tokens (``token``) or whole responses (``sequence``: the
product of the token ratios; ``geometric``: their geometric mean) whose ratio leaves
`[rollout_rs_threshold_lower, rollout_rs_threshold]`, and `rollout_token_veto_threshold` drops every response with a
token whose ratio is below it. Dropped tokens leave `response_mask`, so they get no advantage and no loss.
`rollout_is_batch_normalize` then rescales the weights to a mean of 1 over the batch (over tokens at token level,
over responses at sequence level).

verl's spellings (an IcePop ``"lower_upper"`` `rollout_is_threshold`, verl's `rollout_rs` options such as
``token_k1`` or ``seq_mean_k3``, comma lists of options) are applied as verl's trainer applies them, by
:func:`verl.trainer.ppo.rollout_corr_helper.compute_rollout_correction_and_add_to_batch` (see
:func:`uses_verl_options`): weights over the incoming mask, each option's rejection, verl's ``rollout_corr/*`` metrics.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from verl.protocol import DataProto
from verl.trainer.config.algo_config import RolloutCorrectionConfig, parse_is_threshold, parse_rs_options
from verl.trainer.ppo._util import as_rollout_correction_config
from verl.utils.torch_functional import masked_mean

IS_LEVELS = ("token", "sequence")
RS_LEVELS = ("token", "sequence", "geometric")
LOG_RATIO_CLAMP = 20.0


def is_weights_from_log_ratio(
    log_ratio: torch.Tensor, response_mask: torch.Tensor, level: str, threshold: float = math.inf
) -> torch.Tensor:
    """Importance weights exp(log_ratio) per token or per response (exp of the masked sum), truncated at
    ``threshold`` and zero outside the mask; shared by this module and the ``rollout_corr_helper`` API."""
    if level not in IS_LEVELS:
        raise ValueError(f"algorithm.rollout_correction.rollout_is={level!r}; expected one of {list(IS_LEVELS)}")
    mask = response_mask.to(log_ratio.dtype)
    log_ratio = log_ratio * mask
    if level == "sequence":
        log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(mask)
    weights = torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).clamp(max=float(threshold))
    return (weights * mask).detach()


def compute_rollout_is_weights(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    level: str,
    threshold: float,
) -> torch.Tensor:
    """Truncated importance weights pi_old / pi_rollout at token or sequence level, zero outside the mask."""
    return is_weights_from_log_ratio(old_log_prob - rollout_log_prob, response_mask, level, threshold)


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


def rejection_mask(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    level: str | None,
    upper: float | None,
    lower: float | None,
    veto: float | None = None,
) -> torch.Tensor:
    """``response_mask`` without the tokens that rejection sampling (``level``) and the token veto drop."""
    return rejection_mask_from_log_ratio(old_log_prob - rollout_log_prob, response_mask, level, upper, lower, veto)


def rejection_mask_from_log_ratio(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    level: str | None,
    upper: float | None,
    lower: float | None,
    veto: float | None = None,
) -> torch.Tensor:
    """:func:`rejection_mask` on a given log ratio, so callers can band another ratio (e.g. its inverse)."""
    if level is not None and level not in RS_LEVELS:
        raise ValueError(f"algorithm.rollout_correction.rollout_rs={level!r}; expected one of {list(RS_LEVELS)}")
    mask = response_mask.to(log_ratio.dtype)
    valid = mask > 0
    log_ratio = (log_ratio * mask).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    keep = valid.clone()
    if level is not None:
        if level == "token":
            ratio = torch.exp(log_ratio)
        else:
            per_row = log_ratio.sum(-1, keepdim=True)
            if level == "geometric":
                per_row = per_row / mask.sum(-1, keepdim=True).clamp(min=1)
            ratio = torch.exp(per_row.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).expand_as(log_ratio)
        if upper is not None:
            keep &= ratio <= upper
        if lower is not None:
            keep &= ratio >= lower
    if veto is not None:
        vetoed = (valid & (torch.exp(log_ratio) < veto)).any(-1, keepdim=True)
        keep &= ~vetoed
    return keep.to(response_mask.dtype)


def _weight_metrics(weights: torch.Tensor, response_mask: torch.Tensor, threshold: float) -> dict[str, float]:
    return {
        "rollout_corr/is_truncated_frac": masked_mean((weights >= threshold).float(), response_mask).item(),
        "rollout_corr/is_weight_mean": masked_mean(weights, response_mask).item(),
    }


def batch_weight_sum_count(weights: torch.Tensor, mask: torch.Tensor, level: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum, count) whose ratio is the batch mean weight: over tokens at token level, over non-empty responses at
    sequence level. Kept as a pair so a caller can add them up across ranks before dividing."""
    if level == "sequence":
        rows = mask.sum(-1) > 0
        return weights.max(-1).values[rows].sum(), rows.sum().to(weights.dtype)
    return (weights * mask).sum(), mask.sum().to(weights.dtype)


def _normalized(weights: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    total, count = batch_weight_sum_count(weights, mask, level)
    mean = total / count if count > 0 else weights.new_ones(())
    return weights / mean.clamp(min=1e-8)


def uses_verl_options(config: RolloutCorrectionConfig) -> bool:
    """True when ``config`` says something only verl's ``rollout_corr_helper`` applies: an IcePop
    ``"lower_upper"`` ``rollout_is_threshold`` (with ``rollout_is`` set), or a ``rollout_rs`` naming one of verl's
    options or more than one option. The trainer then applies the whole correction through the helper."""
    if config.rollout_is is not None and parse_is_threshold(config.rollout_is_threshold)[1] is not None:
        return True
    if config.rollout_rs is None:
        return False
    options = parse_rs_options(config.rollout_rs)
    return len(options) > 1 or options[0] not in RS_LEVELS


def _apply_verl_options(batch: DataProto, config: RolloutCorrectionConfig, metrics: dict[str, float]) -> None:
    """verl's trainer step (``compute_rollout_correction_and_add_to_batch``) on ``batch``; its metrics into
    ``metrics``. In bypass mode verl leaves this to the update's loss; so does this."""
    from verl.trainer.ppo.rollout_corr_helper import correction_from_config  # the helper imports this module

    if config.bypass_mode:
        return
    response_mask = batch.batch["response_mask"]
    if not response_mask.any():  # nothing to weight or reject (the helper refuses an empty mask)
        if config.rollout_is is not None:
            batch.batch["rollout_is_weights"] = torch.zeros_like(batch.batch["old_log_probs"])
        return
    weights, kept, helper_metrics = correction_from_config(
        batch.batch["old_log_probs"], batch.batch["rollout_log_probs"], response_mask, config
    )
    batch.batch["response_mask"] = kept
    if weights is not None:
        batch.batch["rollout_is_weights"] = weights
    metrics.update(helper_metrics)


def apply_rollout_correction(batch: DataProto, config: Any) -> dict[str, float]:
    """Reject tokens or responses (`rollout_rs`, the token veto) from `response_mask` and add `rollout_is_weights`
    when configured; return mismatch, rejection and weight metrics. verl's spellings go through
    ``rollout_corr_helper`` (:func:`uses_verl_options`), whose metrics are verl's."""
    keys = batch.batch.keys()
    if "rollout_log_probs" not in keys or "old_log_probs" not in keys:
        return {}
    response_mask = batch.batch["response_mask"]
    old_log_prob, rollout_log_prob = batch.batch["old_log_probs"], batch.batch["rollout_log_probs"]
    metrics = mismatch_metrics(old_log_prob, rollout_log_prob, response_mask)
    config = as_rollout_correction_config(config)
    if uses_verl_options(config):
        _apply_verl_options(batch, config, metrics)
        return metrics
    rs_level, veto = config.rollout_rs, config.rollout_token_veto_threshold
    if rs_level or veto is not None:
        upper, lower = config.rollout_rs_threshold, config.rollout_rs_threshold_lower
        kept = rejection_mask(
            old_log_prob,
            rollout_log_prob,
            response_mask,
            rs_level or None,
            None if upper is None else float(upper),
            None if lower is None else float(lower),
            None if veto is None else float(veto),
        )
        valid_tokens = response_mask.sum().clamp(min=1)
        valid_rows = (response_mask.sum(-1) > 0).sum().clamp(min=1)
        metrics["rollout_corr/rs_rejected_token_frac"] = (1 - kept.sum() / valid_tokens).item()
        dropped_rows = (response_mask.sum(-1) > 0) & (kept.sum(-1) == 0)
        metrics["rollout_corr/rs_rejected_seq_frac"] = (dropped_rows.sum() / valid_rows).item()
        response_mask = kept
        batch.batch["response_mask"] = kept
    level = config.rollout_is
    if level:
        threshold = parse_is_threshold(config.rollout_is_threshold)[0]
        weights = compute_rollout_is_weights(old_log_prob, rollout_log_prob, response_mask, str(level), threshold)
        metrics.update(_weight_metrics(weights, response_mask, threshold))
        if config.rollout_is_batch_normalize:
            weights = _normalized(weights, response_mask, str(level))
            metrics["rollout_corr/is_weight_mean"] = masked_mean(weights, response_mask).item()
        batch.batch["rollout_is_weights"] = weights
    return metrics


# meta_info key of a batch whose on-policy update applies the correction itself (no separate old log-prob pass)
IN_UPDATE_KEY = "rollout_correction_in_update"


def in_update_spec(config: Any) -> dict[str, Any] | None:
    """What an on-policy update needs to apply ``config`` from its own forward pass, or None when the correction
    looks at the whole batch before the update (rejection, the token veto, batch normalisation), uses verl's
    spellings (applied by a separate pass, as verl's trainer does) or bypasses the trainer's log-probs altogether."""
    config = as_rollout_correction_config(config)
    if config.rollout_rs or config.rollout_token_veto_threshold is not None:
        return None
    if config.rollout_is_batch_normalize or config.bypass_mode or uses_verl_options(config):
        return None
    level = config.rollout_is
    return {
        "rollout_is": None if level is None else str(level),
        "rollout_is_threshold": parse_is_threshold(config.rollout_is_threshold)[0],
    }


def in_update_weights(
    log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor, spec: dict[str, Any]
) -> torch.Tensor | None:
    """The truncated weights of one micro-batch from the update's own (detached) log-probs; None without
    ``rollout_is``. On an on-policy update they equal what a separate pass would have given."""
    if not spec.get("rollout_is"):
        return None
    return compute_rollout_is_weights(
        log_prob.detach(), rollout_log_prob, response_mask, spec["rollout_is"], spec["rollout_is_threshold"]
    )


def in_update_metrics(
    log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor, spec: dict[str, Any]
) -> dict[str, float]:
    """The mismatch and weight metrics :func:`apply_rollout_correction` reports, over the rows an update saw."""
    metrics = mismatch_metrics(log_prob, rollout_log_prob, response_mask)
    weights = in_update_weights(log_prob, rollout_log_prob, response_mask, spec)
    if weights is not None:
        metrics.update(_weight_metrics(weights, response_mask, spec["rollout_is_threshold"]))
    return metrics
