"""Loss aggregation and the non-policy losses (value, entropy).

``agg_loss`` decides how per-token losses become one scalar, which sets how much each
sequence and each token weighs in the gradient:

- ``token-mean``: every unmasked token in the batch weighs the same (long answers weigh more).
- ``token-sum``: the plain sum over unmasked tokens (no normalisation at all).
- ``seq-mean-token-sum``: sum over a sequence's tokens, then mean over sequences.
- ``seq-mean-token-mean``: mean over a sequence's tokens, then mean over sequences (GRPO paper).
- ``seq-mean-token-sum-norm``: token sum divided by a constant (``loss_scale_factor``, default
  the padded response length), then mean over sequences (Dr.GRPO: no length bias).

Sequence means skip sequences whose mask is all zero, so padding rows do not dilute the loss.

Global normalisation: by default the token count (``token-mean``) and the sequence count (``seq-mean-*``) are
those of the micro-batch at hand, so summing the losses of k micro-batches gives k times the mean. Passing the
counts of the whole mini-batch (``batch_num_tokens``, ``global_batch_size``) makes each micro-batch loss its
share of the mini-batch loss, so the accumulated gradient does not depend on how the mini-batch was split.
With data parallelism the counts are global and the loss is multiplied by ``dp_size``, because the gradient
all-reduce averages over ranks.
"""

from __future__ import annotations

from typing import TypeAlias

import torch

from verl.utils.torch_functional import entropy_from_logits, masked_mean, masked_sum

__all__ = ["LOSS_AGG_MODES", "agg_loss", "compute_value_loss", "compute_entropy_loss"]

LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)

Count: TypeAlias = int | float | torch.Tensor


def _denominator(given: Count | None, local: torch.Tensor, dp_size: int, what: str, mode: str) -> torch.Tensor | Count:
    """The global count when given, else the local one (which only makes sense without data parallelism)."""
    if given is not None:
        return given
    if dp_size > 1:
        raise ValueError(
            f"agg_loss({mode!r}) with dp_size={dp_size} needs the global {what}: the local count "
            "would normalise each rank by its own shard"
        )
    # An all-masked micro-batch has a zero sum; dividing it by 1 keeps the loss 0 instead of nan.
    return local.clamp(min=1.0)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    dp_size: int = 1,
    batch_num_tokens: Count | None = None,
    global_batch_size: Count | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate a [N, R] per-token loss into a scalar according to ``loss_agg_mode``.

    ``batch_num_tokens`` (token-mean) and ``global_batch_size`` (seq-mean modes) are the counts of the whole
    mini-batch over all ``dp_size`` ranks; without them the micro-batch's own counts are used (dp_size 1 only).
    """
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"Unknown loss_agg_mode {loss_agg_mode!r}; valid modes: {list(LOSS_AGG_MODES)}")
    if loss_mat.shape != loss_mask.shape:
        raise ValueError(
            f"agg_loss: loss_mat shape {tuple(loss_mat.shape)} != loss_mask shape {tuple(loss_mask.shape)}"
        )
    if dp_size < 1:
        raise ValueError(f"agg_loss: dp_size must be >= 1, got {dp_size}")
    mask = loss_mask.to(loss_mat.dtype)
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, mask) * dp_size
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None and dp_size == 1:
            return masked_mean(loss_mat, mask)
        tokens = _denominator(batch_num_tokens, mask.sum(), dp_size, "batch_num_tokens", loss_agg_mode)
        return masked_sum(loss_mat, mask) / tokens * dp_size

    token_sum = masked_sum(loss_mat, mask, axis=-1)
    token_count = mask.sum(dim=-1)
    if loss_agg_mode == "seq-mean-token-sum":
        per_seq = token_sum
    elif loss_agg_mode == "seq-mean-token-mean":
        per_seq = token_sum / token_count.clamp(min=1e-8)
    else:  # seq-mean-token-sum-norm
        scale = float(loss_mask.shape[-1]) if loss_scale_factor is None else float(loss_scale_factor)
        if scale <= 0:
            raise ValueError(f"agg_loss: loss_scale_factor must be > 0 for seq-mean-token-sum-norm, got {scale}")
        per_seq = token_sum / scale
    has_tokens = (token_count > 0).to(loss_mat.dtype)
    sequences = _denominator(global_batch_size, has_tokens.sum(), dp_size, "global_batch_size", loss_agg_mode)
    return (per_seq * has_tokens).sum() / sequences * dp_size


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    dp_size: int = 1,
    batch_num_tokens: Count | None = None,
    global_batch_size: Count | None = None,
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss: 0.5 * agg(max((v - R)^2, (clip(v, old +- c) - R)^2)).

    Clipping the new prediction to a band around the rollout-time value keeps one critic
    update from moving far; the pessimistic max keeps the loss an upper bound. Returns the
    loss and the fraction of tokens where the clipped branch was the larger one. The
    normalisation arguments go to :func:`agg_loss` (global counts make micro-batch losses add
    up to the mini-batch loss); they do not change the clip fraction.
    """
    clipped = values + torch.clamp(vpreds - values, -cliprange_value, cliprange_value)
    unclipped_loss = (vpreds - returns) ** 2
    clipped_loss = (clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(
        torch.maximum(unclipped_loss, clipped_loss),
        response_mask,
        loss_agg_mode,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
        loss_scale_factor=loss_scale_factor,
    )
    vf_clipfrac = masked_mean(torch.gt(clipped_loss, unclipped_loss).to(vpreds.dtype), response_mask).detach()
    return vf_loss, vf_clipfrac


def compute_entropy_loss(
    logits: torch.Tensor, response_mask: torch.Tensor, loss_agg_mode: str = "token-mean"
) -> torch.Tensor:
    """Aggregated entropy of the policy over response tokens (logits [N, R, V]); the actor subtracts coef * this."""
    return agg_loss(entropy_from_logits(logits), response_mask, loss_agg_mode)
