"""Undo ``OmegaConf.resolve`` on the packaged config's derived keys, so a resolved config translates like a raw one.

Recipes resolve the composed config in their own ``main`` before handing it over. Resolving turns every derived key
of the packaged config (``actor.rollout_n: ${oc.select:rollout.n,1}``, the ``actor_rollout_ref`` mirror's
``ref.strategy: ${actor_rollout_ref.actor.strategy}``) into a plain value, and a plain value that differs from the
packaged interpolation looks set by the user: the translation would then move a frozen default onto a key the user
did set in the other spelling, and call it "set twice". A resolved value that still equals what its packaged
interpolation gives in this config was derived, not set: it gets its interpolation back.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from verl.trainer.config.key_rules import config_leaves

__all__ = ["derived_keys", "restore_derived_values"]

_UNSET = object()


def derived_keys(packaged_raw: dict) -> dict[str, str]:
    """Dotted key -> interpolation, for every leaf of the unresolved packaged config that is an interpolation."""
    return {key: value for key, value in config_leaves(packaged_raw, "") if _is_interpolation(value)}


def restore_derived_values(cfg: DictConfig, packaged_raw: dict) -> list[str]:
    """Give each resolved derived key of ``cfg`` its packaged interpolation back when it still holds the value that
    interpolation gives in ``cfg``; returns the keys restored. ``cfg`` changes in place; a key holding any other
    value (set by the user or a recipe) is left alone."""
    restored = []
    for key, interpolation in derived_keys(packaged_raw).items():
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
        if not isinstance(parent, DictConfig) or leaf not in parent.keys():
            continue
        node = parent._get_node(leaf)
        assert node is not None  # leaf is one of parent's keys
        value = node._value()
        if isinstance(value, DictConfig | ListConfig) or _is_interpolation(value):
            continue
        with open_dict(parent):
            parent[leaf] = interpolation
            try:
                derived = parent[leaf]
            except OmegaConfBaseException:
                derived = _UNSET
            if derived == value and type(derived) is type(value):
                restored.append(key)
            else:
                parent[leaf] = value
    return restored


def _is_interpolation(value: Any) -> bool:
    return isinstance(value, str) and "${" in value
