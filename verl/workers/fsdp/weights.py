"""Full (unsharded) weights of an FSDP2 module, with LoRA adapters merged, in Hugging Face names.

The rollout engine and the Hugging Face export both want what ``from_pretrained`` would load: plain parameter names
(``model.layers.0.self_attn.q_proj.weight``) and, for a LoRA policy, ``W + scaling * B @ A``. Gathering a sharded
tensor (``DTensor.full_tensor()``) is a collective, so every rank must walk the same iterator in the same order, even
ranks that throw the result away.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

__all__ = ["iter_full_state", "iter_hf_weights", "iter_weight_buckets", "lora_scalings", "adapter_state"]

_PEFT_PREFIX = "base_model.model."
_LORA_PART = re.compile(r"^(?P<module>.+)\.(?P<part>lora_A|lora_B)\.(?P<adapter>[^.]+)\.weight$")


def _full(tensor: torch.Tensor) -> torch.Tensor:
    if hasattr(tensor, "full_tensor"):
        tensor = tensor.full_tensor()
    return tensor.detach().to("cpu")


def iter_full_state(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, full CPU tensor)`` for every entry of ``module.state_dict()``; collective under FSDP2."""
    for name, tensor in module.state_dict().items():
        yield name, _full(tensor)


def lora_scalings(module: nn.Module) -> dict[str, float]:
    """``{lora-wrapped module name: scaling}`` of the active adapter of every PEFT LoRA layer in ``module``."""
    scalings: dict[str, float] = {}
    for name, sub in module.named_modules():
        scaling = getattr(sub, "scaling", None)
        if isinstance(scaling, dict) and hasattr(sub, "lora_A"):
            active = getattr(sub, "active_adapters", None) or list(scaling)
            adapter = active[0] if isinstance(active, list | tuple) else active
            scalings[name] = float(scaling[adapter])
    return scalings


def _hf_name(name: str) -> str:
    name = name.removeprefix(_PEFT_PREFIX)
    return name.replace(".base_layer.", ".")


def iter_hf_weights(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Full weights under Hugging Face names; LoRA layers come out merged. Collective: call on every rank."""
    scalings = lora_scalings(module)
    if not scalings:
        for name, tensor in iter_full_state(module):
            yield _hf_name(name), tensor
        return
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in iter_full_state(module):
        match = _LORA_PART.match(name)
        if match is not None:
            pending.setdefault(match["module"], {})[match["part"]] = tensor
        elif name.endswith(".base_layer.weight") and name.removesuffix(".base_layer.weight") in scalings:
            pending.setdefault(name.removesuffix(".base_layer.weight"), {})["base"] = tensor
        elif "lora_" in name:
            raise NotImplementedError(f"cannot merge LoRA tensor {name!r}: only LoRA on Linear layers is supported")
        else:
            yield _hf_name(name), tensor
            continue
        owner = match["module"] if match is not None else name.removesuffix(".base_layer.weight")
        parts = pending[owner]
        if {"base", "lora_A", "lora_B"} <= parts.keys():
            del pending[owner]
            base = parts["base"]
            delta = (parts["lora_B"].float() @ parts["lora_A"].float()) * scalings[owner]
            yield _hf_name(owner) + ".weight", (base.float() + delta).to(base.dtype)
    if pending:
        raise RuntimeError(f"LoRA merge: incomplete adapter weights for {sorted(pending)[:3]}")


def iter_weight_buckets(
    named_tensors: Iterator[tuple[str, torch.Tensor]], bucket_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Group ``(name, tensor)`` pairs into lists of at most ``bucket_bytes`` (a larger tensor gets a bucket alone)."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket size must be positive, got {bucket_bytes} bytes")
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named_tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def adapter_state(module: nn.Module) -> dict[str, Any]:
    """Full LoRA adapter tensors under PEFT's saved names (``...lora_A.weight``); collective under FSDP2."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in iter_full_state(module):
        match = _LORA_PART.match(name)
        if match is not None:
            out[f"{match['module']}.{match['part']}.weight"] = tensor
    return out
