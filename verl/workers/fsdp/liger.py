"""``model.use_liger``: Liger's Triton kernels (RMSNorm, RoPE, SwiGLU, ...) swapped into a Hugging Face model.

Liger (``pip install verl[liger]``) replaces a supported model's norm, rotary and MLP modules with fused Triton
kernels, in place, before FSDP wraps the model; unsupported model types are left as they are. Its fused linear
cross-entropy is not used: the actor needs the log-prob of each sampled token, which verl computes from the logits
of the response slots. Triton kernels need a CUDA GPU, so on a CPU the switch is an error rather than a silent no-op.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

__all__ = ["apply_liger"]


def apply_liger(model: Any, key: str = "model.use_liger") -> None:
    """Swap Liger's kernels into ``model`` (a transformers causal LM); errors name ``key`` and what is missing."""
    if importlib.util.find_spec("liger_kernel") is None:
        raise ImportError(
            f"{key}=true needs the 'liger-kernel' package, which is not installed: run "
            "`pip install verl[liger]` (or set it to false)"
        )
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"{key}=true needs a CUDA GPU (Liger's kernels are written in Triton); set it to false on this machine"
        )
    from liger_kernel.transformers import _apply_liger_kernel_to_instance

    _apply_liger_kernel_to_instance(model=model, fused_linear_cross_entropy=False)
