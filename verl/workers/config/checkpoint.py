"""verl's ``verl.workers.config.checkpoint``: backend-specific extensions of :class:`CheckpointConfig`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.workers.config.actor import CheckpointConfig

__all__ = ["CheckpointConfig", "McoreCheckpointConfig"]


@dataclass
class McoreCheckpointConfig(CheckpointConfig):
    """The Megatron checkpoint config: ``mbridge_config`` holds keyword arguments for the model bridge's weight
    export. It is here for recipes that build Megatron configs; no engine here uses it."""

    mbridge_config: dict[str, Any] = field(default_factory=dict)
