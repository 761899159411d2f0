"""Read-only aliases of the flattened groups under verl's nested spelling, for recipe code that reads the config.

Recipes written for verl read ``self.config.actor_rollout_ref.rollout.n`` or ``config.actor_rollout_ref.actor.
ppo_mini_batch_size``. The trainer runs on the flattened groups (``config.rollout``, ``config.actor``); instead of
a second copy that could drift, :func:`add_legacy_view` adds an ``actor_rollout_ref`` node whose members are
OmegaConf interpolations of the flattened groups: a read through either spelling sees the same, current value.
Writes must go to the flattened groups (the alias node is not a copy).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

__all__ = ["LEGACY_VIEW_KEY", "add_legacy_view", "without_legacy_view"]

LEGACY_VIEW_KEY = "actor_rollout_ref"
_ALIASED_GROUPS = ("actor", "rollout", "ref", "model")


def add_legacy_view(config: Any) -> Any:
    """Add ``actor_rollout_ref.{actor,rollout,ref,model}`` aliasing the flattened groups (and verl's
    ``hybrid_engine: true``) to a DictConfig that lacks it; anything else is returned unchanged."""
    if not isinstance(config, DictConfig) or LEGACY_VIEW_KEY in config:
        return config
    view: dict[str, Any] = {name: f"${{{name}}}" for name in _ALIASED_GROUPS if name in config}
    if not view:
        return config
    view["hybrid_engine"] = True
    with open_dict(config):
        config[LEGACY_VIEW_KEY] = view
    return config


def without_legacy_view(config: Any) -> dict[str, Any]:
    """The resolved config as a plain dict without the alias node (what trackers log: no group twice)."""
    container = OmegaConf.to_container(config, resolve=True)
    if isinstance(container, dict):
        container.pop(LEGACY_VIEW_KEY, None)
    return container
