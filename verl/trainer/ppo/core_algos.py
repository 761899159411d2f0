"""Core PPO-family algorithms: the one import point recipes and workers use.

The pieces live in one module per concept and are re-exported here under verl's names:
advantage estimators (``advantage``, ``advantage_token_baseline``, ``advantage_gdpo``), policy losses
(``policy_loss``, ``policy_loss_variants``, ``policy_loss_cov``, ``policy_loss_bypass``), loss
aggregation, value and entropy losses (``losses``), KL estimators and controllers (``kl``) and
PF-PPO resampling (``pf_ppo``). This module adds the DataProto-level glue:
``compute_response_mask`` and ``compute_advantage``.

``register_adv_est`` / ``get_adv_estimator_fn`` and ``register_policy_loss`` / ``get_policy_loss_fn``
work on this module's ``ADV_ESTIMATOR_REGISTRY`` / ``POLICY_LOSS_REGISTRY`` as they are when called
(the same dicts the estimator and loss modules fill), so code that swaps those attributes, as verl's
own tests do, sees its own registry.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from enum import Enum
from typing import Any

import torch

from verl.base_config import ConfigError
from verl.trainer.ppo import advantage as _advantage
from verl.trainer.ppo import policy_loss as _policy_loss
from verl.trainer.ppo._util import as_algo_config
from verl.trainer.ppo.advantage import (
    ADV_ESTIMATOR_REGISTRY,
    AdvantageEstimator,
    compute_gae_advantage_return,
    compute_gpg_outcome_advantage,
    compute_grpo_outcome_advantage,
    compute_grpo_passk_outcome_advantage,
    compute_grpo_vectorized_outcome_advantage,
    compute_opo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    compute_rloo_vectorized_outcome_advantage,
)
from verl.trainer.ppo.advantage_gdpo import compute_gdpo_outcome_advantage
from verl.trainer.ppo.advantage_token_baseline import (
    compute_multi_turn_optimal_token_baseline_advantage,
    compute_optimal_token_baseline_advantage,
)
from verl.trainer.ppo.kl import (
    KL_PENALTY_TYPES,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    compute_rewards,
    get_kl_controller,
    kl_penalty,
    kl_penalty_forward,
)
from verl.trainer.ppo.losses import LOSS_AGG_MODES, agg_loss, compute_entropy_loss, compute_value_loss
from verl.trainer.ppo.pf_ppo import compute_pf_ppo_reweight_data
from verl.trainer.ppo.policy_loss import (
    POLICY_LOSS_REGISTRY,
    PolicyLossFn,
    compute_policy_loss,
    compute_policy_loss_cispo,
    compute_policy_loss_gpg,
    compute_policy_loss_gspo,
    compute_policy_loss_vanilla,
)
from verl.trainer.ppo.policy_loss_bypass import compute_policy_loss_bypass_mode, compute_policy_loss_reinforce
from verl.trainer.ppo.policy_loss_cov import compute_policy_loss_clip_cov, compute_policy_loss_kl_cov
from verl.trainer.ppo.policy_loss_variants import (
    compute_policy_loss_dppo_kl,
    compute_policy_loss_dppo_tv,
    compute_policy_loss_dro,
    compute_policy_loss_geo_mean,
    compute_policy_loss_sapo,
)

__all__ = [
    "ADV_ESTIMATOR_REGISTRY",
    "AdvantageEstimator",
    "register_adv_est",
    "get_adv_estimator_fn",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_gdpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_opo_outcome_advantage",
    "compute_gpg_outcome_advantage",
    "compute_optimal_token_baseline_advantage",
    "compute_multi_turn_optimal_token_baseline_advantage",
    "POLICY_LOSS_REGISTRY",
    "PolicyLossFn",
    "register_policy_loss",
    "get_policy_loss_fn",
    "compute_policy_loss",
    "compute_policy_loss_vanilla",
    "compute_policy_loss_gspo",
    "compute_policy_loss_gpg",
    "compute_policy_loss_cispo",
    "compute_policy_loss_sapo",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_dro",
    "compute_policy_loss_dppo_tv",
    "compute_policy_loss_dppo_kl",
    "compute_policy_loss_clip_cov",
    "compute_policy_loss_kl_cov",
    "compute_policy_loss_reinforce",
    "compute_policy_loss_bypass_mode",
    "LOSS_AGG_MODES",
    "agg_loss",
    "compute_value_loss",
    "compute_entropy_loss",
    "KL_PENALTY_TYPES",
    "kl_penalty",
    "kl_penalty_forward",
    "compute_rewards",
    "FixedKLController",
    "AdaptiveKLController",
    "get_kl_controller",
    "apply_kl_penalty",
    "compute_pf_ppo_reweight_data",
    "compute_response_mask",
    "compute_advantage",
]


# The estimators defined in this package, kept apart from the (mutable) registry so that compute_advantage
# still finds them when a caller swaps or clears ADV_ESTIMATOR_REGISTRY (verl's own tests do).
_BUILTIN_ESTIMATORS = dict(ADV_ESTIMATOR_REGISTRY)


def register_adv_est(name_or_enum: str | Enum) -> Callable:
    """Decorator registering an advantage estimator under a name or enum member (``algorithm.adv_estimator``)."""
    return _advantage.registering_into(ADV_ESTIMATOR_REGISTRY, name_or_enum)


def get_adv_estimator_fn(name_or_enum: str | Enum) -> Callable:
    """The estimator registered under ``name_or_enum``; unknown names raise ValueError listing the registered ones."""
    return _advantage.lookup_in(ADV_ESTIMATOR_REGISTRY, name_or_enum)


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator registering a policy loss under ``name`` (``actor.policy_loss.loss_mode``)."""
    return _policy_loss.registering_into(POLICY_LOSS_REGISTRY, name)


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    """The policy loss registered under ``name``; unknown names raise ValueError listing the registered ones."""
    return _policy_loss.lookup_in(POLICY_LOSS_REGISTRY, name)


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


