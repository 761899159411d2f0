"""The recipe's own actor config: a dataclass of its own (not a subclass of verl's), with the keys it adds."""

from __future__ import annotations

from dataclasses import dataclass

from verl.base_config import BaseConfig


@dataclass
class BonusActorConfig(BaseConfig):
    strategy: str = "fsdp2"
    ppo_mini_batch_size: int = 256
    ppo_epochs: int = 1
    bonus_floor: float = 0.0
