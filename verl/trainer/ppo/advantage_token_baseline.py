"""Optimal token baselines: a per-token, per-prompt-group baseline weighted by the path's score-norm energy.

For token t of a response, the baseline that minimises the policy-gradient variance is
``B_t = E[G_t * W_t] / E[W_t]`` over the responses to the same prompt, where ``G_t`` is the
reward-to-go and ``W_t = sum_{j<=t} (1 - 2 pi_j + sum_v pi_v^2)`` approximates the squared norm
of the score function accumulated up to t (``pi_j`` the probability of the sampled token,
``sum_v pi_v^2`` the actor's ``sum_pi_squared``). Responses with more "energy" so far get a
larger say in the baseline. With rollout importance weights rho, each step's term is scaled by
rho^2 (the baseline that minimises the error of the truncated-IS estimator).

``optimal_token_baseline`` aligns responses by token position; ``tir_optimal_token_baseline``
(tool-integrated reasoning) first drops the masked tokens (tool output between turns), so the
k-th generated token of every response is compared with the k-th of the others.

``handle_zero_tail``: past the second-longest response of a group, the longest one is alone, and
a baseline from itself alone would cancel its own signal; its baseline there is 0 instead.
Singleton groups get advantage 0, as in every group estimator here (see
:mod:`verl.trainer.ppo.advantage`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from verl.trainer.ppo.advantage import AdvantageEstimator, _check_shapes, _group_ids, register_adv_est

__all__ = ["compute_optimal_token_baseline_advantage", "compute_multi_turn_optimal_token_baseline_advantage"]


def _check_inputs(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    old_log_probs: torch.Tensor | None,
    sum_pi_squared: torch.Tensor | None,
) -> None:
    _check_shapes(name, token_level_rewards, response_mask)
    if old_log_probs is None or sum_pi_squared is None:
        raise ValueError(
            f"{name} needs `old_log_probs` and `sum_pi_squared` (data.batch['sum_pi_squared'], computed by the actor "
            "when actor.calculate_sum_pi_squared=True)"
        )
    for key, value in (("old_log_probs", old_log_probs), ("sum_pi_squared", sum_pi_squared)):
        if value.shape != token_level_rewards.shape:
            raise ValueError(
                f"{name}: {key} shape {tuple(value.shape)} != token_level_rewards shape "
                f"{tuple(token_level_rewards.shape)}"
            )


def _returns_and_energy(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reward-to-go G_t and the cumulative energy W_t, both [N, R]."""
    mask = response_mask.to(token_level_rewards.dtype)
    returns = (token_level_rewards * mask).flip(-1).cumsum(-1).flip(-1)
    step = 1.0 - 2.0 * torch.exp(old_log_probs) + sum_pi_squared
    if rollout_is_weights is not None:
        step = step * rollout_is_weights.detach().square()
    return returns, (step * mask).cumsum(-1).to(returns.dtype)


def _group_token_baseline(
    returns: torch.Tensor,
    energy: torch.Tensor,
    mask: torch.Tensor,
    ids: torch.Tensor,
    slots: torch.Tensor,
    handle_zero_tail: bool,
    epsilon: float,
) -> torch.Tensor:
    """Per-token baseline [N, R]: responses of a group share one baseline per slot (their aligned position)."""
    valid = mask > 0
    lengths = valid.sum(-1)
    n_groups = int(ids.max().item()) + 1 if ids.numel() else 0
    width = int(slots.max().item()) + 1 if bool(valid.any()) else 1
    group_of_token = ids.unsqueeze(-1).expand_as(slots)
    members = torch.zeros(n_groups, dtype=torch.long, device=ids.device).index_add_(
        0, ids, (lengths > 0).to(torch.long)
    )
    numerator = returns.new_zeros(n_groups, width)
    denominator = returns.new_zeros(n_groups, width)
    where = (group_of_token[valid], slots[valid])
    numerator.index_put_(where, (returns * energy)[valid], accumulate=True)
    denominator.index_put_(where, energy[valid], accumulate=True)
    baseline = torch.zeros_like(returns)
    baseline[valid] = numerator[where] / (denominator[where] + epsilon)
    if handle_zero_tail:
        for group in torch.nonzero(members >= 2).flatten().tolist():
            rows = torch.nonzero((ids == group) & (lengths > 0)).flatten()
            top = torch.topk(lengths[rows], k=2)
            longest, second = int(top.values[0]), int(top.values[1])
            if longest > second:
                row = int(rows[top.indices[0]])
                baseline[row] = torch.where(slots[row] >= second, torch.zeros_like(baseline[row]), baseline[row])
    alone = members[ids] <= 1
    baseline[alone] = returns[alone]  # a lone response has no group to compare with: advantage 0
    return baseline


@register_adv_est(AdvantageEstimator.OPTIMAL_TOKEN_BASELINE)
@torch.no_grad()
def compute_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    old_log_probs: torch.Tensor | None = None,
    sum_pi_squared: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantage G_t - B_t with the optimal token baseline over responses aligned by position; returns G_t."""
    name = "optimal_token_baseline"
    _check_inputs(name, token_level_rewards, response_mask, old_log_probs, sum_pi_squared)
    returns, energy = _returns_and_energy(
        token_level_rewards, response_mask, old_log_probs, sum_pi_squared, rollout_is_weights
    )
    ids = _group_ids(name, index, returns.shape[0], returns.device)
    slots = torch.arange(returns.shape[1], device=returns.device).expand_as(returns)
    baseline = _group_token_baseline(returns, energy, response_mask, ids, slots, handle_zero_tail, epsilon)
    return (returns - baseline) * response_mask.to(returns.dtype), returns


@register_adv_est(AdvantageEstimator.TIR_OPTIMAL_TOKEN_BASELINE)
@torch.no_grad()
def compute_multi_turn_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    old_log_probs: torch.Tensor | None = None,
    sum_pi_squared: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimal token baseline over generated tokens only: masked tokens (tool output) are skipped when aligning."""
    name = "tir_optimal_token_baseline"
    _check_inputs(name, token_level_rewards, response_mask, old_log_probs, sum_pi_squared)
    returns, energy = _returns_and_energy(
        token_level_rewards, response_mask, old_log_probs, sum_pi_squared, rollout_is_weights
    )
    ids = _group_ids(name, index, returns.shape[0], returns.device)
    valid = (response_mask > 0).to(torch.long)
    slots = (valid.cumsum(-1) - 1).clamp(min=0)  # k-th generated token of its response
    baseline = _group_token_baseline(returns, energy, response_mask, ids, slots, handle_zero_tail, epsilon)
    return (returns - baseline) * response_mask.to(returns.dtype), returns
