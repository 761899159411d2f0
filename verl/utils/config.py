"""verl's public config helpers, at verl's import path.

:func:`omega_conf_to_dataclass` lives in :mod:`verl.utils.config_builder` (the config packages import it from there);
:func:`validate_config` is the trainer's start-up check, reached from here only when a recipe calls it.
"""

from __future__ import annotations

from typing import Any

from verl.base_config import ConfigError
from verl.utils.config_builder import duck_typed_class, omega_conf_to_dataclass

__all__ = ["ConfigError", "duck_typed_class", "omega_conf_to_dataclass", "update_dict_with_config", "validate_config"]


def update_dict_with_config(dictionary: dict, config: Any) -> None:
    """Overwrite the keys of ``dictionary`` that ``config`` also has (verl helper kept for compatibility)."""
    for key in dictionary:
        if hasattr(config, key):
            dictionary[key] = getattr(config, key)


def validate_config(config: Any, use_reference_policy: bool = True, use_critic: bool = True) -> Any:
    """Run the trainer's start-up checks on a composed config; raises :class:`ConfigError` naming the bad key.

    verl's recipes call this before building workers. The config may use verl's nested spelling
    (``actor_rollout_ref.actor.*``; translated on a copy, the argument is not modified) or the flattened groups.
    Every group is checked, so ``use_reference_policy`` / ``use_critic`` (which limit verl's checks to the roles in
    use) do not narrow anything here. Returns the typed :class:`~verl.trainer.config.PPOConfig`.
    """
    # verl's public name re-exported here; the conversion belongs to the trainer's config package, above this one.
    from verl.trainer.config.resolve import to_ppo_config

    del use_reference_policy, use_critic
    return to_ppo_config(config)
