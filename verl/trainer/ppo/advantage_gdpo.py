"""GDPO (group reward-decoupled normalisation): one GRPO normalisation per reward component, then a weighted sum.

Summing reward components before normalising lets the one with the largest spread (e.g. correctness)
drown the others (e.g. format). GDPO normalises each component within its prompt group first, adds
them with ``algorithm.gdpo_reward_weights``, and whitens the sum over the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from verl.trainer.ppo._util import as_algo_config
from verl.trainer.ppo.advantage import (
    AdvantageEstimator,
    _check_shapes,
    compute_grpo_outcome_advantage,
    register_adv_est,
)
from verl.utils.torch_functional import masked_whiten

__all__ = ["compute_gdpo_outcome_advantage"]


def _gdpo_component_rewards(
    keys: Sequence[str], response_mask: torch.Tensor, non_tensor_batch: Any
) -> list[torch.Tensor]:
    """One [N, R] reward tensor per ``algorithm.gdpo_reward_keys`` entry, each score on its row's last token."""
    positions = torch.arange(response_mask.shape[-1], device=response_mask.device)
    last = torch.where(response_mask > 0, positions, positions.new_full((), -1)).amax(dim=-1)
    last = torch.where(last < 0, positions[-1], last)
    rows = torch.arange(response_mask.shape[0], device=response_mask.device)
    components = []
    for key in keys:
        if key not in non_tensor_batch:
            raise KeyError(
                f"gdpo: reward component {key!r} (algorithm.gdpo_reward_keys) is not in data.non_tensor_batch; "
                f"present: {sorted(non_tensor_batch)}. The reward function must return it in its info dict."
            )
        values = torch.as_tensor(np.asarray(non_tensor_batch[key], dtype=np.float32), device=response_mask.device)
        dense = torch.zeros(response_mask.shape, dtype=torch.float32, device=response_mask.device)
        dense[rows, last] = values
        components.append(dense)
    return components


@register_adv_est(AdvantageEstimator.GDPO)
@torch.no_grad()
def compute_gdpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    non_tensor_batch: Any = None,
    batch: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GDPO: GRPO-normalise each reward component within its group, add them (weighted), whiten over the batch.

    Normalising components separately stops a large-scale reward (e.g. correctness) from
    drowning a small one (e.g. format). Components are the per-sample values of
    ``algorithm.gdpo_reward_keys`` in ``non_tensor_batch`` (weights ``algorithm.gdpo_reward_weights``,
    default 1 each); without a config and batch, ``token_level_rewards`` is the single component.
    ``batch`` is accepted for verl compatibility (it reads the response positions from it).
    """
    del batch
    _check_shapes("gdpo", token_level_rewards, response_mask)
    components = [token_level_rewards]
    weights: list[float] | None = None
    if config is not None and non_tensor_batch is not None:
        config = as_algo_config(config)
        keys = config.gdpo_reward_keys
        if not keys:
            raise ValueError(
                "gdpo needs algorithm.gdpo_reward_keys: the reward components (keys of the reward function's info "
                "dict, e.g. ['format_reward', 'accuracy_reward']) to normalise separately"
            )
        components = _gdpo_component_rewards(list(keys), response_mask, non_tensor_batch)
        configured = config.gdpo_reward_weights
        weights = None if configured is None else [float(w) for w in configured]
    if weights is None:
        weights = [1.0] * len(components)
    if len(weights) != len(components):
        raise ValueError(f"gdpo: {len(weights)} algorithm.gdpo_reward_weights for {len(components)} reward keys")
    mask = response_mask.to(token_level_rewards.dtype)
    total = torch.zeros_like(token_level_rewards)
    for weight, rewards in zip(weights, components):
        normalised, _ = compute_grpo_outcome_advantage(
            rewards.to(token_level_rewards.dtype),
            response_mask,
            index=index,
            epsilon=epsilon,
            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
            config=config,
        )
        total = total + weight * normalised
    advantages = masked_whiten(total, mask) * mask
    return advantages, advantages
