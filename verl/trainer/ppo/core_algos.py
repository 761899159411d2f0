"""Core PPO-family algorithms: the one import point recipes and workers use.

The pieces live in one module per concept and are re-exported here under verl's names:
advantage estimators (``advantage``), policy losses (``policy_loss``), loss aggregation,
value and entropy losses (``losses``), KL estimators and controllers (``kl``). This module
adds the DataProto-level glue: ``compute_response_mask`` and ``compute_advantage``.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from verl.trainer.ppo.advantage import (
    ADV_ESTIMATOR_REGISTRY,
    AdvantageEstimator,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_grpo_passk_outcome_advantage,
    compute_opo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    get_adv_estimator_fn,
    register_adv_est,
)
from verl.trainer.ppo.kl import (
    KL_PENALTY_TYPES,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    get_kl_controller,
    kl_penalty,
    kl_penalty_forward,
)
from verl.trainer.ppo.losses import LOSS_AGG_MODES, agg_loss, compute_entropy_loss, compute_value_loss
from verl.trainer.ppo.policy_loss import (
    POLICY_LOSS_REGISTRY,
    compute_policy_loss_cispo,
    compute_policy_loss_gpg,
    compute_policy_loss_gspo,
    compute_policy_loss_vanilla,
    get_policy_loss_fn,
    register_policy_loss,
)

__all__ = [
    "ADV_ESTIMATOR_REGISTRY",
    "AdvantageEstimator",
    "register_adv_est",
    "get_adv_estimator_fn",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_opo_outcome_advantage",
    "POLICY_LOSS_REGISTRY",
    "register_policy_loss",
    "get_policy_loss_fn",
    "compute_policy_loss_vanilla",
    "compute_policy_loss_gspo",
    "compute_policy_loss_gpg",
    "compute_policy_loss_cispo",
    "LOSS_AGG_MODES",
    "agg_loss",
    "compute_value_loss",
    "compute_entropy_loss",
    "KL_PENALTY_TYPES",
    "kl_penalty",
    "kl_penalty_forward",
    "FixedKLController",
    "AdaptiveKLController",
    "get_kl_controller",
    "apply_kl_penalty",
    "compute_response_mask",
    "compute_advantage",
]


def compute_response_mask(data: Any) -> torch.Tensor:
    """Response part of ``attention_mask``: its last ``responses.size(1)`` columns."""
    keys = set(data.batch.keys())
    for key in ("responses", "attention_mask"):
        if key not in keys:
            raise KeyError(
                "data.batch has no 'response_mask' and it cannot be derived from attention_mask/responses: "
                f"data.batch[{key!r}] is missing; present keys: {sorted(keys)}"
            )
    response_length = data.batch["responses"].shape[-1]
    return data.batch["attention_mask"][:, -response_length:]


def _call_with_accepted_kwargs(fn, kwargs: dict[str, Any]):
    """Call ``fn`` with the subset of ``kwargs`` it accepts, so user estimators need not take every input."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return fn(**kwargs)
    accepted = {p.name for p in params}
    return fn(**{k: v for k, v in kwargs.items() if k in accepted})


def compute_advantage(
    data: Any,
    adv_estimator: str | AdvantageEstimator,
    gamma: float = 1.0,
    lam: float = 1.0,
    num_repeat: int = 1,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> Any:
    """Run the registered estimator on a DataProto and store ``advantages`` and ``returns`` in its batch.

    Inputs come from ``data.batch`` (``token_level_rewards``; ``response_mask``, derived from
    ``attention_mask``/``responses`` and stored when absent; ``values`` for gae;
    ``reward_baselines`` for remax) and ``data.non_tensor_batch['uid']`` (prompt group ids).
    ``num_repeat`` is accepted for verl compatibility and unused: groups come from ``uid``.
    """
    del num_repeat
    fn = get_adv_estimator_fn(adv_estimator)
    keys = set(data.batch.keys())
    if "token_level_rewards" not in keys:
        raise KeyError(
            "compute_advantage needs data.batch['token_level_rewards'] (scores, minus the KL penalty when "
            f"algorithm.use_kl_in_reward); present keys: {sorted(keys)}"
        )
    if "response_mask" not in keys:
        data.batch["response_mask"] = compute_response_mask(data)
    inputs: dict[str, Any] = {
        "token_level_rewards": data.batch["token_level_rewards"],
        "response_mask": data.batch["response_mask"],
        "values": data.batch["values"] if "values" in keys else None,
        "reward_baselines": data.batch["reward_baselines"] if "reward_baselines" in keys else None,
        "index": data.non_tensor_batch.get("uid"),
        "gamma": gamma,
        "lam": lam,
        "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo,
        "config": config,
    }
    advantages, returns = _call_with_accepted_kwargs(fn, inputs)
    data.batch["advantages"] = advantages
    data.batch["returns"] = returns
    return data
