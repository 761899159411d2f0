"""Interactions: an environment that answers the model with a *user* turn (feedback, a follow-up question).

The tool agent loop consults the sample's interaction after every model turn that called no tool: the interaction
either ends the conversation or returns the next user message, which the loop renders through the chat template
and appends with mask 0 (the model did not write it). Optional: a sample without ``interaction_kwargs`` runs
without one.

Config file (``rollout.multi_turn.interaction_config_path``, the verl project's format)::

    interaction:
      - name: scripted                                    # what a sample's interaction_kwargs.name selects
        class_name: verl.experimental.agent_loop.interaction.ScriptedInteraction
        config: {replies: ["Are you sure?"]}

A sample selects one with ``interaction_kwargs: {name: scripted, ...}`` (top-level column or inside
``extra_info``); the other keys reach ``start_interaction``/``generate_response``. With a single configured
interaction the name may be omitted.
"""

from __future__ import annotations

import abc
import importlib
import uuid
from pathlib import Path
from typing import Any

__all__ = [
    "BaseInteraction",
    "ScriptedInteraction",
    "initialize_interactions_from_config",
    "select_interaction",
]

CONFIG_KEY = "rollout.multi_turn.interaction_config_path"


class BaseInteraction(abc.ABC):
    """One kind of simulated user. State per conversation lives in ``self._instances`` keyed by instance id
    (one object serves every trajectory of the process)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.config = dict(config or {})
        self.name = str(self.config.get("name", type(self).__name__))
        self._instances: dict[str, dict[str, Any]] = {}

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        instance_id = instance_id or uuid.uuid4().hex
        self._instances[instance_id] = {"kwargs": dict(kwargs), "turn": 0}
        return instance_id

    @abc.abstractmethod
    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        """The user's answer to the conversation so far: (end the conversation?, user message, turn score,
        extra data)."""

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)


class ScriptedInteraction(BaseInteraction):
    """Plays back fixed user turns in order, then ends the conversation.

    Replies come from the sample's ``interaction_kwargs["replies"]``, else from ``config["replies"]``. When the
    sample gives a ``ground_truth``, a model turn containing it scores 1.0 and ends the conversation early.
    """

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        state = self._instances.setdefault(instance_id, {"kwargs": {}, "turn": 0})
        settings = {**state["kwargs"], **kwargs}
        replies = list(settings.get("replies", self.config.get("replies", [])))
        last = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "assistant"), "")
        truth = settings.get("ground_truth")
        if truth is not None and str(truth) in str(last):
            return True, "", 1.0, {"solved": True}
        turn = state["turn"]
        if turn >= len(replies):
            return True, "", 0.0, {"solved": False}
        state["turn"] = turn + 1
        return False, str(replies[turn]), 0.0, {"turn": turn}


def _import_class(target: str, where: str) -> type:
    module_name, _, attr = target.rpartition(".")
    if not module_name:
        raise ValueError(f"{where}: class_name {target!r} must be 'package.module.Class'")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ImportError(f"{where}: cannot load class_name {target!r}: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, BaseInteraction)):
        raise TypeError(f"{where}: class_name {target!r} is not a BaseInteraction subclass")
    return cls


def initialize_interactions_from_config(path: str | Path) -> dict[str, BaseInteraction]:
    """Build every interaction the file lists; returns them by name (names must be unique)."""
    from omegaconf import OmegaConf

    file = Path(str(path)).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"{CONFIG_KEY}={str(path)!r}: no such file")
    data = OmegaConf.to_container(OmegaConf.load(file), resolve=True)
    if not isinstance(data, dict) or not isinstance(data.get("interaction"), list):
        raise ValueError(f"{CONFIG_KEY}={str(path)!r}: must be a mapping with an 'interaction' list")
    interactions: dict[str, BaseInteraction] = {}
    for i, entry in enumerate(data["interaction"]):
        where = f"{CONFIG_KEY}={str(path)!r} interaction[{i}]"
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise ValueError(f"{where}: every entry needs 'class_name' (and usually 'name'), got {entry!r}")
        cls = _import_class(str(entry["class_name"]), where)
        config = dict(entry.get("config") or {})
        name = str(entry.get("name") or config.get("name") or cls.__name__)
        config["name"] = name
        if name in interactions:
            raise ValueError(f"{where}: two interactions are named {name!r}")
        interactions[name] = cls(config)
    return interactions


def select_interaction(
    interactions: dict[str, BaseInteraction], interaction_kwargs: dict[str, Any] | None
) -> BaseInteraction | None:
    """The interaction a sample asks for: None without ``interaction_kwargs``; ValueError for an unknown name."""
    if not interaction_kwargs:
        return None
    if not interactions:
        raise ValueError(
            f"a sample has interaction_kwargs {interaction_kwargs!r} but {CONFIG_KEY} configures no interaction"
        )
    name = interaction_kwargs.get("name")
    if name is None:
        if len(interactions) == 1:
            return next(iter(interactions.values()))
        raise ValueError(
            f"interaction_kwargs has no 'name' and {len(interactions)} interactions are configured: "
            f"{sorted(interactions)}"
        )
    if name not in interactions:
        raise ValueError(
            f"interaction_kwargs.name={name!r} is not configured in {CONFIG_KEY}; configured: {sorted(interactions)}"
        )
    return interactions[name]
