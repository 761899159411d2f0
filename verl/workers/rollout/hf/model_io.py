"""Loading the rollout model and writing new weights into it in place.

In-place copies keep the module (and anything holding references to its parameters) valid across
updates, which is what lets the hybrid replica share a process with the trainer.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from verl.utils.weight_checksum import weight_checksum

__all__ = ["resolve_dtype", "load_model", "load_named_tensors", "eos_token_ids"]

_DTYPES = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
}


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """``rollout.dtype`` as a torch dtype, or None for "auto" (the checkpoint's own dtype).

    Unknown names are an error naming the key.
    """
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).lower().removeprefix("torch.")
    if key == "auto":
        return None
    if key not in _DTYPES:
        raise ValueError(f"rollout.dtype={dtype!r} is not a known dtype; use auto or one of {sorted(_DTYPES)}")
    return _DTYPES[key]


def load_model(path: str, dtype: torch.dtype | None, device: torch.device, attn_implementation: str | None = None):
    """A causal LM from a Hugging Face folder, in eval mode on ``device`` (``dtype=None``: the checkpoint's)."""
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": "auto" if dtype is None else dtype}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    return model.to(device).eval()


def eos_token_ids(model: torch.nn.Module) -> list[int]:
    """End-of-sequence ids from the generation config, else the model config."""
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        eos = getattr(source, "eos_token_id", None)
        if eos is not None:
            return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]
    return []


@torch.no_grad()
def load_named_tensors(model: torch.nn.Module, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """Copy ``(name, tensor)`` pairs into ``model`` in place; return the checksum of what was loaded.

    The checksum is computed over the model's own tensors after the copy (in the model's dtype), so
    it proves what the engine will run, not what it was sent.
    """
    targets: dict[str, torch.Tensor] = dict(model.named_parameters(remove_duplicate=False))
    targets.update(dict(model.named_buffers(remove_duplicate=False)))
    loaded: list[str] = []
    for name, tensor in named_tensors:
        target = targets.get(name)
        if target is None:
            sample = ", ".join(sorted(targets)[:5])
            raise ValueError(
                f"update_weights: {name!r} is not a parameter of the rollout model (names look like {sample})"
            )
        if tuple(target.shape) != tuple(tensor.shape):
            raise ValueError(
                f"update_weights: {name!r} has shape {tuple(tensor.shape)}, "
                f"the rollout model expects {tuple(target.shape)}"
            )
        target.copy_(tensor.to(device=target.device, dtype=target.dtype))
        loaded.append(name)
    if not loaded:
        raise ValueError("update_weights: no tensors were sent")
    return weight_checksum([(name, targets[name]) for name in loaded])
