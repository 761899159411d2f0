"""CPU copies of a module's own shard of weights, to compute under an earlier policy and come back.

The async trainers take old log-probs under the weights that generated a sample, which after a few local updates
are no longer the actor's. Each rank keeps its local shard only (``DTensor.to_local()``), so a snapshot costs
``model bytes / world size`` of host memory per rank and saving or restoring one is a local copy, no collective.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["restore_from_cpu", "snapshot_to_cpu"]


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _named_state(module: nn.Module) -> dict[str, torch.Tensor]:
    state = dict(module.named_parameters())
    state.update(module.named_buffers())
    return state


@torch.no_grad()
def snapshot_to_cpu(module: nn.Module) -> dict[str, torch.Tensor]:
    """This rank's shard of every parameter and buffer of ``module``, copied to CPU."""
    return {name: _local(tensor).detach().to("cpu", copy=True) for name, tensor in _named_state(module).items()}


@torch.no_grad()
def restore_from_cpu(module: nn.Module, snapshot: dict[str, torch.Tensor]) -> None:
    """Write ``snapshot`` (from :func:`snapshot_to_cpu` of the same module on the same rank) back in place."""
    state = _named_state(module)
    if state.keys() != snapshot.keys():
        missing = sorted(state.keys() - snapshot.keys())[:3]
        extra = sorted(snapshot.keys() - state.keys())[:3]
        raise ValueError(f"CPU snapshot does not match the module: missing {missing}, unexpected {extra}")
    for name, tensor in state.items():
        local = _local(tensor)
        if local.shape != snapshot[name].shape:
            raise ValueError(
                f"CPU snapshot of {name!r} has shape {tuple(snapshot[name].shape)}, not {tuple(local.shape)}"
            )
        local.copy_(snapshot[name])
