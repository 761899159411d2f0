"""The actor interface that workers program against.

Workers hold a ``BasePPOActor`` and never look behind it, so a different
training backend (another parallelism strategy, another framework) can be
dropped in without touching the worker or the trainer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from verl.protocol import DataProto

__all__ = ["BasePPOActor"]


class BasePPOActor(ABC):
    """A policy that scores responses and learns from advantages."""

    def __init__(self, config: Any) -> None:
        self.config = config

    @abstractmethod
    def compute_log_prob(
        self, data: DataProto, calculate_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Return per-token log-probs of ``data.batch['responses']`` ([N, R]) and, if asked, their entropy."""

    @abstractmethod
    def update_policy(self, data: DataProto) -> dict[str, list[float]]:
        """Run the PPO update on ``data`` and return metrics as lists of per-step values."""
