"""Small shared helpers for the algorithm modules: config converters and registry identity.

The losses, estimators and controllers read their configs by attribute from the typed dataclasses, whose fields hold
the defaults. A caller may hand a DictConfig, a dict, a ``SimpleNamespace`` or None instead; each function converts
it once, at its door, with the ``as_*_config`` converter of its config type (None gives the dataclass's defaults;
keys no field declares are kept in ``_extra`` and read as attributes too).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, TypeVar

from verl.trainer.config.algo_config import AlgoConfig, KLControlConfig, RolloutCorrectionConfig
from verl.utils.config_builder import as_config
from verl.workers.config.actor import ActorConfig
from verl.workers.config.critic import CriticConfig
from verl.workers.config.distillation import DistillationConfig, DistillationLossConfig

__all__ = [
    "as_actor_config",
    "as_algo_config",
    "as_config",
    "as_critic_config",
    "as_distillation_config",
    "as_distillation_loss_config",
    "as_kl_ctrl_config",
    "as_rollout_correction_config",
    "same_function",
]

T = TypeVar("T")


def as_actor_config(config: Any) -> ActorConfig:
    """The actor config (``actor``) the policy losses read."""
    return as_config(config, ActorConfig, "actor")


def as_critic_config(config: Any) -> CriticConfig:
    """The critic config (``critic``) the value loss reads."""
    return as_config(config, CriticConfig, "critic")


def as_algo_config(config: Any) -> AlgoConfig:
    """The ``algorithm`` config the advantage estimators read."""
    return as_config(config, AlgoConfig, "algorithm")


def as_kl_ctrl_config(config: Any) -> KLControlConfig:
    """``algorithm.kl_ctrl``."""
    return as_config(config, KLControlConfig, "algorithm.kl_ctrl")


def as_rollout_correction_config(config: Any, path: str = "algorithm.rollout_correction") -> RolloutCorrectionConfig:
    """``algorithm.rollout_correction`` (``actor.policy_loss.rollout_correction`` in bypass mode)."""
    return as_config(config, RolloutCorrectionConfig, path)


def as_distillation_config(config: Any) -> DistillationConfig:
    """The top-level ``distillation`` config."""
    return as_config(config, DistillationConfig, "distillation")


def as_distillation_loss_config(config: Any) -> DistillationLossConfig:
    """``distillation.distillation_loss``; a whole ``distillation`` config gives its ``distillation_loss``."""
    if isinstance(config, DistillationConfig) or (
        not isinstance(config, DistillationLossConfig) and _has_key(config, "distillation_loss")
    ):
        return as_distillation_config(config).distillation_loss
    return as_config(config, DistillationLossConfig, "distillation.distillation_loss")


def _has_key(config: Any, key: str) -> bool:
    if isinstance(config, SimpleNamespace):
        return key in vars(config)
    return hasattr(config, "keys") and key in config


def same_function(a: Callable, b: Callable) -> bool:
    """True for the same object or the same definition re-imported (importlib.reload, unpickled workers)."""
    if a is b:
        return True
    return (getattr(a, "__module__", None), getattr(a, "__qualname__", None)) == (
        getattr(b, "__module__", None),
        getattr(b, "__qualname__", None),
    )
