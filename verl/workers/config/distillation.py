"""verl's ``verl.workers.config.distillation`` path for the distillation configs. The loss and top-level configs live
with the distillation losses in :mod:`verl.trainer.distillation.config`; a teacher's config is here."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.base_config import BaseConfig
from verl.trainer.distillation.config import DistillationConfig, DistillationLossConfig
from verl.workers.config.rollout import RolloutConfig

__all__ = ["DistillationConfig", "DistillationLossConfig", "DistillationTeacherModelConfig"]


@dataclass
class DistillationTeacherModelConfig(BaseConfig):
    """One teacher of verl's on-policy distillation (an entry of ``distillation.teacher_models``): the samples whose
    ``key`` routes to it, its ``model_path``, the rollout engine that serves it (``inference``) and how many
    replicas of it run. This build has no distillation trainer; recipes may build and read it."""

    _mutable_fields = frozenset({"num_replicas", "key"})

    key: str | None = None
    model_path: str | None = None
    inference: RolloutConfig = field(default_factory=RolloutConfig)
    num_replicas: int | None = 0

    @property
    def per_replica_world_size(self) -> int:
        """GPUs one replica spans: tensor x data x pipeline parallel size of ``inference``."""
        inference = self.inference
        return (
            inference.tensor_model_parallel_size * inference.data_parallel_size * inference.pipeline_model_parallel_size
        )

    @property
    def world_size(self) -> int:
        return (self.num_replicas or 0) * self.per_replica_world_size
