"""KeyReader: walk a verl config tree key by key, so that every key is either used, knowingly ignored or refused.

verl's SFT command lines carry keys for features this trainer does not have (sequence parallelism, dynamic batch
sizes, CPU offload, ...). Reading the tree through one object makes each key's fate explicit: ``take`` uses a value,
``ignore`` accepts a performance-only knob (a warning when it is not at verl's default), ``refuse`` fails with the key
and the reason when a value asks for behaviour this trainer cannot give, and ``finish`` rejects whatever no one read
(a key from a user's YAML that verl does not know either).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from verl.base_config import ConfigError

__all__ = ["KeyReader"]

logger = logging.getLogger(__name__)

_MISSING = object()


class KeyReader:
    """Pops dotted keys out of a copy of ``tree`` (a plain nested dict, interpolations resolved)."""

    def __init__(self, tree: dict[str, Any]) -> None:
        self.tree = copy.deepcopy(tree)
        self.ignored: list[str] = []

    def _parent(self, dotted: str) -> tuple[dict[str, Any] | None, str]:
        *parents, leaf = dotted.split(".")
        node: Any = self.tree
        for name in parents:
            node = node.get(name) if isinstance(node, dict) else None
            if node is None:
                return None, leaf
        return (node if isinstance(node, dict) else None), leaf

    def has(self, dotted: str) -> bool:
        parent, leaf = self._parent(dotted)
        return parent is not None and leaf in parent

    def take(self, dotted: str, default: Any = _MISSING) -> Any:
        """The value of ``dotted`` (removed from the tree); ``default`` when absent, else a ConfigError."""
        parent, leaf = self._parent(dotted)
        if parent is None or leaf not in parent:
            if default is _MISSING:
                raise ConfigError("is required", key=dotted)
            return default
        return parent.pop(leaf)

    def ignore(self, dotted: str, default: Any, why: str) -> None:
        """Accept a key that changes speed or memory only; note it when set away from ``default``."""
        value = self.take(dotted, default)
        if value != default and not (value in (None, "none") and default in (None, "none")):
            self.ignored.append(f"{dotted}={value!r} ({why})")

    def refuse(self, dotted: str, allowed: tuple[Any, ...], why: str) -> Any:
        """Return the value of ``dotted`` if it is one of ``allowed`` (or absent), else fail with ``why``."""
        value = self.take(dotted, allowed[0])
        if value not in allowed:
            raise ConfigError(f"is {value!r}: {why}", key=dotted)
        return value

    def finish(self, what: str) -> None:
        """Fail on keys nobody read; log the ignored ones once."""
        left = sorted(_leaves(self.tree))
        if left:
            raise ConfigError(f"unknown key(s) {left} for {what}")
        if self.ignored:
            logger.warning("%s: these settings have no effect here: %s", what, "; ".join(self.ignored))


def _leaves(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return [prefix] if prefix else []
    out: list[str] = []
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and not value:
            continue  # an emptied group
        out += _leaves(value, path)
    return out
