"""The critic interface that workers program against (see ``verl.workers.actor.base``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from verl.protocol import DataProto

__all__ = ["BasePPOCritic"]


class BasePPOCritic(ABC):
    """A value function over response tokens."""

    def __init__(self, config: Any) -> None:
        self.config = config

    @abstractmethod
    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Return the value estimate before each response token ([N, R]), zero outside ``response_mask``."""

    @abstractmethod
    def update_critic(self, data: DataProto) -> dict[str, list[float]]:
        """Regress the values towards ``returns`` and return metrics as lists of per-step values."""
