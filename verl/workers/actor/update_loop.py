"""The PPO update loop shared by the actor and the critic.

``epochs x mini-batches`` optimizer steps, each accumulating the gradients of
its micro-batches; the caller supplies only the loss of one micro-batch. Sizes
come from the actor/critic config and are counted in samples on this rank
(the worker has already multiplied prompt counts by ``rollout.n`` and divided
by the data-parallel size).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from verl.workers.actor.batching import (
    append_metrics,
    iter_mini_batches,
    micro_loss_scale,
    positive_int,
    split_micro_batches,
)
from verl.workers.actor.optim_step import clip_and_step, resolve_grad_clip
from verl.workers.actor.token_forward import module_device
from verl.workers.config.actor import ActorConfig
from verl.workers.config.critic import CriticConfig

__all__ = ["UpdatePlan", "MicroLossFn", "OptimizerStepFn", "run_updates"]

# (micro_batch, loss_scale) -> metrics of that micro-batch; the function calls backward itself.
MicroLossFn = Callable[[TensorDict, float], dict[str, Any]]
# () -> the gradient norm of the step it took (clip, step; a non-finite norm means the step was skipped).
OptimizerStepFn = Callable[[], float]


@dataclass(frozen=True)
class UpdatePlan:
    """How one ``update_*`` call walks its data; built from a config so every size is validated once, by name."""

    mini_batch_size: int
    epochs: int
    shuffle: bool
    micro_batch_size: int | None
    use_dynamic_bsz: bool
    max_token_len: int | None
    max_grad_norm: float
    loss_agg_mode: str
    group_by_length: bool = False  # fixed-size micro-batches cut in length order (a padded forward)

    @classmethod
    def from_config(
        cls, config: ActorConfig | CriticConfig, section: str, *, group_by_length: bool = False
    ) -> UpdatePlan:
        """Read the ``ppo_*`` sizes of an actor or critic config; ``section`` names it in errors."""
        use_dynamic = config.use_dynamic_bsz
        if use_dynamic:
            max_token_len = positive_int(config.ppo_max_token_len_per_gpu, f"{section}.ppo_max_token_len_per_gpu")
            micro = None
        else:
            max_token_len = None
            micro = positive_int(config.ppo_micro_batch_size_per_gpu, f"{section}.ppo_micro_batch_size_per_gpu")
        return cls(
            mini_batch_size=positive_int(config.ppo_mini_batch_size, f"{section}.ppo_mini_batch_size"),
            epochs=positive_int(config.ppo_epochs, f"{section}.ppo_epochs"),
            shuffle=config.shuffle,
            micro_batch_size=micro,
            use_dynamic_bsz=use_dynamic,
            max_token_len=max_token_len,
            max_grad_norm=resolve_grad_clip(config.grad_clip, f"{section}.grad_clip"),
            loss_agg_mode=config.loss_agg_mode,
            group_by_length=group_by_length,
        )


def run_updates(
    batch: TensorDict,
    plan: UpdatePlan,
    micro_loss: MicroLossFn,
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    prefix: str,
    optimizer_step: OptimizerStepFn | None = None,
) -> dict[str, list[float]]:
    """Run every optimizer step of ``plan`` over ``batch``.

    ``optimizer_step`` takes each step (the actor's or critic's overridable ``_optimizer_step``); by default the
    gradients are clipped to ``plan.max_grad_norm`` and ``optimizer`` steps unless their norm is not finite.
    Gradients are cleared after every step either way.

    Metrics: whatever ``micro_loss`` returns (one entry per micro-batch), plus
    ``{prefix}/grad_norm`` and ``{prefix}/step_skipped`` (1.0 when the norm was
    not finite and the step was skipped) per optimizer step, and ``{prefix}/lr``.
    """
    module.train()
    device = module_device(module)
    optimizer.zero_grad(set_to_none=True)
    metrics: dict[str, list[float]] = {}
    for mini in iter_mini_batches(batch, plan.mini_batch_size, plan.epochs, plan.shuffle, generator):
        micro_batches, _ = split_micro_batches(
            mini,
            micro_batch_size=plan.micro_batch_size,
            use_dynamic_bsz=plan.use_dynamic_bsz,
            max_token_len=plan.max_token_len,
            group_by_length=plan.group_by_length,
        )
        for micro in micro_batches:
            micro = micro.to(device)
            scale = micro_loss_scale(micro["response_mask"], mini["response_mask"].to(device), plan.loss_agg_mode)
            append_metrics(metrics, micro_loss(micro, scale))
        if optimizer_step is None:
            grad_norm, stepped = clip_and_step(module, optimizer, plan.max_grad_norm, who=f"{prefix} update")
        else:
            grad_norm = optimizer_step()
            stepped = math.isfinite(grad_norm)
            optimizer.zero_grad(set_to_none=True)
        append_metrics(metrics, {f"{prefix}/grad_norm": grad_norm, f"{prefix}/step_skipped": 0.0 if stepped else 1.0})
    append_metrics(metrics, {f"{prefix}/lr": float(optimizer.param_groups[0]["lr"])})
    return metrics
