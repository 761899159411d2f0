"""Role, WorkerType and the ``need_*`` predicates: which worker groups a PPO config asks for.

This is where verl recipes import them from (``from verl.trainer.ppo.utils import Role, need_critic``). Every
predicate reads the flattened config the trainer runs on (``config.actor``, ``config.critic``, ...); a raw config in
the legacy spelling (``config.actor_rollout_ref.actor``) is read as well, so a recipe may pass either.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from verl.single_controller.base import Worker
from verl.trainer.config.algo_config import AlgoConfig
from verl.trainer.config.key_rules import LEGACY_ROOT
from verl.trainer.config.ppo_config import PPOConfig
from verl.trainer.config.resolve import attached_ppo_config
from verl.trainer.ppo.roles import Role
from verl.utils.import_utils import lazy_exports
from verl.workers.config import ActorConfig, DistillationConfig, RewardModelConfig
from verl.workers.config.critic import critic_enabled

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


def _node(config: Any, name: str) -> Any:
    """``config.<name>``, or ``config.actor_rollout_ref.<name>`` in a legacy-spelled config; None when absent."""
    for holder in (config, _member(config, LEGACY_ROOT)):
        value = _member(holder, name)
        if value is not None:
            return value
    return None


def _member(holder: Any, name: str) -> Any:
    if holder is None:
        return None
    if isinstance(holder, Mapping):
        return holder.get(name)
    return holder.__dict__.get(name) if hasattr(holder, "__dict__") else None


def _declared(config: Any, path: tuple[str, ...], cls: type, name: str) -> Any:
    """Setting ``name`` of the group at ``path`` in any config shape (typed, flattened, verl's nested spelling), or
    the default ``cls`` declares for it: a predicate reads one flag without validating the whole group."""
    node = _node(_typed_or_flat(config), path[0])
    for part in path[1:]:
        node = _member(node, part)
    value = _member(node, name)
    if value is not None:
        return value
    declared = next(f for f in dataclasses.fields(cls) if f.name == name)
    return declared.default_factory() if declared.default_factory is not dataclasses.MISSING else declared.default


def need_critic(config: Any) -> bool:
    """A critic is trained when ``critic.enable`` says so, or, left unset, when the estimator needs values (GAE): the
    rule of ``PPOConfig.use_critic``, read from any config shape (verl's nested spelling included)."""
    enable = _member(_node(_typed_or_flat(config), "critic"), "enable")
    return critic_enabled(enable, _declared(config, ("algorithm",), AlgoConfig, "adv_estimator"))


def need_reference_policy(config: Any) -> bool:
    """A reference policy is needed for a KL term: in the reward (``algorithm.use_kl_in_reward``) or in the
    actor's loss (``actor.use_kl_loss``)."""
    in_reward = _declared(config, ("algorithm",), AlgoConfig, "use_kl_in_reward")
    return bool(in_reward or _declared(config, ("actor",), ActorConfig, "use_kl_loss"))


def need_reward_model(config: Any) -> bool:
    """A model-based reward (``reward.reward_model.enable``; verl's older top-level ``reward_model.enable`` is
    translated first)."""
    return bool(_declared(config, ("reward", "reward_model"), RewardModelConfig, "enable"))


def need_teacher_policy(config: Any) -> bool:
    """A distillation teacher (``distillation.enabled``); this build has no distillation trainer, so a config that
    enables it is refused where the trainer is built."""
    return bool(_declared(config, ("distillation",), DistillationConfig, "enabled"))


def _typed_or_flat(config: Any) -> Any:
    typed = config if isinstance(config, PPOConfig) else attached_ppo_config(config)
    return typed if typed is not None else _flat(config)
