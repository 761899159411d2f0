"""Compose the trainer config from Python (tests, notebooks, recipes) exactly as the command line does.

A config in the user's own folder may build on the packaged one the way verl's examples do (``defaults:
[ppo_trainer, _self_]``): the packaged config folder is always on the search path, whatever ``hydra.searchpath``
the user's file lists (verl's ``file://verl/trainer/config`` only works from a verl checkout).
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import yaml
from hydra import compose, initialize_config_dir, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.legacy import (
    override_key,
    translate_legacy_config,
    translate_legacy_overrides,
)
from verl.trainer.config.packaged import CONFIG_MODULE, packaged_composition, packaged_raw_config

__all__ = [
    "CONFIG_DIR",
    "CONFIG_MODULE",
    "compose_ppo_config",
    "default_ppo_config",
    "flattened_config",
    "packaged_raw_config",
    "search_path_override",
]

CONFIG_DIR = Path(__file__).resolve().parent
_PACKAGED = f"pkg://{CONFIG_MODULE}"


def _user_search_path(config_dir: str | os.PathLike, config_name: str) -> list[str]:
    """``hydra.searchpath`` of the user's primary config file, if it lists one."""
    path = Path(config_dir) / (config_name if config_name.endswith(".yaml") else f"{config_name}.yaml")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return []
    entries = (data.get("hydra") or {}).get("searchpath") or [] if isinstance(data, dict) else []
    return [str(entry) for entry in entries]


def search_path_override(
    config_dir: str | os.PathLike | None, config_name: str, extra_dirs: Sequence[str | os.PathLike] = ()
) -> list[str]:
    """A ``hydra.searchpath=[...]`` override (or none) that keeps the user's entries and adds ``extra_dirs`` and the
    packaged configs, so that a user's config can list ``ppo_trainer`` in its ``defaults``. ``file://`` entries that
    do not exist are left out (Hydra would only warn about them)."""
    if config_dir is None or Path(config_dir).resolve() == CONFIG_DIR:
        if not extra_dirs:
            return []
        entries = []
    else:
        entries = _user_search_path(config_dir, config_name)
    entries += [f"file://{Path(d).resolve()}" for d in extra_dirs]
    entries = [e for e in entries if not e.startswith("file://") or Path(e[len("file://") :]).is_dir()]
    if _PACKAGED not in entries:
        entries.append(_PACKAGED)
    return ["hydra.searchpath=[" + ",".join(entries) + "]"]


def compose_ppo_config(
    overrides: Sequence[str] = (),
    config_name: str = "ppo_trainer",
    config_dir: str | os.PathLike | None = None,
    extra_search_dirs: Sequence[str | os.PathLike] = (),
) -> DictConfig:
    """Hydra-compose ``config_name`` with ``overrides`` after legacy translation (warnings included).

    ``config_dir``: an absolute folder holding ``config_name`` (a user YAML whose ``defaults`` pull in
    ``ppo_trainer``); default: the packaged configs. ``extra_search_dirs`` are searched too (``--config-dir``).
    Legacy blocks in that YAML are translated too, never overwriting a command-line value.
    """
    config_name = config_name.removesuffix(".yaml")
    if config_dir is None:  # as Hydra's --config-dir: the primary config may live in an added folder
        config_dir = next((d for d in extra_search_dirs if (Path(d) / f"{config_name}.yaml").is_file()), None)
    new_overrides, _ = translate_legacy_overrides(list(overrides))
    search = search_path_override(config_dir, config_name, extra_search_dirs)
    # The packaged defaults tell a value the user set from the packaged one (in the flattened groups and in the
    # actor_rollout_ref mirror of ppo_trainer.yaml).
    if GlobalHydra.instance().is_initialized():
        cfg = compose(config_name=config_name, overrides=[*search, *new_overrides])
    else:
        init = (
            initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base=None)
            if config_dir
            else initialize_config_module(config_module=CONFIG_MODULE, version_base=None)
        )
        with init:
            cfg = compose(config_name=config_name, overrides=[*search, *new_overrides])
    defaults = default_ppo_config()
    explicit = {override_key(o) for o in new_overrides}
    cfg, _ = translate_legacy_config(cfg, explicit_keys=explicit, defaults=defaults)
    return cfg


def flattened_config(config: DictConfig) -> DictConfig:
    """``config`` in the flattened groups, for code that receives a config from a recipe's own ``@hydra.main``.

    Such a config may still hold verl's spellings (``actor_rollout_ref.actor.use_kl_loss``,
    ``reward_model.reward_manager``) beside the packaged defaults of the flattened groups; read as it is, the
    default would win over the value the user set. A config holding none of them (the trainer's own, whose
    ``actor_rollout_ref`` node only aliases the groups) is returned as it is; otherwise a translated, unresolved
    copy, with the usual warnings and "set twice" errors."""
    from verl.trainer.config.key_rules import LEGACY_ROOTS
    from verl.trainer.config.legacy_view import is_legacy_view

    legacy = [root for root in LEGACY_ROOTS if root in config and not is_legacy_view(config, root)]
    if not legacy:
        return config
    copy = OmegaConf.create(cast(dict[str, Any], OmegaConf.to_container(config, resolve=False)))
    translated, _ = translate_legacy_config(copy, defaults=default_ppo_config())
    return translated


def default_ppo_config() -> DictConfig:
    """The packaged defaults with no overrides, in the flattened groups only (a fresh copy on each call)."""
    return copy.deepcopy(_translated_defaults())


@functools.lru_cache(maxsize=1)
def _translated_defaults() -> DictConfig:
    packaged = packaged_composition()
    cfg, _ = translate_legacy_config(packaged.copy(), defaults=packaged)
    return cfg
