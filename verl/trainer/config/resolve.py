"""From a composed DictConfig to the typed :class:`PPOConfig`: the one conversion every entry path takes.

``main_ppo`` composes the config, translates verl's spellings, resolves it and builds ``PPOConfig`` once. The
DictConfig then travels on (verl's task runners and trainers take ``config``, and recipes read it) with that
object attached, so the task runner, the trainer and the workers reuse it instead of building it again. The
attachment is checked against a fingerprint of the DictConfig's content: a config changed after the build (a
recipe's runner editing it) is converted afresh, never paired with a stale twin.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.base_config import ConfigError
from verl.trainer.config.compose import default_ppo_config
from verl.trainer.config.inert_keys import interpolated_keys
from verl.trainer.config.legacy import translate_legacy_config
from verl.trainer.config.legacy_view import LEGACY_VIEW_KEY, is_legacy_view
from verl.trainer.config.ppo_config import PPOConfig, build_ppo_config

__all__ = [
    "as_ppo_config",
    "attach_ppo_config",
    "attached_ppo_config",
    "resolve_composed",
    "to_ppo_config",
    "validate_config",
]

# Where a DictConfig carries its typed twin: an instance attribute, not a key (it survives pickling to Ray actors;
# copies made with OmegaConf.create or deepcopy drop it, and are converted again).
_TWIN_ATTRIBUTE = "_verl_ppo_config"


def resolve_composed(
    config: DictConfig, explicit_keys: Sequence[str] = (), derived: set[str] | None = None
) -> DictConfig:
    """``config`` with verl's spellings translated and interpolations resolved (in place; also returned).

    ``explicit_keys``: flattened keys set on the command line (they win over legacy blocks of YAML files).
    ``derived``: when given, filled with the keys whose values were interpolations (the inert-key check skips them).
    """
    try:
        defaults = default_ppo_config()
    except Exception:  # noqa: BLE001 - a user config tree without the packaged defaults: they only sharpen checks
        defaults = None
    config, _ = translate_legacy_config(config, explicit_keys=explicit_keys, defaults=defaults)
    if derived is not None:
        derived.update(interpolated_keys(config))
    OmegaConf.resolve(config)
    return config


def to_ppo_config(config: PPOConfig | DictConfig | Mapping) -> PPOConfig:
    """The typed :class:`PPOConfig` of ``config``: itself when already typed; the object attached by the build
    that produced ``config`` when its content is unchanged since; else translated, resolved and built from a copy
    (``config``'s content is not modified; the result is attached to it for the next call). Raises
    :class:`ConfigError` naming the bad key."""
    if isinstance(config, PPOConfig):
        return config
    attached = attached_ppo_config(config)
    if attached is not None:
        return attached
    if isinstance(config, DictConfig):
        copy = OmegaConf.create(OmegaConf.to_container(config, resolve=False))
    elif isinstance(config, Mapping):
        copy = OmegaConf.create(dict(config))
    else:
        raise ConfigError(f"<config>: expected a DictConfig or a mapping, got {type(config).__name__}")
    assert isinstance(copy, DictConfig)  # OmegaConf.create of a dict
    if is_legacy_view(copy):  # translating the aliases back onto their groups would make them refer to themselves
        del copy[LEGACY_VIEW_KEY]
    typed = build_ppo_config(resolve_composed(copy))
    if isinstance(config, DictConfig):
        attach_ppo_config(config, typed)  # the next conversion of the same, unchanged config reuses it
    return typed


# verl's recipes and our trainer call it by this name.
as_ppo_config = to_ppo_config


def attach_ppo_config(config: DictConfig, typed: PPOConfig) -> DictConfig:
    """Attach ``typed`` (built from ``config``) to ``config`` for :func:`to_ppo_config` to reuse; returns
    ``config``."""
    config.__dict__[_TWIN_ATTRIBUTE] = (_fingerprint(config), typed)
    return config


def attached_ppo_config(config: Any) -> PPOConfig | None:
    """The typed config attached to ``config`` when its content is what it was at the attachment; else None."""
    if not isinstance(config, DictConfig):
        return None
    twin = config.__dict__.get(_TWIN_ATTRIBUTE)
    if twin is None:
        return None
    fingerprint, typed = twin
    return typed if fingerprint == _fingerprint(config) else None


def _fingerprint(config: DictConfig) -> str:
    """A digest of the config's content, interpolations unresolved (about 30 ms for the trainer's config)."""
    content = OmegaConf.to_container(config, resolve=False)
    return hashlib.sha1(pickle.dumps(content, protocol=pickle.HIGHEST_PROTOCOL)).hexdigest()


def validate_config(config: Any, use_reference_policy: bool = True, use_critic: bool = True) -> PPOConfig:
    """verl's ``verl.utils.config.validate_config``: run the trainer's start-up checks on a composed config; raises
    :class:`ConfigError` naming the bad key.

    verl's recipes call this before building workers. The config may use verl's nested spelling
    (``actor_rollout_ref.actor.*``; translated on a copy, the argument is not modified) or the flattened groups.
    Every group is checked, so ``use_reference_policy`` / ``use_critic`` (which limit verl's checks to the roles in
    use) do not narrow anything here. Returns the typed :class:`~verl.trainer.config.PPOConfig`.
    """
    del use_reference_policy, use_critic
    return to_ppo_config(config)