# Batch tensors an estimator may take, passed as None when the batch lacks them.
_OPTIONAL_BATCH_INPUTS = ("values", "reward_baselines", "old_log_probs", "sum_pi_squared", "rollout_is_weights")


def _call_with_accepted_kwargs(fn, kwargs: dict[str, Any]):
    """Call ``fn`` with the subset of ``kwargs`` it accepts, so user estimators need not take every input."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return fn(**kwargs)
    accepted = {p.name for p in params}
    return fn(**{k: v for k, v in kwargs.items() if k in accepted})


def compute_advantage(
    data: Any,
    adv_estimator: str | AdvantageEstimator | None,
    gamma: float = 1.0,
    lam: float = 1.0,
    num_repeat: int = 1,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> Any:
    """Run the registered estimator on a DataProto and store ``advantages`` and ``returns`` in its batch.

    Inputs come from ``data.batch`` (``token_level_rewards``; ``response_mask``, derived from
    ``attention_mask``/``responses`` and stored when absent; ``values`` for gae;
    ``reward_baselines`` for remax; ``old_log_probs``, ``sum_pi_squared`` and
    ``rollout_is_weights`` for the optimal token baselines) and ``data.non_tensor_batch``
    (``uid``: prompt group ids; gdpo's reward components). Each estimator receives the inputs it
    accepts. With gae and ``config.use_pf_ppo`` the batch is then resampled (PF-PPO, settings in
    ``config.pf_ppo``) and the resampled DataProto is returned.
    ``num_repeat`` is accepted for verl compatibility and unused: groups come from ``uid``.
    """
    del num_repeat
    if config is not None:
        config = as_algo_config(config)
    if adv_estimator is None:
        raise ConfigError(
            "is null, and the trainer was asked to compute advantages: name an estimator", key="algorithm.adv_estimator"
        )
    key = _advantage.estimator_name(adv_estimator)
    fn = ADV_ESTIMATOR_REGISTRY.get(key) or _BUILTIN_ESTIMATORS.get(key) or get_adv_estimator_fn(key)
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
        **{key: data.batch[key] if key in keys else None for key in _OPTIONAL_BATCH_INPUTS},
        "index": data.non_tensor_batch.get("uid"),
        "non_tensor_batch": data.non_tensor_batch,
        "batch": data.batch,
        "gamma": gamma,
        "lam": lam,
        "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo,
        "config": config,
    }
    advantages, returns = _call_with_accepted_kwargs(fn, inputs)
    data.batch["advantages"] = advantages
    data.batch["returns"] = returns
    is_gae = _advantage.estimator_name(adv_estimator) == AdvantageEstimator.GAE.value
    if is_gae and config is not None and config.use_pf_ppo:
        data = compute_pf_ppo_reweight_data(
            data, reweight_method=config.pf_ppo.reweight_method, weight_pow=config.pf_ppo.weight_pow
        )
    return data
