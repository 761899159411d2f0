"""Write an FSDP2 model as a Hugging Face folder that ``AutoModelForCausalLM.from_pretrained`` loads.

LoRA policies are exported merged (a plain model anyone can load), with the adapter alone next to it in
``lora_adapter/`` for PEFT users. Gathering is collective: every rank calls, rank 0 writes.
"""

from __future__ import annotations

import os

import torch.distributed as dist
from safetensors.torch import save_file
from torch import nn

from verl.checkpoint_engine import iter_named_weights
from verl.utils.fsdp_utils.weights import adapter_state, has_lora

__all__ = ["export_hf_weights"]


def export_hf_weights(module: nn.Module, out_dir: str) -> None:
    """Save ``model.safetensors`` (merged full weights) into ``out_dir``; config and tokenizer are written by the
    checkpoint manager. Call on every rank."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    weights = {}
    for name, tensor in iter_named_weights(module):
        if rank == 0:
            weights[name] = tensor.contiguous()
    is_lora = has_lora(module)
    adapter = adapter_state(module) if is_lora else None
    if rank != 0:
        return
    os.makedirs(out_dir, exist_ok=True)
    save_file(weights, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    if is_lora:
        adapter_dir = os.path.join(out_dir, "lora_adapter")
        os.makedirs(adapter_dir, exist_ok=True)
        save_file(
            {k: v.contiguous() for k, v in adapter.items()},
            os.path.join(adapter_dir, "adapter_model.safetensors"),
            metadata={"format": "pt"},
        )
        peft_config = getattr(module, "peft_config", {}).get("default")
        if peft_config is not None:
            peft_config.save_pretrained(adapter_dir)
