"""One optimizer step with gradient-norm clipping that refuses to apply a non-finite gradient.

A NaN or inf anywhere in the gradient (a NaN advantage, an overflow) would
poison every parameter and the optimizer state for good. The step is skipped
instead, the gradient dropped, and the caller reports it so a run survives a
bad batch and the operator sees that it happened.
"""

from __future__ import annotations

import logging
import math

import torch
from torch import nn

__all__ = ["resolve_grad_clip", "clip_and_step"]

logger = logging.getLogger(__name__)


def resolve_grad_clip(value: float | None, name: str) -> float:
    """``None`` means no clipping (the norm is still measured); otherwise the bound must be positive."""
    if value is None:
        return math.inf
    if not value > 0:
        raise ValueError(f"{name} must be positive or null (no clipping), got {value!r}")
    return float(value)


def clip_and_step(
    module: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float, who: str, *, zero_grad: bool = True
) -> tuple[float, bool]:
    """Clip the gradients of ``module`` to ``max_norm`` and step ``optimizer`` unless the norm is not finite.

    Works for plain and FSDP2 (DTensor) parameters: ``clip_grad_norm_`` reduces
    across shards and every rank sees the same total, so all ranks skip
    together. Returns ``(grad_norm, stepped)``; gradients are cleared either way
    unless ``zero_grad`` is false (then the caller clears them).
    """
    total = torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm=max_norm)
    if hasattr(total, "full_tensor"):
        total = total.full_tensor()
    grad_norm = float(total)
    stepped = math.isfinite(grad_norm)
    if stepped:
        optimizer.step()
    else:
        logger.warning("%s: gradient norm is %s; optimizer step skipped and gradients dropped", who, grad_norm)
    if zero_grad:
        optimizer.zero_grad(set_to_none=True)
    return grad_norm, stepped
