"""Utilities shared by the trainer, the workers and recipes.

``from verl.utils import hf_tokenizer`` and friends work as in verl, but lazily: importing ``verl.utils`` (which
every submodule import does) loads nothing heavy; a name is imported from its module on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module that defines it
_LAZY_NAMES = {
    "build_multimodal_processor_inputs": "verl.utils.tokenizer",
    "get_processor_token_id": "verl.utils.tokenizer",
    "hf_processor": "verl.utils.tokenizer",
    "hf_tokenizer": "verl.utils.tokenizer",
    "normalize_token_ids": "verl.utils.tokenizer",
    "omega_conf_to_dataclass": "verl.utils.config",
    "validate_config": "verl.utils.config",
    "as_torch_index": "verl.utils.groupwise",
    "group_mean_std": "verl.utils.groupwise",
}

__all__ = sorted(_LAZY_NAMES)


def __getattr__(name: str) -> Any:
    module = _LAZY_NAMES.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    else:  # a submodule not imported yet (verl imported config and tokenizer eagerly): verl.utils.tokenizer...
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_NAMES))
