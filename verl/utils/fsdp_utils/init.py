"""Building a model on every rank without every rank holding its weights.

Rank 0 builds (and loads) the model on the CPU; the other ranks build it on the ``meta`` device, where parameters
have shapes but no storage. After ``fully_shard`` the meta ranks allocate only their shards and receive the values
from rank 0 (:func:`verl.utils.fsdp_utils.fsdp2_load_full_state_dict`). Buffers stay real on every rank: some (rotary
frequencies) are not in a state dict, so nothing could fill them later.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from verl.utils.fsdp_utils.common import empty_device_cache, local_device

__all__ = ["meta_device_init", "get_init_weight_context_manager", "init_fn"]


@contextlib.contextmanager
def meta_device_init() -> Iterator[None]:
    """Inside, every parameter a module registers is created on the ``meta`` device (buffers are not).

    A parameter registered twice (tied embeddings) stays one object, so ties survive.
    """
    original = nn.Module.register_parameter

    def register_on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original(module, name, param)
        if param is None or param.is_meta:
            return
        meta = type(param)(param.detach().to("meta"), requires_grad=param.requires_grad)
        meta.__dict__.update(param.__dict__)
        module._parameters[name] = meta

    nn.Module.register_parameter = register_on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = original


def _cpu_init() -> contextlib.AbstractContextManager:
    return torch.device("cpu")


def _builds_real_weights(mesh: DeviceMesh | None) -> bool:
    if mesh is not None:
        return mesh.get_coordinate()[-1] == 0
    return not dist.is_initialized() or dist.get_rank() == 0


def get_init_weight_context_manager(
    use_meta_tensor: bool = True, mesh: DeviceMesh | None = None
) -> Callable[[], contextlib.AbstractContextManager]:
    """A factory of the context to build a model in: the CPU on the rank that holds real weights (global rank 0,
    or the first rank of the last ``mesh`` dimension), ``meta`` elsewhere; the CPU everywhere without
    ``use_meta_tensor``. Use as ``with get_init_weight_context_manager(...)(): model = ...``."""
    if use_meta_tensor and not _builds_real_weights(mesh):
        return meta_device_init
    return _cpu_init


def init_fn(x: nn.Module) -> nn.Module:
    """``param_init_fn`` for meta-built modules: on ranks other than 0, allocate ``x``'s own (not its children's)
    parameters and buffers, uninitialised, on the local device; rank 0 keeps its real weights."""
    if dist.is_initialized() and dist.get_rank() != 0:
        device = local_device()
        x = x.to_empty(device=device, recurse=False)
        empty_device_cache(device)
    return x
