"""Build the interactions a multi-turn rollout offers from ``rollout.multi_turn.interaction_config_path``.

verl's import path for the agent loop's loader. ``get_interaction_class("pkg.module.Class")`` imports one
interaction class by its qualified name, checking that it is a ``BaseInteraction``.
"""

from __future__ import annotations

import importlib

from verl.experimental.agent_loop.interaction import BaseInteraction, initialize_interactions_from_config

__all__ = ["get_interaction_class", "initialize_interactions_from_config"]


def get_interaction_class(cls_name: str) -> type[BaseInteraction]:
    """The class named ``cls_name`` (``package.module.Class``); errors name the class path."""
    module_name, _, attr = str(cls_name).rpartition(".")
    if not module_name:
        raise ValueError(f"interaction class_name {cls_name!r} must be 'package.module.Class'")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ImportError(f"cannot load interaction class_name {cls_name!r}: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, BaseInteraction)):
        raise TypeError(f"interaction class_name {cls_name!r} is not a BaseInteraction subclass")
    return cls
