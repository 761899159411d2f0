"""Small shared helpers for the algorithm modules (config reads, registry identity)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["cfg_get", "same_function"]


def cfg_get(config: Any, key: str, default: Any) -> Any:
    """Read ``key`` from an attribute-style or mapping config; None or missing gives ``default``."""
    if config is None:
        return default
    value = config.get(key, default) if isinstance(config, Mapping) else getattr(config, key, default)
    return default if value is None else value


def same_function(a: Callable, b: Callable) -> bool:
    """True for the same object or the same definition re-imported (importlib.reload, unpickled workers)."""
    if a is b:
        return True
    return (getattr(a, "__module__", None), getattr(a, "__qualname__", None)) == (
        getattr(b, "__module__", None),
        getattr(b, "__qualname__", None),
    )
