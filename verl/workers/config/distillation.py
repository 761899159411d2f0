"""verl's ``verl.workers.config.distillation`` path for the distillation configs, which live with the distillation
losses in :mod:`verl.trainer.distillation.config`."""

from verl.trainer.distillation.config import DistillationConfig, DistillationLossConfig

__all__ = ["DistillationConfig", "DistillationLossConfig"]
