"""AdamW and its learning-rate schedule from an ``OptimizerConfig`` (``actor.optim`` / ``critic.optim``).

The schedule is a ``LambdaLR`` stepped once per ``update_actor`` / ``update_critic`` call (one trainer step), so
``total_training_steps`` counts trainer steps, as the trainer injects it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from verl.utils.torch_functional import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup

__all__ = ["build_optimizer", "build_lr_scheduler"]


def build_optimizer(params: Iterable[nn.Parameter], optim_config: Any, key: str = "actor.optim") -> torch.optim.AdamW:
    """AdamW over the parameters that require gradients (LoRA: the adapters only)."""
    name = str(getattr(optim_config, "optimizer", "AdamW") or "AdamW")
    if name.lower() not in ("adamw", "adam_w"):
        raise ValueError(f"{key}.optimizer={name!r} is not supported; use AdamW")
    trainable = [p for p in params if p.requires_grad]
    if not trainable:
        raise ValueError(f"{key}: the model has no trainable parameters")
    betas = tuple(float(b) for b in getattr(optim_config, "betas", (0.9, 0.999)))
    return torch.optim.AdamW(
        trainable,
        lr=float(optim_config.lr),
        betas=betas,
        weight_decay=float(getattr(optim_config, "weight_decay", 0.01)),
    )


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer, optim_config: Any, key: str = "actor.optim"
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up (``lr_warmup_steps`` or ``lr_warmup_steps_ratio``), then constant or cosine decay.

    Cosine needs ``total_training_steps`` (the trainer sets it once it knows the data size); a ratio warm-up needs it
    too. Errors name the key.
    """
    kind = str(getattr(optim_config, "lr_scheduler_type", "constant") or "constant")
    total = int(getattr(optim_config, "total_training_steps", -1) or -1)
    warmup_steps = int(getattr(optim_config, "lr_warmup_steps", -1) or -1)
    ratio = float(getattr(optim_config, "lr_warmup_steps_ratio", 0.0) or 0.0)
    if warmup_steps <= 0 and ratio > 0 and total <= 0:
        raise ValueError(
            f"{key}.lr_warmup_steps_ratio={ratio} needs {key}.total_training_steps (> 0), got {total}; "
            f"set lr_warmup_steps instead or let the trainer inject total_training_steps"
        )
    warmup = warmup_steps if warmup_steps > 0 else int(ratio * max(total, 0))
    if kind == "constant":
        return get_constant_schedule_with_warmup(optimizer, num_warmup_steps=warmup)
    if kind == "cosine":
        if total <= 0:
            raise ValueError(f"{key}.lr_scheduler_type=cosine needs {key}.total_training_steps > 0, got {total}")
        return get_cosine_schedule_with_warmup(
            optimizer,
            num_warmup_steps=warmup,
            num_training_steps=total,
            min_lr_ratio=float(getattr(optim_config, "min_lr_ratio", 0.0) or 0.0),
            num_cycles=float(getattr(optim_config, "num_cycles", 0.5)),
        )
    raise ValueError(f"{key}.lr_scheduler_type={kind!r} is not supported; use constant or cosine")
