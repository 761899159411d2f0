"""Role, WorkerType and the ``need_*`` predicates: which worker groups a PPO config asks for.

This is where verl recipes import them from (``from verl.trainer.ppo.utils import Role, need_critic``). Every
predicate reads the flattened config the trainer runs on (``config.actor``, ``config.critic``, ...); a raw config in
the legacy spelling (``config.actor_rollout_ref.actor``) is read as well, so a recipe may pass either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from verl.single_controller.base import Worker
from verl.trainer.config.legacy import LEGACY_ROOT
from verl.trainer.ppo.roles import Role
from verl.utils.import_utils import lazy_exports

if TYPE_CHECKING:
    from verl.utils.dataset.factory import create_rl_dataset
    from verl.utils.dataset.sampler import create_rl_sampler

__all__ = [
    "Role",
    "WorkerType",
    "create_rl_dataset",
    "create_rl_sampler",
    "need_critic",
    "need_reference_policy",
    "need_reward_model",
    "need_teacher_policy",
]

WorkerType = type[Worker]

# verl also exports the data-set builders here. They load on first access: importing them pulls in the data stack
# (torch, transformers), which the driver of ``main_ppo`` (it only reads ``Role`` and the predicates) need not pay.
_DATASET_BUILDERS = {
    "create_rl_dataset": "verl.utils.dataset.factory",
    "create_rl_sampler": "verl.utils.dataset.sampler",
}

__getattr__ = lazy_exports(__name__, _DATASET_BUILDERS)


def _flat(config: Any) -> Any:
    """A recipe's own composed config may hold verl's spellings beside our defaults: read it translated."""
    from omegaconf import DictConfig

    if isinstance(config, DictConfig):
        from verl.trainer.config.compose import flattened_config

        return flattened_config(config)
    return config


def _group(config: Any, name: str) -> Any:
    """``config.<name>``, or ``config.actor_rollout_ref.<name>`` in a legacy-spelled config; None when absent."""
    value = config.get(name) if hasattr(config, "get") else getattr(config, name, None)
    if value is None:
        legacy = config.get(LEGACY_ROOT) if hasattr(config, "get") else getattr(config, LEGACY_ROOT, None)
        if legacy is not None:
            value = legacy.get(name) if hasattr(legacy, "get") else getattr(legacy, name, None)
    return value


def _read(group: Any, key: str, default: Any = None) -> Any:
    if group is None:
        return default
    value = group.get(key, default) if hasattr(group, "get") else getattr(group, key, default)
    return default if value is None else value


def need_critic(config: Any) -> bool:
    """A critic is trained when ``critic.enable`` says so, or, left unset, when the estimator needs values (GAE): the
    rule of ``PPOConfig.use_critic``, read from any config shape (verl's nested spelling included)."""
    from verl.workers.config.critic import critic_enabled

    config = _flat(config)
    estimator = _read(_group(config, "algorithm"), "adv_estimator")
    return critic_enabled(_read(_group(config, "critic"), "enable"), estimator)


def need_reference_policy(config: Any) -> bool:
    """A reference policy is needed for a KL term: in the reward (``algorithm.use_kl_in_reward``) or in the
    actor's loss (``actor.use_kl_loss``)."""
    config = _flat(config)
    in_reward = bool(_read(_group(config, "algorithm"), "use_kl_in_reward", False))
    return in_reward or bool(_read(_group(config, "actor"), "use_kl_loss", False))


def need_reward_model(config: Any) -> bool:
    """A model-based reward (``reward.reward_model.enable``; verl's older top-level ``reward_model.enable``)."""
    config = _flat(config)
    reward = _group(config, "reward")
    model = _read(reward, "reward_model")
    if model is None:
        model = _group(config, "reward_model")
    return bool(_read(model, "enable", False))


def need_teacher_policy(config: Any) -> bool:
    """A distillation teacher (``distillation.enabled``); this build has no distillation trainer, so a config that
    enables it is refused where the trainer is built."""
    config = _flat(config)
    return bool(_read(_group(config, "distillation"), "enabled", False))
