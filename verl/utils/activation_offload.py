"""Activation offload: what a trainable model's forward saves for backward waits in host memory, not on the GPU.

For long sequences the activations kept for backward can outgrow a model's parameters on the device. With
:func:`enable_activation_offload` (the ``model.enable_activation_offload`` switch) every tensor a trainable model's
forward saves for backward is moved to pinned host memory as it is saved and brought back when backward needs it
(``torch.autograd.graph.save_on_cpu``): device memory for PCIe traffic. It combines with FSDP2 sharding and with
non-reentrant gradient checkpointing as they are; on a CPU there is nothing to move, so the model runs unchanged.
:func:`enable_activation_offloading` is verl's ``(model, strategy, enable_ckpt)`` entry point on the same hooks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["enable_activation_offloading", "enable_activation_offload"]

_STRATEGIES = ("fsdp", "fsdp2")


def _on_accelerator(module: nn.Module) -> bool:
    parameter = next(module.parameters(), None)
    return parameter is not None and parameter.device.type != "cpu"


def enable_activation_offload(model: nn.Module) -> nn.Module:
    """Install hooks so that each forward of ``model`` with grad enabled on an accelerator saves to host memory."""
    active: list[Any] = []  # one entered context per forward in flight (nested calls stack)

    def enter(module: nn.Module, args: Any) -> None:
        if torch.is_grad_enabled() and _on_accelerator(module):
            context = torch.autograd.graph.save_on_cpu(pin_memory=True)
            context.__enter__()
            active.append(context)
        else:
            active.append(None)

    def leave(module: nn.Module, args: Any, output: Any) -> None:
        context = active.pop() if active else None
        if context is not None:
            context.__exit__(None, None, None)

    model.register_forward_pre_hook(enter)
    model.register_forward_hook(leave, always_call=True)  # also after a forward that raised
    return model


def enable_activation_offloading(model: nn.Module, strategy: str, enable_ckpt: bool = False) -> None:
    """Offload ``model``'s saved activations to host memory during training forwards.

    ``strategy`` must be an FSDP strategy (``fsdp`` / ``fsdp2``), the only ones whose models live in this process;
    ``enable_ckpt`` says whether gradient checkpointing is on (accepted for verl's signature: both combine as is).
    """
    if strategy not in _STRATEGIES:
        raise ValueError(
            f"enable_activation_offloading: strategy={strategy!r} is not supported; activation "
            f"offload works with {list(_STRATEGIES)}"
        )
    enable_activation_offload(model)
