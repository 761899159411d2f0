"""Export the trained model as a plain Hugging Face checkpoint folder (model + tokenizer).

The folder is what ``model.path`` of ``main_ppo`` expects, so an SFT warm start feeds RL with no conversion step.
A sharded (FSDP2) model is gathered to rank 0 first; LoRA adapters are merged into the base weights, because the
RL trainer loads a plain model and may add its own adapters.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["full_state_dict", "merge_lora_state_dict", "save_hf_checkpoint"]

_LORA_A = ".lora_A.default.weight"
_LORA_B = ".lora_B.default.weight"
_PEFT_PREFIX = "base_model.model."


def full_state_dict(model: nn.Module, distributed: bool) -> dict[str, torch.Tensor]:
    """Unsharded CPU copy of every weight. Every rank must call it; only rank 0 gets a non-empty dict when sharded."""
    if distributed:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in model.state_dict().items()}


def merge_lora_state_dict(state: dict[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """Fold ``W + scaling * B @ A`` into each LoRA-wrapped linear and return base-model key names.

    ``state`` uses PEFT's names (``base_model.model.<path>.base_layer.weight`` plus ``lora_A``/``lora_B``).
    """
    unsupported = [k for k in state if ".lora_" in k and not (k.endswith(_LORA_A) or k.endswith(_LORA_B))]
    if unsupported:
        raise NotImplementedError(
            f"cannot merge LoRA weight {unsupported[0]!r}: only linear adapters named 'default' are supported"
        )
    merged: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        if ".lora_" in key:
            continue
        name = key.removeprefix(_PEFT_PREFIX)
        if ".base_layer." in name:
            module = key[: key.index(".base_layer.")]
            name = name.replace(".base_layer.", ".")
            if key.endswith(".base_layer.weight") and module + _LORA_A in state:
                lora_a = state[module + _LORA_A].float()
                lora_b = state[module + _LORA_B].float()
                tensor = (tensor.float() + scaling * (lora_b @ lora_a)).to(tensor.dtype)
        merged[name] = tensor
    return merged


def save_hf_checkpoint(
    model: nn.Module,
    tokenizer: Any,
    out_dir: str | os.PathLike,
    *,
    distributed: bool,
    is_main: bool,
    lora_scaling: float | None = None,
    dtype: torch.dtype | None = None,
) -> Path:
    """Write ``config.json``, weights (safetensors), generation config and tokenizer files to ``out_dir``.

    Collective when ``distributed``: every rank calls it, rank 0 writes. ``lora_scaling`` (alpha / rank) is given for
    a PEFT model and triggers the merge. ``dtype`` casts floating weights (the checkpoint's original dtype).
    """
    state = full_state_dict(model, distributed)
    out = Path(out_dir)
    if not is_main:
        return out
    base = model
    if lora_scaling is not None:
        state = merge_lora_state_dict(state, lora_scaling)
        base = model.get_base_model()
    if dtype is not None:
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
    out.mkdir(parents=True, exist_ok=True)
    base.save_pretrained(out, state_dict=state, safe_serialization=True)
    if dtype is not None:
        # config.json records the dtype the weights are stored in.
        _set_config_dtype(out, dtype)
    tokenizer.save_pretrained(out)
    return out


def _set_config_dtype(out: Path, dtype: torch.dtype) -> None:
    import json

    path = out / "config.json"
    cfg = json.loads(path.read_text())
    name = str(dtype).removeprefix("torch.")
    key = "dtype" if "dtype" in cfg or "torch_dtype" not in cfg else "torch_dtype"
    cfg[key] = name
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
