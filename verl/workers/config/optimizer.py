"""OptimizerConfig: AdamW plus learning-rate schedule (``actor.optim``, ``critic.optim``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl.base_config import BaseConfig, check

__all__ = ["LR_SCHEDULER_TYPES", "FSDPOptimizerConfig", "OptimizerConfig", "build_optimizer"]

LR_SCHEDULER_TYPES = ("constant", "cosine")


@dataclass
class OptimizerConfig(BaseConfig):
    """Optimizer and schedule. ``total_training_steps`` is injected by the trainer once the data size is known,
    which is why it is the one mutable field. ``lr_warmup_steps > 0`` wins over ``lr_warmup_steps_ratio``.

    verl's ``warmup_style`` is the older name of ``lr_scheduler_type`` and sets it when given; likewise its
    deprecated ``grad_clip`` sets ``clip_grad`` (the PPO actor and critic clip by their own ``grad_clip``, which
    ``clip_grad`` follows in the packaged YAML). Optimizers come from ``torch.optim`` only (``optimizer_impl``);
    ``zero_indexed_step`` and ``override_optimizer_config`` are accepted
    without effect (``inert_keys.py``)."""

    _mutable_fields = frozenset({"total_training_steps"})

    optimizer: str = "AdamW"
    lr: float = 1e-6
    lr_warmup_steps: int = -1
    lr_warmup_steps_ratio: float = 0.0
    total_training_steps: int = -1
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    clip_grad: float = 1.0
    lr_scheduler_type: str = "constant"
    min_lr_ratio: float = 0.0
    num_cycles: float = 0.5
    optimizer_impl: str = "torch.optim"
    zero_indexed_step: bool = True
    warmup_style: str | None = None
    override_optimizer_config: dict[str, Any] | None = None
    grad_clip: float | None = None

    def __post_init__(self) -> None:
        if self.grad_clip is not None:
            object.__setattr__(self, "clip_grad", self.grad_clip)
        if self.warmup_style is not None:
            check(
                self.lr_scheduler_type in ("constant", self.warmup_style),
                "warmup_style",
                f"({self.warmup_style!r}) and lr_scheduler_type ({self.lr_scheduler_type!r}) disagree; "
                "set lr_scheduler_type only",
            )
            check(
                self.warmup_style in LR_SCHEDULER_TYPES,
                "warmup_style",
                f"must be one of {list(LR_SCHEDULER_TYPES)}, got {self.warmup_style!r}",
            )
            object.__setattr__(self, "lr_scheduler_type", self.warmup_style)
        check(
            self.optimizer_impl == "torch.optim",
            "optimizer_impl",
            f"{self.optimizer_impl!r} is not available: optimizers are built from torch.optim (optimizer=AdamW)",
        )
        check(self.lr >= 0, "lr", f"must be >= 0, got {self.lr}")
        check(
            0.0 <= self.lr_warmup_steps_ratio <= 1.0,
            "lr_warmup_steps_ratio",
            f"must be in [0, 1], got {self.lr_warmup_steps_ratio}",
        )
        check(self.weight_decay >= 0, "weight_decay", f"must be >= 0, got {self.weight_decay}")
        check(all(0.0 <= b < 1.0 for b in self.betas), "betas", f"each beta must be in [0, 1), got {self.betas}")
        check(self.clip_grad > 0, "clip_grad", f"must be > 0, got {self.clip_grad}")
        check(
            self.lr_scheduler_type in LR_SCHEDULER_TYPES,
            "lr_scheduler_type",
            f"must be one of {list(LR_SCHEDULER_TYPES)}, got {self.lr_scheduler_type!r}",
        )
        check(0.0 <= self.min_lr_ratio <= 1.0, "min_lr_ratio", f"must be in [0, 1], got {self.min_lr_ratio}")

    def warmup_steps(self, total_steps: int) -> int:
        """Number of warm-up steps for a run of ``total_steps`` updates."""
        if self.lr_warmup_steps > 0:
            return self.lr_warmup_steps
        return int(self.lr_warmup_steps_ratio * total_steps)


@dataclass
class FSDPOptimizerConfig(OptimizerConfig):
    """verl's name for the optimizer config of the FSDP engine; the same fields as :class:`OptimizerConfig`."""


def build_optimizer(parameters: Any, config: OptimizerConfig) -> Any:
    """The optimizer ``config`` describes over ``parameters`` (verl's helper next to its config): AdamW over the
    trainable ones, as the FSDP workers build it (:func:`verl.workers.fsdp.optimizer.build_optimizer`, imported here
    on first use so that reading configs does not load the worker stack)."""
    from verl.workers.fsdp.optimizer import build_optimizer as build_adamw

    return build_adamw(parameters, config, key="optim")
