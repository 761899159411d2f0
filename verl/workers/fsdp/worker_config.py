"""How configs reach an FSDP worker, and the per-rank batch sizes it derives from them.

A worker receives the flattened trainer config (DictConfig, dict or the typed ``PPOConfig``) and reads the groups it
needs (``actor``, ``ref``, ``rollout``, ``model``, ``critic``, ``trainer``), converting each to its typed dataclass so
every field is validated with its dotted key. Sizes: ``ppo_mini_batch_size`` counts prompts, so one mini-batch on one
rank is ``ppo_mini_batch_size * rollout.n / world_size`` samples; the batch plan names them
(:class:`~verl.trainer.config.batch_plan.RankUpdateSizes`) and the worker hands them to the actor under verl's keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verl.base_config import ConfigError
from verl.utils.config import omega_conf_to_dataclass

__all__ = ["ConfigView", "read_group", "has_group", "per_rank_update_sizes", "optim_with_total_steps"]


class ConfigView:
    """A read-only view of a config with a few attributes replaced (the per-rank sizes, derived flags).

    The actor and the policy losses read their config by attribute, so a view serves them without mutating the
    user's (frozen) config object.
    """

    def __init__(self, base: Any, **overrides: Any) -> None:
        object.__setattr__(self, "_base", base)
        object.__setattr__(self, "_overrides", dict(overrides))

    def __getattr__(self, name: str) -> Any:
        overrides = object.__getattribute__(self, "_overrides")
        if name in overrides:
            return overrides[name]
        return getattr(object.__getattribute__(self, "_base"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"ConfigView is read-only (tried to set {name!r})")

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return getattr(self, name)
        except AttributeError:
            return default


def _lookup(config: Any, name: str) -> Any:
    if isinstance(config, Mapping) or hasattr(config, "keys"):
        try:
            return config[name] if name in config else None
        except Exception:
            return None
    return getattr(config, name, None)


def has_group(config: Any, name: str) -> bool:
    return _lookup(config, name) is not None


def read_group(config: Any, name: str, cls: type, required: bool = False) -> Any:
    """Group ``name`` of ``config`` as an instance of ``cls`` (or its ``_target_`` subclass); a default instance
    when the group is absent and not required."""
    value = _lookup(config, name)
    if value is None:
        if required:
            raise ConfigError(f"the worker config has no '{name}' group", key=name)
        return cls()
    if isinstance(value, cls):
        return value
    return omega_conf_to_dataclass(value, cls, path=name, keep_unknown=True)  # a recipe's own keys are kept


def per_rank_update_sizes(role_config: Any, group: str, rollout_n: int, dp_size: int) -> dict[str, int | None]:
    """:func:`~verl.trainer.config.batch_plan.rank_update_sizes` (the batch plan's per-rank sizes) under the keys
    the actor and critic read: ``ppo_mini_batch_size`` and ``ppo_micro_batch_size_per_gpu`` in samples per rank."""
    from verl.trainer.config.batch_plan import rank_update_sizes

    return rank_update_sizes(role_config, group, rollout_n, dp_size).as_verl_keys()


def optim_with_total_steps(optim: Any, trainer: Any) -> Any:
    """``optim`` as is when it knows ``total_training_steps``; else a view taking ``trainer.total_training_steps``."""
    total = getattr(optim, "total_training_steps", -1)
    fallback = getattr(trainer, "total_training_steps", None)
    if (total is None or int(total) <= 0) and fallback:
        return ConfigView(optim, total_training_steps=int(fallback))
    return optim
