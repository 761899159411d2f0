"""On-policy distillation: its configs and losses (:mod:`.losses`, :mod:`.config`).

The losses are usable on their own (they are tensor maths over a micro-batch); the distillation trainer that serves
teacher models beside the policy is not part of this build (``main_ppo`` refuses ``distillation.enabled=true``).
"""

from verl.trainer.distillation.config import DistillationConfig, DistillationLossConfig
from verl.trainer.distillation.losses import (
    DISTILLATION_LOSS_REGISTRY,
    DISTILLATION_SETTINGS_REGISTRY,
    DistillationLossFn,
    DistillationLossSettings,
    compute_distillation_loss_range,
    compute_distillation_loss_reverse_kl_estimator,
    compute_forward_kl_topk,
    compute_topk_loss,
    distillation_loss,
    distillation_ppo_loss,
    get_distillation_loss_fn,
    get_distillation_loss_settings,
    is_distillation_enabled,
    register_distillation_loss,
)

__all__ = [
    "DISTILLATION_LOSS_REGISTRY",
    "DISTILLATION_SETTINGS_REGISTRY",
    "DistillationConfig",
    "DistillationLossConfig",
    "DistillationLossFn",
    "DistillationLossSettings",
    "compute_distillation_loss_range",
    "compute_distillation_loss_reverse_kl_estimator",
    "compute_forward_kl_topk",
    "compute_topk_loss",
    "distillation_loss",
    "distillation_ppo_loss",
    "get_distillation_loss_fn",
    "get_distillation_loss_settings",
    "is_distillation_enabled",
    "register_distillation_loss",
]
