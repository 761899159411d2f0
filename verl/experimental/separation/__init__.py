"""Trainers whose rollout runs on a resource pool of its own (verl's ``separation`` package)."""

from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer

__all__ = ["SeparateRayPPOTrainer"]
