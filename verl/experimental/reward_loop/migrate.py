"""``migrate_legacy_reward_impl``: move verl's legacy top-level reward keys under the ``reward`` group.

verl keeps the pre-0.9 keys (``reward_model.*``, ``custom_reward_function``, ``sandbox_fusion``) at the top level of
its config and moves them under ``reward`` when its trainer starts; recipes that build their own trainer call this
function for the same effect. It works on a DictConfig or a plain dict, in place, and returns the config:

* ``reward_model.num_workers`` / ``reward_kwargs`` -> ``reward.num_workers`` / ``reward.reward_kwargs``;
* ``reward_model.reward_manager`` -> the manager's name (``reward.reward_manager.name`` in verl's layout,
  ``reward.reward_manager`` where it is a plain name, as in this package); ``reward_model.reward_loop_source`` /
  ``reward_loop_module_path`` / ``reward_loop_class_name`` -> ``reward.reward_manager.{source, module.path,
  module.name}``;
* ``reward_model.{enable, enable_resource_pool, n_gpus_per_node, nnodes}`` and the set keys of
  ``reward_model.rollout`` -> ``reward.reward_model.*``; ``reward_model.model.path`` -> the reward model's path
  (``model_path`` in verl's layout, ``model.path`` in this package's);
* ``custom_reward_function`` / ``sandbox_fusion`` -> ``reward.*`` when any of their keys is set;
* the three legacy groups are then removed.

Only set (non-null) values move. This package's typed config (:class:`~verl.base_config.BaseConfig`) is returned
unchanged: the config layer (:mod:`verl.trainer.config.key_rules`) has already mapped these keys when it was built.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from verl.base_config import BaseConfig

__all__ = ["migrate_legacy_reward_impl"]

LEGACY_GROUPS = ("reward_model", "custom_reward_function", "sandbox_fusion")


@contextlib.contextmanager
def _writable(config: Any) -> Iterator[None]:
    try:
        from omegaconf import DictConfig, open_dict
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        yield
        return
    if isinstance(config, DictConfig):
        with open_dict(config):
            yield
    else:
        yield


def _get(node: Any, key: str) -> Any:
    return node.get(key) if isinstance(node, Mapping) else None


def _child(node: Any, key: str) -> Any:
    """``node[key]``, created as an empty mapping when missing or null."""
    if _get(node, key) is None:
        node[key] = {}
    return node[key]


def _migrate_manager(legacy: Any, reward: Any) -> None:
    name = _get(legacy, "reward_manager")
    source = _get(legacy, "reward_loop_source")
    current = _get(reward, "reward_manager")
    nested = current is not None and not isinstance(current, str)
    if source is not None and not nested:
        # a source needs verl's {name, source, module} layout; keep the plain name the group already had
        reward["reward_manager"] = {"name": current or name or "naive", "source": None, "module": {}}
        nested = True
    if name is not None:
        if nested:
            reward["reward_manager"]["name"] = name
        else:
            reward["reward_manager"] = name
    if source is not None:
        manager = reward["reward_manager"]
        manager["source"] = source
        module = _child(manager, "module")
        module["path"] = _get(legacy, "reward_loop_module_path")
        module["name"] = _get(legacy, "reward_loop_class_name")


def _migrate_reward_model(legacy: Any, reward: Any) -> None:
    if _get(legacy, "num_workers") is not None:
        reward["num_workers"] = legacy["num_workers"]
    _migrate_manager(legacy, reward)
    if _get(legacy, "reward_kwargs") is not None:
        reward["reward_kwargs"] = legacy["reward_kwargs"]
    target = _child(reward, "reward_model")
    for key in ("enable", "enable_resource_pool", "n_gpus_per_node", "nnodes"):
        if _get(legacy, key) is not None:
            target[key] = legacy[key]
    model_path = _get(_get(legacy, "model"), "path")
    if model_path is not None:
        if "model_path" not in target and isinstance(_get(target, "model"), Mapping):
            target["model"]["path"] = model_path  # this package's layout
        else:
            target["model_path"] = model_path
    rollout = _get(legacy, "rollout")
    if rollout is not None:
        target_rollout = _child(target, "rollout")
        for key in list(rollout.keys()):
            if rollout[key] is not None:
                target_rollout[key] = rollout[key]


def migrate_legacy_reward_impl(config: Any) -> Any:
    """Move the legacy reward keys of ``config`` under ``reward`` (see the module docstring); returns ``config``."""
    if isinstance(config, BaseConfig):
        return config
    legacy = {key: _get(config, key) for key in LEGACY_GROUPS}
    if all(value is None for value in legacy.values()):
        return config
    with _writable(config):
        reward = _child(config, "reward")
        if legacy["reward_model"] is not None:
            _migrate_reward_model(legacy["reward_model"], reward)
        for key in ("custom_reward_function", "sandbox_fusion"):
            group = legacy[key]
            if group is not None and any(v is not None for v in group.values()):
                reward[key] = group
        for key in LEGACY_GROUPS:
            if key in config:
                del config[key]
    return config
