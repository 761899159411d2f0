"""Compose the trainer config from Python (tests, notebooks, recipes) exactly as the command line does."""

from __future__ import annotations

from collections.abc import Sequence

from hydra import compose, initialize_config_dir, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from verl.trainer.config.legacy import override_key, translate_legacy_config, translate_legacy_overrides

__all__ = ["CONFIG_MODULE", "compose_ppo_config", "default_ppo_config"]

CONFIG_MODULE = "verl.trainer.config"


def compose_ppo_config(
    overrides: Sequence[str] = (),
    config_name: str = "ppo_trainer",
    config_dir: str | None = None,
) -> DictConfig:
    """Hydra-compose ``config_name`` with ``overrides`` after legacy translation (warnings included).

    ``config_dir``: an absolute folder holding ``config_name`` (a user YAML whose ``defaults`` pull in
    ``ppo_trainer`` via ``hydra.searchpath: [pkg://verl.trainer.config]``); default: the packaged configs.
    Legacy blocks in that YAML are translated too, never overwriting a command-line value.
    """
    new_overrides, _ = translate_legacy_overrides(list(overrides))
    if GlobalHydra.instance().is_initialized():
        cfg = compose(config_name=config_name, overrides=new_overrides)
        defaults = compose(config_name="ppo_trainer") if config_name != "ppo_trainer" else None
    else:
        init = (initialize_config_dir(config_dir=config_dir, version_base=None) if config_dir
                else initialize_config_module(config_module=CONFIG_MODULE, version_base=None))
        with init:
            cfg = compose(config_name=config_name, overrides=new_overrides)
        defaults = default_ppo_config() if config_name != "ppo_trainer" or config_dir else None
    explicit = {override_key(o) for o in new_overrides}
    cfg, _ = translate_legacy_config(cfg, explicit_keys=explicit, defaults=defaults)
    return cfg


def default_ppo_config() -> DictConfig:
    """The packaged defaults with no overrides."""
    if GlobalHydra.instance().is_initialized():
        return compose(config_name="ppo_trainer")
    with initialize_config_module(config_module=CONFIG_MODULE, version_base=None):
        return compose(config_name="ppo_trainer")
