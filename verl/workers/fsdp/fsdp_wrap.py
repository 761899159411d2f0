"""FSDP2 wrapping (``fully_shard`` per layer, then the root) and the offload switches of a worker.

Per-layer sharding lets FSDP2 gather one layer's parameters at a time; the root call takes what is left (embeddings,
final norm, head). Which modules count as layers is ``fsdp_config.wrap_policy`` (default: the decoder layers), and
``fsdp_config.forward_prefetch`` lets each layer start gathering the next one while it computes. Offloading
parameters or optimizer state only means something on an accelerator: on CPU the switches are accepted and do
nothing, so one config runs on a laptop and a GPU node.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from verl.utils.fsdp_utils.wrap import decoder_layer_classes, layers_to_shard

__all__ = [
    "decoder_layer_classes",
    "layers_to_shard",
    "fsdp2_kwargs",
    "apply_fsdp2",
    "is_sharded",
    "shard_late_modules",
    "remap_optimizer_params",
    "offload_model",
    "load_model",
    "offload_optimizer",
    "load_optimizer",
]

logger = logging.getLogger(__name__)


def _chain_forward_prefetch(layers: list[nn.Module]) -> None:
    """Each outermost sharded layer prefetches the next one in forward; nested layers are left to FSDP2."""
    inside = {id(sub) for layer in layers for sub in layer.modules() if sub is not layer}
    chain = [layer for layer in layers if id(layer) not in inside]
    for layer, following in zip(chain, chain[1:]):
        layer.set_modules_to_forward_prefetch([following])


def fsdp2_kwargs(
    mesh: DeviceMesh,
    *,
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype = torch.float32,
    reshard_after_forward: bool = True,
    cpu_offload: bool = False,
) -> dict[str, Any]:
    """The ``fully_shard`` keyword arguments :func:`apply_fsdp2` shards every module with."""
    kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": reshard_after_forward}
    if param_dtype is not None:
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=param_dtype, reduce_dtype=reduce_dtype, cast_forward_inputs=True
        )
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
    return kwargs


def apply_fsdp2(
    model: nn.Module,
    mesh: DeviceMesh,
    *,
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype = torch.float32,
    reshard_after_forward: bool = True,
    cpu_offload: bool = False,
    wrap_policy: Mapping[str, Any] | None = None,
    forward_prefetch: bool = False,
    key: str = "fsdp_config",
) -> nn.Module:
    """Shard ``model`` in place over ``mesh`` and return it (now also an ``FSDPModule``).

    ``param_dtype`` is the compute dtype of gathered parameters (``None``: keep the stored dtype, no casting).
    ``cpu_offload`` keeps sharded parameters, gradients and the optimizer step on the host (FSDP2 CPUOffloadPolicy).
    ``wrap_policy`` picks the layers sharded on their own (:func:`layers_to_shard`); ``forward_prefetch`` has each
    layer issue the next layer's all-gather before its own forward; ``key`` prefixes the config keys in errors.

    A mesh of one rank with neither casting nor offload leaves ``model`` unwrapped: there is nothing to shard,
    gather or reduce, and FSDP2's hooks alone cost about a tenth of a forward and backward on a small model. Every
    caller (updates, checkpoints, weight export) handles plain and sharded parameters alike.
    """
    layers = layers_to_shard(model, wrap_policy, key=f"{key}.wrap_policy")  # a bad policy fails on one rank too
    if mesh.size() == 1 and param_dtype is None and not cpu_offload:
        return model
    kwargs = fsdp2_kwargs(
        mesh,
        param_dtype=param_dtype,
        reduce_dtype=reduce_dtype,
        reshard_after_forward=reshard_after_forward,
        cpu_offload=cpu_offload,
    )
    if not layers:
        logger.warning(
            "%s.wrap_policy selects no layer of %s; sharding the root module only", key, type(model).__name__
        )
    for layer in reversed(layers):  # innermost first: a parent takes every parameter no sharded child claimed
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    if forward_prefetch:
        _chain_forward_prefetch(layers)
    return model


@torch.no_grad()
def offload_model(model: nn.Module) -> None:
    """Move the (sharded) parameters and gradients to host memory between calls; no-op on CPU."""
    device = next(model.parameters()).device
    if device.type == "cpu":
        return
    model.to("cpu")
    getattr(torch, device.type).empty_cache()


@torch.no_grad()
def load_model(model: nn.Module, device: torch.device) -> None:
    """Bring offloaded parameters back to ``device``; no-op on CPU."""
    if device.type == "cpu":
        return
    model.to(device)


def _move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device | str) -> None:
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.device != torch.device(device):
                state[key] = value.to(device, non_blocking=True)


@torch.no_grad()
def offload_optimizer(optimizer: torch.optim.Optimizer | None, device: torch.device) -> None:
    """Move optimizer state (Adam moments) to host memory; no-op on CPU."""
    if optimizer is None or device.type == "cpu":
        return
    _move_optimizer_state(optimizer, "cpu")
    getattr(torch, device.type).empty_cache()


@torch.no_grad()
def load_optimizer(optimizer: torch.optim.Optimizer | None, device: torch.device) -> None:
    """Bring optimizer state back to ``device`` before a step; no-op on CPU."""
    if optimizer is None or device.type == "cpu":
        return
    _move_optimizer_state(optimizer, device)


def is_sharded(model: nn.Module) -> bool:
    """True when ``fully_shard`` manages parameters of ``model`` (they are DTensors)."""
    return any(isinstance(p, DTensor) for p in model.parameters())


def _owner(name: str) -> str:
    return name.rpartition(".")[0]


def shard_late_modules(model: nn.Module, fsdp_kwargs: Mapping[str, Any], who: str) -> dict[int, nn.Parameter]:
    """Shard the submodules that were added to an already sharded ``model`` (a recipe's head registered after
    ``fully_shard``), each as a parameter group of its own, so their gradients are reduced across ranks and their
    forward sees the same mixed precision as the rest of the model.

    Returns ``{id(old parameter): new parameter}`` for :func:`remap_optimizer_params`: sharding replaces the
    parameter objects an optimizer built earlier holds. A plain parameter that no such submodule owns alone (one
    registered on a sharded module itself) cannot be sharded afterwards: ValueError naming it and ``who``.
    """
    plain = {name: p for name, p in model.named_parameters() if not isinstance(p, DTensor)}
    if not plain:
        return {}
    modules = dict(model.named_modules())

    def all_plain(path: str) -> bool:
        return path != "" and all(not isinstance(p, DTensor) for p in modules[path].parameters())

    roots: set[str] = set()
    stranded: list[str] = []
    for name in plain:
        path = _owner(name)
        if not all_plain(path):
            stranded.append(name)
            continue
        while all_plain(_owner(path)):  # the outermost module holding only plain parameters
            path = _owner(path)
        roots.add(path)
    if stranded:
        raise ValueError(
            f"{who}: parameters {sorted(stranded)} were added to the model after it was sharded (FSDP2) and are "
            "not held by a module of their own, so they cannot be sharded now; register them inside an "
            "nn.Module added to the model, or add them before the model is wrapped"
        )
    for path in sorted(roots):
        fully_shard(modules[path], **dict(fsdp_kwargs))
    sharded = dict(model.named_parameters())
    logger.info("%s: sharded modules added after wrapping: %s", who, sorted(roots))
    return {id(old): sharded[name] for name, old in plain.items()}


def remap_optimizer_params(
    optimizer: torch.optim.Optimizer | None, mapping: Mapping[int, nn.Parameter], who: str
) -> None:
    """Point ``optimizer`` at the parameters that replaced the ones it was built with (see :func:`shard_late_modules`).

    The optimizer must not have stepped yet: its state would belong to the replaced objects."""
    if optimizer is None or not mapping:
        return
    for group in optimizer.param_groups:
        for i, param in enumerate(group["params"]):
            new = mapping.get(id(param))
            if new is None:
                continue
            if optimizer.state.get(param):
                raise ValueError(f"{who}: the optimizer already holds state for a parameter that had to be resharded")
            group["params"][i] = new
