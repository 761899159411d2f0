"""How far the rollout engine's token probabilities are from the trainer's (``calculate_debug_metrics``).

The rollout engine and the training model compute log-probs of the same tokens with different kernels (and
possibly stale weights); a large gap makes the PPO ratio meaningless. These metrics compare the two per token,
over the response tokens only.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

__all__ = [
    "calculate_debug_metrics",
    "calculate_log_prob_diff",
    "calculate_token_list_diff",
    "pearson_correlation_coefficient",
]

logger = logging.getLogger(__name__)

_PREFIX = "training/"


def calculate_token_list_diff(tensor1: torch.Tensor, tensor2: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per row, how many masked positions hold different tokens in ``tensor1`` and ``tensor2``. Shapes must agree
    (a mismatch is logged and every position counts as different)."""
    if tensor1.numel() == 0 or tensor2.numel() == 0:
        return torch.zeros(tensor1.shape[0], dtype=torch.long, device=tensor1.device)
    if not (tensor1.shape == tensor2.shape == mask.shape):
        logger.warning(
            "calculate_token_list_diff: shapes differ: %s, %s, mask %s",
            tuple(tensor1.shape),
            tuple(tensor2.shape),
            tuple(mask.shape),
        )
        return torch.ones_like(tensor1)
    differs = (tensor1 != tensor2.to(tensor1.device)) & (mask.to(tensor1.device) == 1)
    return differs.sum(dim=1)


def pearson_correlation_coefficient(tensor1: torch.Tensor, tensor2: torch.Tensor, mask: torch.Tensor) -> float:
    """Pearson correlation of the masked entries of two tensors (0 when shapes differ)."""
    if not (tensor1.shape == tensor2.shape == mask.shape):
        return 0.0
    pair = torch.stack([torch.masked_select(tensor1, mask), torch.masked_select(tensor2, mask)]).float()
    return torch.corrcoef(pair)[0, 1].item()


def calculate_log_prob_diff(log_probs1: torch.Tensor, log_probs2: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``|a - b|`` at the masked positions, flattened."""
    return torch.masked_select((log_probs1 - log_probs2).abs(), mask)


def _response_mask(data: Any, like: torch.Tensor) -> torch.Tensor:
    batch = data.batch
    if "response_mask" in batch.keys():
        mask = batch["response_mask"]
    elif "attention_mask" in batch.keys():
        mask = batch["attention_mask"]
    else:
        logger.warning("calculate_debug_metrics: no response_mask/attention_mask in the batch; using every token")
        mask = torch.ones_like(like)
    return mask[:, -batch["responses"].size(1) :].bool()


def calculate_debug_metrics(data: Any) -> dict[str, float]:
    """Rollout-vs-trainer probability agreement of a batch holding ``rollout_log_probs``, ``old_log_probs`` and
    ``responses`` (a :class:`~verl.protocol.DataProto`).

    Returns ``training/rollout_probs_diff_{valid,max,mean,std}`` (absolute difference of the token
    probabilities) and ``training/rollout_actor_probs_pearson_corr``; ``valid`` is 0 and the rest NaN when the
    batch has no response token.
    """
    rollout = data.batch["rollout_log_probs"]
    actor = data.batch["old_log_probs"]
    mask = _response_mask(data, rollout)
    if not mask.any():
        logger.warning("calculate_debug_metrics: the batch has no response token")
        nan = float("nan")
        return {
            f"{_PREFIX}rollout_probs_diff_valid": 0,
            f"{_PREFIX}rollout_probs_diff_max": nan,
            f"{_PREFIX}rollout_probs_diff_mean": nan,
            f"{_PREFIX}rollout_probs_diff_std": nan,
            f"{_PREFIX}rollout_actor_probs_pearson_corr": nan,
        }
    actor_probs, rollout_probs = actor.exp(), rollout.exp()
    diff = calculate_log_prob_diff(actor_probs, rollout_probs, mask)
    return {
        f"{_PREFIX}rollout_probs_diff_valid": 1,
        f"{_PREFIX}rollout_probs_diff_max": diff.max().item(),
        f"{_PREFIX}rollout_probs_diff_mean": diff.mean().item(),
        f"{_PREFIX}rollout_probs_diff_std": diff.std().item(),
        f"{_PREFIX}rollout_actor_probs_pearson_corr": pearson_correlation_coefficient(actor_probs, rollout_probs, mask),
    }
