"""Distillation configs (verl's ``distillation`` block): which loss, how it combines with the policy loss, and the
teachers.

This build has no distillation *trainer* (teacher models served next to the policy; ``main_ppo`` refuses
``distillation.enabled=true``), but the losses of :mod:`verl.trainer.distillation.losses` are plain tensor maths and
read these configs. :class:`DistillationConfig` therefore keeps the teacher settings as given (``teacher_models``)
without validating them against a teacher pool. ``loss_mode`` is checked against the losses' registry when a
:class:`DistillationLossConfig` is built (imported then, so this module does not import the trainer's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig, check
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


@dataclass
class DistillationLossConfig(BaseConfig):
    """``distillation.distillation_loss``.

    ``loss_mode``: a registered distillation loss (``k1``/``kl``, ``k3``/``low_var_kl``, ``k2``/``mse``, ``abs``:
    single-sample estimators of KL(student || teacher) on the sampled tokens; ``forward_kl_topk``: KL(teacher ||
    student) over the teacher's top-``topk`` tokens). ``use_policy_gradient``: use the negated per-token loss as the
    advantage of a clipped policy-gradient step (on-policy distillation; pairs with ``k1``), else back-propagate it
    as a supervised loss (pairs with ``k3``/``forward_kl_topk``; ``k1`` is refused there because its gradient does
    not depend on the teacher). ``use_task_rewards``: also optimise the PPO loss on task rewards, adding the
    distillation loss times ``distillation_loss_coef``. ``loss_max_clamp`` bounds the per-token loss,
    ``log_prob_min_clamp`` the top-k log-probabilities.
    """

    loss_mode: str = "k3"
    topk: int | None = 128
    use_task_rewards: bool = True
    distillation_loss_coef: float = 1.0
    loss_max_clamp: float | None = 10.0
    log_prob_min_clamp: float | None = -10.0
    use_chunked_topk: bool = False
    chunked_topk_chunk_size: int = 4096
    use_policy_gradient: bool = True
    policy_loss_mode: str = "vanilla"
    clip_ratio: float = 0.2
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    global_batch_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from verl.trainer.distillation.losses import get_distillation_loss_settings

        get_distillation_loss_settings(self.loss_mode)  # ValueError naming the registered modes
        check(
            self.policy_loss_mode == "vanilla",
            "policy_loss_mode",
            f"only 'vanilla' is supported with use_policy_gradient, got {self.policy_loss_mode!r}",
        )
        check(
            self.use_policy_gradient or self.loss_mode not in ("k1", "kl"),
            "loss_mode",
            f"{self.loss_mode!r} as a supervised loss (use_policy_gradient=false) has a gradient that does not "
            "depend on the teacher; use k3 or forward_kl_topk, or set use_policy_gradient=true",
        )
        check(
            self.chunked_topk_chunk_size >= 1,
            "chunked_topk_chunk_size",
            f"must be >= 1, got {self.chunked_topk_chunk_size}",
        )
        check(self.topk is None or self.topk >= 1, "topk", f"must be >= 1 or null, got {self.topk}")

    @property
    def loss_settings(self) -> Any:
        """The :class:`~verl.trainer.distillation.losses.DistillationLossSettings` of ``loss_mode``."""
        from verl.trainer.distillation.losses import get_distillation_loss_settings

        return get_distillation_loss_settings(self.loss_mode)


@dataclass
class DistillationConfig(BaseConfig):
    """verl's top-level ``distillation`` block; ``enabled`` turns on-policy distillation on (refused by this
    build's trainer), ``teacher_key`` routes samples to ``teacher_models`` entries."""

    enabled: bool = False
    n_gpus_per_node: int = 0
    nnodes: int = 0
    teacher_models: dict[str, Any] = field(default_factory=dict)
    teacher_key: str = "data_source"
    distillation_loss: DistillationLossConfig = field(default_factory=DistillationLossConfig)

    def __post_init__(self) -> None:
        if isinstance(self.distillation_loss, dict):
            object.__setattr__(self, "distillation_loss", DistillationLossConfig(**self.distillation_loss))
