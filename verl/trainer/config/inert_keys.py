"""Config keys that verl accepts (so that existing scripts keep parsing) but that change nothing in this build.

A user who sets one of them to something other than its default expects an effect; silence would let a run differ
from what its command line says. :func:`check_inert_keys` names each such key and why it is inert, as one
:class:`InertConfigWarning` per key, when the trainer resolves its config.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

__all__ = ["INERT_FIELDS", "INERT_KEYS", "InertConfigWarning", "check_inert_keys", "inert_settings"]

_SP = "sequence parallelism (Ulysses) is not implemented; every rank holds whole sequences"

# config class name -> {field: why it has no effect}
INERT_FIELDS: dict[str, dict[str, str]] = {
    "DataConfig": {
        "image_key": "multi-modal rows are not supported: images are not read",
        "video_key": "multi-modal rows are not supported: videos are not read",
    },
    "FSDPActorConfig": {"ulysses_sequence_parallel_size": _SP},
    "FSDPCriticConfig": {"ulysses_sequence_parallel_size": _SP},
}

# dotted key -> why it has no effect there: a field that acts in one group but not in another of the same class
INERT_KEYS: dict[str, str] = {
    "critic.model.use_fused_kernels": "the fused kernels replace an LM head; the critic's value head has none",
}


class InertConfigWarning(UserWarning):
    """A config key was set to a non-default value that has no effect in this build."""


def _default_of(config: Any, name: str) -> Any:
    for f in dataclasses.fields(config):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    return dataclasses.MISSING


def inert_settings(config: Any, prefix: str = "") -> list[tuple[str, Any, str]]:
    """``(key, value, reason)`` for every inert key of the typed ``config`` tree that differs from its default."""
    if not dataclasses.is_dataclass(config):
        return []
    found = []
    inert = {}
    for cls in type(config).__mro__:
        inert = {**INERT_FIELDS.get(cls.__name__, {}), **inert}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name, None)
        key = f"{prefix}{f.name}"
        reason = inert.get(f.name, INERT_KEYS.get(key))
        if reason is not None:
            default = _default_of(config, f.name)
            if default is not dataclasses.MISSING and value != default:
                found.append((key, value, reason))
            continue
        found.extend(inert_settings(value, key + "."))
    return found


def check_inert_keys(config: Any) -> list[str]:
    """Warn once per inert key set to a non-default value in the typed trainer ``config``; return the messages."""
    messages = [f"config: {key}={value!r} has no effect in this build ({reason})"
                for key, value, reason in inert_settings(config)]
    for message in messages:
        warnings.warn(message, InertConfigWarning, stacklevel=2)
    return messages
