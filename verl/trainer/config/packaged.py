"""The packaged ``ppo_trainer`` config as composed with no overrides, untranslated: the reference against which the
legacy translation tells a value the user set from a packaged default."""

from __future__ import annotations

import functools
from typing import Any, cast

from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.key_rules import LEGACY_ROOT

__all__ = ["CONFIG_MODULE", "packaged_composition", "packaged_mirror_defaults", "packaged_raw_config"]

CONFIG_MODULE = "verl.trainer.config"


@functools.lru_cache(maxsize=1)
def packaged_raw_config() -> dict:
    """``ppo_trainer`` as packaged, untranslated and unresolved (mirror included). Shared between calls: read it,
    never change it."""
    return cast(dict[str, Any], OmegaConf.to_container(packaged_composition(), resolve=False))


def packaged_mirror_defaults() -> dict:
    """The packaged values of the ``actor_rollout_ref`` mirror in ``ppo_trainer.yaml``, unresolved: a mirror leaf
    that still holds its packaged value was not set by the user. Shared between calls: read it, never change it."""
    return packaged_raw_config().get(LEGACY_ROOT, {})


@functools.lru_cache(maxsize=1)
def packaged_composition() -> DictConfig:
    """``ppo_trainer`` composed from the packaged config module with no overrides, untranslated.

    Composed even inside a running Hydra app (a recipe's own ``@hydra.main``, whose search path may not reach
    ``ppo_trainer`` outside its primary config): the app's Hydra state is set aside for the compose and put back
    after it. Callers copy it before changing anything."""
    hydra_state = GlobalHydra.instance()
    outer = hydra_state.hydra
    hydra_state.clear()
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base=None):
            return compose(config_name="ppo_trainer")
    finally:
        hydra_state = GlobalHydra.instance()
        hydra_state.clear()
        if outer is not None:
            hydra_state.initialize(outer)
