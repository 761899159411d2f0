"""Loss aggregation and the non-policy losses (value, entropy).

``agg_loss`` decides how per-token losses become one scalar, which sets how much each
sequence and each token weighs in the gradient:

- ``token-mean``: every unmasked token in the batch weighs the same (long answers weigh more).
- ``seq-mean-token-sum``: sum over a sequence's tokens, then mean over sequences.
- ``seq-mean-token-mean``: mean over a sequence's tokens, then mean over sequences (GRPO paper).
- ``seq-mean-token-sum-norm``: token sum divided by a constant (``loss_scale_factor``, default
  the padded response length), then mean over sequences (Dr.GRPO: no length bias).

Sequence means skip sequences whose mask is all zero, so padding rows do not dilute the loss.
"""

from __future__ import annotations

import torch

from verl.utils.torch_functional import entropy_from_logits, masked_mean, masked_sum

__all__ = ["LOSS_AGG_MODES", "agg_loss", "compute_value_loss", "compute_entropy_loss"]

LOSS_AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate a [N, R] per-token loss into a scalar according to ``loss_agg_mode``."""
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"Unknown loss_agg_mode {loss_agg_mode!r}; valid modes: {list(LOSS_AGG_MODES)}")
    if loss_mat.shape != loss_mask.shape:
        raise ValueError(
            f"agg_loss: loss_mat shape {tuple(loss_mat.shape)} != loss_mask shape {tuple(loss_mask.shape)}"
        )
    mask = loss_mask.to(loss_mat.dtype)
    if loss_agg_mode == "token-mean":
        return masked_mean(loss_mat, mask)

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
    return (per_seq * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss: 0.5 * agg(max((v - R)^2, (clip(v, old +- c) - R)^2)).

    Clipping the new prediction to a band around the rollout-time value keeps one critic
    update from moving far; the pessimistic max keeps the loss an upper bound. Returns the
    loss and the fraction of tokens where the clipped branch was the larger one.
    """
    clipped = values + torch.clamp(vpreds - values, -cliprange_value, cliprange_value)
    unclipped_loss = (vpreds - returns) ** 2
    clipped_loss = (clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(torch.maximum(unclipped_loss, clipped_loss), response_mask, loss_agg_mode)
    vf_clipfrac = masked_mean(torch.gt(clipped_loss, unclipped_loss).to(vpreds.dtype), response_mask).detach()
    return vf_loss, vf_clipfrac


def compute_entropy_loss(
    logits: torch.Tensor, response_mask: torch.Tensor, loss_agg_mode: str = "token-mean"
) -> torch.Tensor:
    """Aggregated entropy of the policy over response tokens (logits [N, R, V]); the actor subtracts coef * this."""
    return agg_loss(entropy_from_logits(logits), response_mask, loss_agg_mode)
