"""verl's public config helpers, at verl's import path.

:func:`omega_conf_to_dataclass` lives in :mod:`verl.utils.config_builder` (the config packages import it from there);
:func:`validate_config` is the trainer's start-up check (:mod:`verl.trainer.config.resolve`), served from here on first
access.
"""

from __future__ import annotations

from typing import Any

from verl.base_config import ConfigError
from verl.utils.config_builder import duck_typed_class, omega_conf_to_dataclass
from verl.utils.import_utils import lazy_exports

__all__ = [  # noqa: F822 - validate_config is served by __getattr__ below
    "ConfigError",
    "duck_typed_class",
    "omega_conf_to_dataclass",
    "update_dict_with_config",
    "validate_config",
]


def update_dict_with_config(dictionary: dict, config: Any) -> None:
    """Overwrite the keys of ``dictionary`` that ``config`` also has (verl helper kept for compatibility)."""
    for key in dictionary:
        if hasattr(config, key):
            dictionary[key] = getattr(config, key)


# verl's public name, defined by the trainer's config package (above this one) and served from here on first access,
# so this module imports nothing from verl.trainer.
__getattr__ = lazy_exports(__name__, {"validate_config": "verl.trainer.config.resolve"})
