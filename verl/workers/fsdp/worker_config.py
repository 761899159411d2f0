"""How configs reach an FSDP worker, and the per-rank batch sizes it derives from them.

A worker receives the flattened trainer config (DictConfig, dict or the typed ``PPOConfig``) and reads the groups it
needs (``actor``, ``ref``, ``rollout``, ``model``, ``critic``, ``trainer``), converting each to its typed dataclass so
every field is validated with its dotted key. Sizes: ``ppo_mini_batch_size`` counts prompts, so one mini-batch on one
rank is ``ppo_mini_batch_size * rollout.n / world_size`` samples; the batch plan names them
(:class:`~verl.trainer.config.batch_plan.RankUpdateSizes`) and the worker hands them to the actor under verl's keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from verl.base_config import ConfigError
from verl.utils.config_builder import as_config

__all__ = [
    "as_config",
    "read_group",
    "has_group",
    "per_rank_update_sizes",
    "with_rank_sizes",
    "optim_with_total_steps",
]

T = TypeVar("T")


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
    return as_config(value, cls, name)


def per_rank_update_sizes(role_config: Any, group: str, rollout_n: int, dp_size: int) -> dict[str, int | None]:
    """:func:`~verl.trainer.config.batch_plan.rank_update_sizes` (the batch plan's per-rank sizes) under the keys
    the actor and critic read: ``ppo_mini_batch_size`` and ``ppo_micro_batch_size_per_gpu`` in samples per rank."""
    from verl.trainer.config.batch_plan import rank_update_sizes

    return rank_update_sizes(role_config, group, rollout_n, dp_size).as_verl_keys()


def with_rank_sizes(config: T, group: str, rollout_n: int, dp_size: int, **changes: Any) -> T:
    """A copy of ``config`` (an actor or critic config) with :func:`per_rank_update_sizes` and ``changes``."""
    return dataclasses.replace(config, **per_rank_update_sizes(config, group, rollout_n, dp_size), **changes)


def optim_with_total_steps(optim: T, trainer: Any) -> T:
    """``optim`` (an ``OptimizerConfig``) as is when it knows ``total_training_steps``; else a copy taking
    ``trainer.total_training_steps`` (a ``TrainerConfig``)."""
    total = optim.total_training_steps
    fallback = trainer.total_training_steps
    if (total is None or int(total) <= 0) and fallback:
        return dataclasses.replace(optim, total_training_steps=int(fallback))
    return optim
