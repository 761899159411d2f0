"""Name, once at start-up, the keys a recipe's YAML added to our groups: kept for its code, read by nothing here.

``build_ppo_config`` keeps such keys in each config's ``_extra`` instead of refusing them (recipes extend our YAML
with keys of their own). A misspelt key of ours would be kept the same way when it is not close enough to be
refused as a typo, so each one is named with the nearest field, if any.
"""

from __future__ import annotations

import dataclasses
import difflib
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["RecipeKeyWarning", "recipe_keys", "warn_recipe_keys"]


class RecipeKeyWarning(UserWarning):
    """A key no config class declares was kept for recipe code."""


def recipe_keys(config: Any, prefix: str = "") -> Iterator[tuple[str, Any, str | None]]:
    """``(dotted key, value, nearest field or None)`` for every kept key of the typed ``config`` tree."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        return
    fields = [f.name for f in dataclasses.fields(config) if not f.name.startswith("_")]
    for key, value in (config.__dict__.get("_extra") or {}).items():
        close = difflib.get_close_matches(str(key), fields, n=1)
        yield f"{prefix}{key}", value, close[0] if close else None
    for name in fields:
        yield from recipe_keys(getattr(config, name, None), f"{prefix}{name}.")


def warn_recipe_keys(config: Any) -> list[str]:
    """Warn once per kept key of the typed trainer ``config``; return the messages."""
    messages = []
    for key, value, close in recipe_keys(config):
        hint = f"; did you mean '{key.rpartition('.')[0]}.{close}'?" if close else ""
        messages.append(f"config: {key}={value!r} is no key of this build; kept for recipe code{hint}")
    for message in messages:
        warnings.warn(message, RecipeKeyWarning, stacklevel=2)
    return messages
