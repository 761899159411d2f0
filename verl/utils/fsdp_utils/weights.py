"""Full (unsharded) tensors of an FSDP2 module, for checkpoint exports and tests.

The rollout and the Hugging Face export get merged, Hugging Face-named weights from
:func:`verl.checkpoint_engine.iter_named_weights` (the one implementation of LoRA merging and name normalisation);
this module adds the raw views those do not give. Gathering a sharded tensor (``DTensor.full_tensor()``) is a
collective, so every rank must walk these iterators in the same order, even ranks that throw the result away.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import torch
from torch import nn

__all__ = ["iter_full_state", "adapter_state", "has_lora"]

_LORA_PART = re.compile(r"^(?P<module>.+)\.(?P<part>lora_A|lora_B)\.(?P<adapter>[^.]+)\.weight$")


def _full(tensor: torch.Tensor) -> torch.Tensor:
    if hasattr(tensor, "full_tensor"):
        tensor = tensor.full_tensor()
    return tensor.detach().to("cpu")


def iter_full_state(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(state-dict key, full CPU tensor)`` for every entry of ``module.state_dict()``; collective under FSDP2."""
    for name, tensor in module.state_dict().items():
        yield name, _full(tensor)


def has_lora(module: nn.Module) -> bool:
    """True when ``module`` holds peft LoRA layers."""
    return any(isinstance(getattr(sub, "lora_A", None), nn.ModuleDict) for sub in module.modules())


def adapter_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """Full LoRA adapter tensors under PEFT's saved names (``...lora_A.weight``); collective under FSDP2."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in iter_full_state(module):
        match = _LORA_PART.match(name)
        if match is not None:
            out[f"{match['module']}.{match['part']}.weight"] = tensor
    return out
