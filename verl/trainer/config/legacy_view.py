"""Read-only aliases of the flattened groups under verl's nested spelling, for recipe code that reads the config.

Recipes written for verl read ``self.config.actor_rollout_ref.rollout.n`` or ``config.actor_rollout_ref.actor.
ppo_mini_batch_size``. The trainer runs on the flattened groups (``config.rollout``, ``config.actor``); instead of
a second copy that could drift, :func:`add_legacy_view` adds an ``actor_rollout_ref`` node whose members are
OmegaConf interpolations of the flattened groups: a read through either spelling sees the same, current value.
Writes must go to the flattened groups (the alias node is not a copy).
"""

from __future__ import annotations

from typing import Any, cast

from omegaconf import DictConfig, OmegaConf, open_dict

from verl.trainer.config.key_rules import LEGACY_ROOT, LEGACY_ROOTS, config_leaves
from verl.trainer.config.legacy import translate_legacy_key

__all__ = ["LEGACY_VIEW_KEY", "add_legacy_view", "is_legacy_view", "legacy_leaf_aliases", "without_legacy_view"]

LEGACY_VIEW_KEY = LEGACY_ROOT
_ALIASED_GROUPS = ("actor", "rollout", "ref", "model")


def add_legacy_view(config: Any, leaf_aliases: dict[str, str] | None = None) -> Any:
    """Add ``actor_rollout_ref.{actor,rollout,ref,model}`` aliasing the flattened groups (and verl's
    ``hybrid_engine: true``) to a DictConfig that lacks it, and the ``leaf_aliases`` of :func:`legacy_leaf_aliases`;
    anything else is returned unchanged."""
    if not isinstance(config, DictConfig):
        return config
    with open_dict(config):
        for key, target in (leaf_aliases or {}).items():
            OmegaConf.update(config, key, target, merge=False, force_add=True)
    if LEGACY_VIEW_KEY in config:
        return config
    view: dict[str, Any] = {name: f"${{{name}}}" for name in _ALIASED_GROUPS if name in config}
    if not view:
        return config
    view["hybrid_engine"] = True
    with open_dict(config):
        config[LEGACY_VIEW_KEY] = view
    return config


def legacy_leaf_aliases(config: Any) -> dict[str, str]:
    """``{verl key: "${flattened key}"}`` for each leaf set (not null) under verl's top-level reward blocks
    (``reward_model.overlong_buffer.len``, ``custom_reward_function.path``, ...) of an untranslated config.

    A recipe's own code reads them where its YAML put them (``config.reward_model.overlong_buffer``); once the
    config is flattened for the task runner, these aliases keep them readable there."""
    if not isinstance(config, DictConfig):
        return {}
    aliases = {}
    for root in LEGACY_ROOTS:
        if root == LEGACY_VIEW_KEY or not isinstance(config.get(root), DictConfig):
            continue
        for key, value in config_leaves(OmegaConf.to_container(config[root], resolve=False), root):
            target = translate_legacy_key(key) if value is not None else None
            if isinstance(target, str) and target != key:
                aliases[key] = f"${{{target}}}"
    return aliases


def is_legacy_view(config: Any, key: str = LEGACY_VIEW_KEY) -> bool:
    """True when ``config[key]`` holds aliases only: the node :func:`add_legacy_view` adds (each member
    ``${<group>}``), or, for verl's reward blocks, the leaves of :func:`legacy_leaf_aliases`."""
    node = config.get(key) if isinstance(config, DictConfig) and key in config else None
    if not isinstance(node, DictConfig):
        return False
    raw = cast(dict[str, Any], OmegaConf.to_container(node, resolve=False))  # node is a DictConfig
    if key == LEGACY_VIEW_KEY:
        aliases = {name: value for name, value in raw.items() if name != "hybrid_engine"}
        return bool(aliases) and all(value == f"${{{name}}}" for name, value in aliases.items())
    leaves = list(config_leaves(raw, key))
    return bool(leaves) and all(isinstance(value, str) and value.startswith("${") for _, value in leaves)


def without_legacy_view(config: Any) -> dict[str, Any]:
    """The resolved config as a plain dict without the alias node (what trackers log: no group twice)."""
    container = OmegaConf.to_container(config, resolve=True)
    if isinstance(container, dict):
        container.pop(LEGACY_VIEW_KEY, None)
        for root in LEGACY_ROOTS:
            if is_legacy_view(config, root):
                container.pop(root, None)
    return cast(dict[str, Any], container)
