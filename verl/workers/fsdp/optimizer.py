"""AdamW and its learning-rate schedule from an ``OptimizerConfig`` (``actor.optim`` / ``critic.optim``).

The schedule is a ``LambdaLR`` stepped once per ``update_actor`` / ``update_critic`` call (one trainer step), so
``total_training_steps`` counts trainer steps, as the trainer injects it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from verl.utils.torch_functional import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup

if TYPE_CHECKING:
    from verl.workers.config.optimizer import OptimizerConfig

__all__ = ["optim_config_of", "build_optimizer", "build_lr_scheduler", "cover_new_param_groups"]


def optim_config_of(optim_config: Any, key: str = "actor.optim") -> OptimizerConfig:
    """``optim_config`` as an ``OptimizerConfig``: itself, or built from a DictConfig / dict (``key`` names it)."""
    from verl.utils.config_builder import as_config
    from verl.workers.config.optimizer import OptimizerConfig

    return as_config(optim_config, OptimizerConfig, key)


def build_optimizer(params: Iterable[nn.Parameter], optim_config: Any, key: str = "actor.optim") -> torch.optim.AdamW:
    """AdamW over the parameters that require gradients (LoRA: the adapters only). ``optim_config``: an
    ``OptimizerConfig`` or a DictConfig / dict of its fields."""
    optim_config = optim_config_of(optim_config, key)
    name = optim_config.optimizer
    if name.lower() not in ("adamw", "adam_w"):
        raise ValueError(f"{key}.optimizer={name!r} is not supported; use AdamW")
    trainable = [p for p in params if p.requires_grad]
    if not trainable:
        raise ValueError(f"{key}: the model has no trainable parameters")
    betas = tuple(float(b) for b in optim_config.betas)
    return torch.optim.AdamW(
        trainable,
        lr=float(optim_config.lr),
        betas=betas,
        weight_decay=float(optim_config.weight_decay),
    )


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer, optim_config: Any, key: str = "actor.optim"
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up (``lr_warmup_steps`` or ``lr_warmup_steps_ratio``), then constant or cosine decay.

    Cosine needs ``total_training_steps`` (the trainer sets it once it knows the data size); a ratio warm-up needs it
    too. Errors name the key.
    """
    optim_config = optim_config_of(optim_config, key)
    kind = optim_config.lr_scheduler_type
    total = int(optim_config.total_training_steps)
    warmup_steps = int(optim_config.lr_warmup_steps)
    ratio = float(optim_config.lr_warmup_steps_ratio)
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
            min_lr_ratio=float(optim_config.min_lr_ratio),
            num_cycles=float(optim_config.num_cycles),
        )
    raise ValueError(f"{key}.lr_scheduler_type={kind!r} is not supported; use constant or cosine")


def cover_new_param_groups(lr_scheduler: Any, optimizer: torch.optim.Optimizer, who: str) -> int:
    """Extend ``lr_scheduler`` to the param groups added to ``optimizer`` after it was built (a recipe's head added
    with ``add_param_group``): each follows the first group's schedule, relative to its own ``lr``. Without this a
    schedule steps only the groups it knew, and torch refuses to step it at all. Returns how many were added.

    Raises ValueError naming ``who`` for a scheduler that is not a per-group ``LambdaLR`` (its groups cannot be
    extended); build it after the last ``add_param_group`` then.
    """
    base_lrs = getattr(lr_scheduler, "base_lrs", None)
    if base_lrs is None or len(base_lrs) >= len(optimizer.param_groups):
        return 0
    lambdas = getattr(lr_scheduler, "lr_lambdas", None)
    if getattr(lr_scheduler, "optimizer", None) is not optimizer or not lambdas:
        raise ValueError(
            f"{who}: the lr_scheduler ({type(lr_scheduler).__name__}) covers {len(base_lrs)} param groups but the "
            f"optimizer has {len(optimizer.param_groups)}; build the scheduler after adding param groups"
        )
    added = optimizer.param_groups[len(base_lrs) :]
    for group in added:
        group.setdefault("initial_lr", group["lr"])
        base_lrs.append(group["initial_lr"])
        lambdas.append(lambdas[0])
        group["lr"] = group["initial_lr"] * lambdas[0](lr_scheduler.last_epoch)
    lr_scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
    return len(added)
