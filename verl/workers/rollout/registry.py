"""Rollout server classes keyed by ``rollout.name``.

``hf`` is built in. ``vllm`` and ``sglang`` are optional extras: their adapter modules are imported
only when asked for, and asking without the package installed fails at start-up with the pip extra
to install rather than deep inside a worker.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable

from verl.workers.rollout.base import RolloutServer

__all__ = ["register_rollout", "get_rollout_class", "list_rollouts", "require_package"]

_REGISTRY: dict[str, type[RolloutServer]] = {}

# name -> (module:attribute of the server class, python package it needs, pip extra that installs it)
_LAZY: dict[str, tuple[str, str | None, str | None]] = {
    "hf": ("verl.workers.rollout.hf.server:HFRolloutServer", None, None),
    "vllm": ("verl.workers.rollout.vllm.server:VLLMRolloutServer", "vllm", "vllm"),
    "sglang": ("verl.workers.rollout.sglang.server:SGLangRolloutServer", "sglang", "sglang"),
}


def register_rollout(name: str) -> Callable[[type[RolloutServer]], type[RolloutServer]]:
    """Class decorator: make a ``RolloutServer`` subclass selectable as ``rollout.name=<name>``."""

    def decorator(cls: type[RolloutServer]) -> type[RolloutServer]:
        if not (isinstance(cls, type) and issubclass(cls, RolloutServer)):
            raise TypeError(f"register_rollout({name!r}): {cls!r} is not a RolloutServer subclass")
        existing = _REGISTRY.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(f"rollout.name={name!r} is already registered to {existing.__qualname__}")
        _REGISTRY[name] = cls
        return cls

    return decorator


def require_package(package: str, extra: str, name: str) -> None:
    """Fail with the pip extra to install when an optional engine package is missing."""
    if importlib.util.find_spec(package) is None:
        raise ImportError(
            f"rollout.name={name!r} needs the {package!r} package, which is not installed: "
            f"run `pip install verl[{extra}]` (or use rollout.name=hf, which needs nothing extra)"
        )


def get_rollout_class(name: str) -> type[RolloutServer]:
    """The server class for ``rollout.name``; imports optional adapters on first use."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name not in _LAZY:
        raise ValueError(f"rollout.name={name!r} is not a known rollout engine; known: {', '.join(list_rollouts())}")
    target, package, extra = _LAZY[name]
    if package is not None:
        require_package(package, extra, name)
    module_name, attr = target.split(":")
    cls = getattr(importlib.import_module(module_name), attr)
    _REGISTRY.setdefault(name, cls)
    return _REGISTRY[name]


def list_rollouts() -> list[str]:
    """Every selectable ``rollout.name``, registered or lazily importable."""
    return sorted(set(_REGISTRY) | set(_LAZY))
