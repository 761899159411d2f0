"""LoRA weights of an FSDP2-sharded PEFT model, gathered for the rollout engine, and their names.

The rollout receives either the adapters (once it has the base weights) or the base weights themselves, as full
tensors in host memory under PEFT's saved names. Gathering sharded tensors is collective, so every rank walks the
modules in the same order; gathering one FSDP unit at a time bounds the memory a gather needs to one unit.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from verl.utils.fsdp_utils.common import empty_device_cache, local_device, reject_fsdp1
from verl.utils.model import check_exclude_modules, check_target_modules

__all__ = ["layered_summon_lora_params", "collect_lora_params", "replace_lora_wrapper", "normalize_peft_param_name"]

logger = logging.getLogger(__name__)

# Projections whose LoRA layers verl's vLLM loader expects as `<module>.base_layer.*` even when unlisted.
_STACKED_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _full_cpu(tensor: torch.Tensor) -> torch.Tensor:
    if isinstance(tensor, DTensor):
        tensor = tensor.full_tensor()
    return tensor.detach().to("cpu")


def _peft_state_dict(peft_model: nn.Module, state_dict: dict[str, torch.Tensor] | None = None) -> dict[str, Any]:
    from peft.utils.save_and_load import get_peft_model_state_dict

    return get_peft_model_state_dict(peft_model, state_dict=state_dict)


def _own_parameters(unit: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters of ``unit`` that no nested FSDP unit manages (those are gathered with their own unit)."""
    nested = [name for name, sub in unit.named_modules() if name and isinstance(sub, FSDPModule)]
    return {
        name: param
        for name, param in unit.named_parameters()
        if not any(name.startswith(f"{prefix}.") for prefix in nested)
    }


def layered_summon_lora_params(fsdp_module: nn.Module) -> OrderedDict[str, torch.Tensor]:
    """The LoRA adapter tensors of a sharded PEFT model, gathered one FSDP unit at a time; collective.

    Keys are PEFT's saved names (``base_model.model....lora_A.weight``), values full tensors on the CPU. Parameters
    the root unit manages itself are included too, so an unsharded model gives all its adapters. Container units
    (names ending in ``.model`` or ``.layers``) are skipped: their children are units of their own.
    """
    reject_fsdp1(fsdp_module, "layered_summon_lora_params")
    collected: OrderedDict[str, torch.Tensor] = OrderedDict()
    for prefix, unit in fsdp_module.named_modules():
        if prefix and (not isinstance(unit, FSDPModule) or prefix.endswith((".model", ".layers"))):
            continue
        own = {f"{prefix}.{name}" if prefix else name: param for name, param in _own_parameters(unit).items()}
        if not any("lora_" in name for name in own):
            continue
        # PEFT matches its adapters by their full names in the model, so the unit's names carry its prefix.
        for name, tensor in _peft_state_dict(fsdp_module, state_dict=own).items():
            collected[name] = _full_cpu(tensor)
        empty_device_cache(local_device())
    return collected


def collect_lora_params(
    module: nn.Module, layered_summon: bool, base_sync_done: bool
) -> OrderedDict[str, torch.Tensor]:
    """What a LoRA model sends its rollout; collective, full tensors on the CPU.

    Once the rollout holds the base weights (``base_sync_done``) that is the adapters (one unit at a time with
    ``layered_summon``, falling back to all at once if that finds none); before, it is the base model's weights
    under the original Hugging Face names (``.base_layer`` removed, adapters left out). ``layered_summon`` before
    the base weights are synced is a ValueError: the rollout would have adapters without a model.
    """
    reject_fsdp1(module, "collect_lora_params")
    if layered_summon:
        if not base_sync_done:
            raise ValueError(
                "collect_lora_params: layered_summon needs the base model in the rollout first "
                "(base_sync_done=False); sync the full weights once, e.g. rollout.load_format=safetensors"
            )
        params = layered_summon_lora_params(module)
        if params:
            return params
        logger.warning("collect_lora_params: layered gathering found no LoRA parameters; gathering them all at once")
    if base_sync_done:
        adapters = _peft_state_dict(module)
        return OrderedDict((name, _full_cpu(tensor)) for name, tensor in adapters.items())
    base = module.base_model.model
    return OrderedDict(
        (name.replace(".base_layer", ""), _full_cpu(tensor))
        for name, tensor in base.state_dict().items()
        if "lora_" not in name
    )


def replace_lora_wrapper(k: str, peft_config: Any) -> str:
    """The parameter name ``k`` of a base model as it appears inside a PEFT model: ``<module>.base_layer.weight``
    (or ``.bias``) for a module LoRA wraps, ``k`` unchanged for excluded and untouched modules."""
    for suffix in (".weight", ".bias"):
        if not k.endswith(suffix):
            continue
        module = k[: -len(suffix)]
        if check_exclude_modules(peft_config, module):
            return k
        if module.endswith(_STACKED_PROJECTIONS) or check_target_modules(peft_config, module):
            return f"{module}.base_layer{suffix}"
    return k


def normalize_peft_param_name(params: dict[str, Any]) -> dict[str, Any]:
    """Base-model names for a PEFT model's parameters: the PEFT prefixes and ``.base_layer`` removed, adapter
    tensors (``lora_*``, ``.adapter_*``) dropped."""
    normalized = {}
    for name, value in params.items():
        clean = name.replace("base_model.model.", "").replace("base_model.", "").replace(".base_layer", "")
        if "lora_" in clean or ".adapter_" in clean:
            continue
        normalized[clean] = value
    return normalized
