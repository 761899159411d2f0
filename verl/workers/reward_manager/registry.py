"""Reward-manager registry: ``@register("name")`` on a class, ``get_reward_manager_cls("name")`` to find it."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["REWARD_MANAGER_REGISTRY", "get_reward_manager_cls", "register"]

REWARD_MANAGER_REGISTRY: dict[str, type] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator adding a reward manager under ``name`` (the value of ``reward.reward_manager``).

    Registering a second, different class under a taken name is refused: two recipes silently fighting over one name
    would make the config mean different things depending on import order.
    """

    def decorator(cls: type) -> type:
        existing = REWARD_MANAGER_REGISTRY.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(
                f"reward manager {name!r} is already registered as {existing.__module__}.{existing.__qualname__}"
            )
        REWARD_MANAGER_REGISTRY[name] = cls
        return cls

    return decorator


def get_reward_manager_cls(name: str) -> type:
    """The class registered as ``name``; the error lists every registered name."""
    try:
        return REWARD_MANAGER_REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown reward manager {name!r} (reward.reward_manager); registered: {sorted(REWARD_MANAGER_REGISTRY)}"
        ) from None
