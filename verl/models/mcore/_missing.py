"""The one description of what the Megatron names of this package are missing (shared by its modules)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl.utils.extras import unavailable_class, unavailable_function

__all__ = ["MEGATRON_FEATURE", "MEGATRON_REASON", "megatron_class", "megatron_function"]

MEGATRON_FEATURE = "verl's Megatron-LM (mcore) backend"
MEGATRON_REASON = "this package trains with FSDP2 only (use actor.strategy=fsdp2)"


def megatron_function(name: str, module: str) -> Callable[..., Any]:
    """``module.name``, a Megatron function: importable, raises ``MissingExtraError`` when called."""
    return unavailable_function(name, module, MEGATRON_FEATURE, extra="megatron", reason=MEGATRON_REASON)


def megatron_class(name: str, module: str, base: type = object) -> type:
    """``module.name``, a Megatron class: importable and subclassable, raises ``MissingExtraError`` when built."""
    return unavailable_class(name, module, MEGATRON_FEATURE, extra="megatron", reason=MEGATRON_REASON, base=base)
