"""Registry of reward-loop managers: ``@register("name")`` on a :class:`RewardManagerBase` subclass.

It is separate from the registry of the batch managers (:mod:`verl.workers.reward_manager.registry`), as in verl:
both kinds use the names ``naive`` and ``dapo``. The trainer looks a ``reward.reward_manager`` name up in the batch
registry first and then here (:func:`verl.trainer.ppo.reward.load_reward_manager`), so a manager registered here
under a new name is usable by ``main_ppo`` without further wiring.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

__all__ = ["REWARD_LOOP_MANAGER_REGISTRY", "get_reward_manager_cls", "register"]

REWARD_LOOP_MANAGER_REGISTRY: dict[str, type[RewardManagerBase]] = {}


def register(name: str) -> Callable[[type[RewardManagerBase]], type[RewardManagerBase]]:
    """Class decorator adding a reward-loop manager under ``name``; a different class under a taken name is
    refused (which one wins would otherwise depend on import order)."""

    def decorator(cls: type[RewardManagerBase]) -> type[RewardManagerBase]:
        existing = REWARD_LOOP_MANAGER_REGISTRY.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(
                f"reward-loop manager {name!r} is already registered as {existing.__module__}.{existing.__qualname__}"
            )
        REWARD_LOOP_MANAGER_REGISTRY[name] = cls
        return cls

    return decorator


def get_reward_manager_cls(name: str) -> type[RewardManagerBase]:
    """The class registered as ``name``; the error lists every registered name."""
    try:
        return REWARD_LOOP_MANAGER_REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown reward-loop manager {name!r}; registered: {sorted(REWARD_LOOP_MANAGER_REGISTRY)}"
        ) from None
