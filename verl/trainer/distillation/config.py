"""verl's distillation configs, defined in :mod:`verl.workers.config.distillation` (kept importable here)."""

from verl.workers.config.distillation import DistillationConfig, DistillationLossConfig

__all__ = ["DistillationConfig", "DistillationLossConfig"]
