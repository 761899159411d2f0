"""Folding LoRA adapters into their base weights, so a rollout engine that knows nothing of peft gets plain weights.

The trainer keeps LoRA factors separate (only they train); the rollout model is the base architecture. For a
peft ``LoraLayer`` wrapping a linear layer the served weight is ``W + scaling * B @ A`` (transposed for
``fan_in_fan_out`` layers); adapters that peft already merged into ``W`` are not added twice.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["is_lora_layer", "lora_delta", "LORA_PARAM_MARKERS"]

# Name components of peft's adapter parameters: never sent, they are folded into the base weight.
LORA_PARAM_MARKERS = ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "lora_magnitude_vector")


def is_lora_layer(module: nn.Module) -> bool:
    """A peft LoRA wrapper: it holds ``base_layer`` and per-adapter ``lora_A``/``lora_B`` dicts."""
    return hasattr(module, "base_layer") and isinstance(getattr(module, "lora_A", None), nn.ModuleDict)


def _full(tensor: torch.Tensor) -> torch.Tensor:
    full_tensor = getattr(tensor, "full_tensor", None)
    return full_tensor() if callable(full_tensor) else tensor


def lora_delta(layer: nn.Module, layer_name: str) -> torch.Tensor | None:
    """``sum over active, unmerged adapters of scaling * B @ A`` for one LoRA layer, or None when nothing to add.

    Sharded (DTensor) factors are gathered, so every rank must call this for the same layers in the same order.

    Raises:
        NotImplementedError: the layer uses DoRA or wraps something other than a linear layer (named).
    """
    active = getattr(layer, "active_adapters", None) or getattr(layer, "active_adapter", None) or []
    if isinstance(active, str):
        active = [active]
    merged = set(getattr(layer, "merged_adapters", []) or [])
    delta = None
    for adapter in active:
        if adapter in merged:
            continue
        if adapter in (getattr(layer, "lora_embedding_A", None) or {}):
            raise NotImplementedError(f"checkpoint engine: embedding LoRA on {layer_name!r} cannot be merged")
        if adapter not in layer.lora_A:
            continue
        if getattr(layer, "use_dora", {}).get(adapter, False):
            raise NotImplementedError(f"checkpoint engine: DoRA adapter {adapter!r} on {layer_name!r} cannot be merged")
        if not isinstance(layer.lora_A[adapter], nn.Linear):
            raise NotImplementedError(
                f"checkpoint engine: LoRA layer {layer_name!r} is not a linear layer "
                f"({type(layer.lora_A[adapter]).__name__}); only linear LoRA can be merged for the rollout"
            )
        a = _full(layer.lora_A[adapter].weight).detach().float()
        b = _full(layer.lora_B[adapter].weight).detach().float()
        term = (b @ a) * float(layer.scaling[adapter])
        if getattr(layer, "fan_in_fan_out", False):
            term = term.T
        delta = term if delta is None else delta + term
    return delta
