"""Full (unsharded) state dicts of FSDP2 models, loading one into a sharded model, and gradient clipping.

A full state dict is what Hugging Face checkpoints hold; an FSDP2 model holds DTensor shards. Gathering and
scattering go through ``torch.distributed.checkpoint.state_dict`` (one collective per tensor, so every rank must make
the same calls in the same order). A model that is not sharded (one rank) takes the same paths.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.tensor import DTensor

from verl.utils.fsdp_utils.common import local_device, reject_fsdp1

__all__ = ["get_fsdp_state_ctx", "get_fsdp_full_state_dict", "fsdp2_load_full_state_dict", "fsdp2_clip_grad_norm_"]


def get_fsdp_state_ctx(
    model: nn.Module, state_type: Any, state_cfg: Any, optim_cfg: Any
) -> contextlib.AbstractContextManager:
    """The context to call ``model.state_dict()`` in. FSDP1 needed ``FSDP.state_dict_type`` here; an FSDP2 (or
    plain) module's ``state_dict()`` already returns its DTensor shards, so the context does nothing."""
    reject_fsdp1(model, "get_fsdp_state_ctx")
    return contextlib.nullcontext()


def get_fsdp_full_state_dict(
    model: nn.Module, offload_to_cpu: bool = True, rank0_only: bool = True
) -> dict[str, torch.Tensor]:
    """The model's full state dict (gathered tensors, clean names); collective.

    With ``offload_to_cpu`` the tensors are gathered to host memory, and then only rank 0 keeps them when
    ``rank0_only`` (the other ranks get an empty dict). Without ``offload_to_cpu`` every rank gets the full tensors on
    its device.
    """
    reject_fsdp1(model, "get_fsdp_full_state_dict")
    rank0_host_copy = offload_to_cpu and rank0_only
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=rank0_host_copy))
    if rank0_host_copy:
        return state
    # torch only gathers when it copies to rank 0's host memory; otherwise each rank gathers its own copy here.
    state = {name: tensor.full_tensor() if isinstance(tensor, DTensor) else tensor for name, tensor in state.items()}
    if offload_to_cpu:
        state = {name: tensor.to("cpu") for name, tensor in state.items()}
    return state


def fsdp2_load_full_state_dict(
    model: nn.Module, full_state: dict[str, torch.Tensor], device_mesh: Any = None, cpu_offload: Any = None
) -> None:
    """Load a full state dict that only rank 0 needs to hold into the sharded ``model``, in place; collective.

    Rank 0 moves its (real) model to the local device; the other ranks allocate theirs there (``to_empty``, so a
    model built on ``meta`` works). Rank 0's values are then broadcast shard by shard, and every buffer is broadcast
    from rank 0 too (buffers such as rotary frequencies are not in a state dict). With ``cpu_offload`` (any value but
    None: the model was sharded with a ``CPUOffloadPolicy``) the parameters end in host memory and the buffers on
    the device. ``device_mesh`` is accepted for verl's signature; the mesh is the one the model was sharded over.
    """
    reject_fsdp1(model, "fsdp2_load_full_state_dict")
    device = local_device()
    distributed = dist.is_initialized() and dist.get_world_size() > 1
    if not distributed or dist.get_rank() == 0:
        model.to(device)
    else:
        model.to_empty(device=device)
    offload = cpu_offload is not None
    if distributed:
        options = StateDictOptions(full_state_dict=True, cpu_offload=offload, broadcast_from_rank0=True)
        set_model_state_dict(model, dict(full_state), options=options)  # torch rewrites the dict it is given
        for _, buffer in sorted(model.named_buffers(), key=lambda item: item[0]):  # same order on every rank
            dist.broadcast(buffer, src=0)
    else:
        set_model_state_dict(model, dict(full_state), options=StateDictOptions(full_state_dict=True))
    if offload:
        model.to("cpu")
        for buffer in model.buffers():
            buffer.data = buffer.data.to(device)


def fsdp2_clip_grad_norm_(
    parameters: torch.Tensor | Iterable[torch.Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> torch.Tensor:
    """``clip_grad_norm_`` that also works when the (DTensor) gradients sit in host memory under CPU offload.

    Returns the total norm over all ranks' shards, on the local device.
    """
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    total = total.to(local_device(), non_blocking=True)
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total, foreach)
    return total.full_tensor() if isinstance(total, DTensor) else total
