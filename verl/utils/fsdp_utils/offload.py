"""Moving an FSDP model, its gradients and its optimizer state between the accelerator and host memory.

A colocated trainer hands the GPU to the rollout between updates: parameters and optimizer state go to the host and
come back before the next update. FSDP2 keeps sharded parameters as DTensors registered on the modules, so
``module.to(device)`` moves exactly the local shards. PyTorch keeps a gradient on its parameter's device, so a
gradient that has to stay behind (or leave alone) is detached from its parameter and kept beside the module until
it can be put back (:func:`load_fsdp_grad`). Targets that already hold the data (the CPU on a CPU-only machine) make
every move a no-op.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from verl.utils.fsdp_utils.common import as_device, empty_device_cache, local_device, reject_fsdp1

__all__ = [
    "offload_fsdp_model_to_cpu",
    "load_fsdp_model_to_gpu",
    "offload_fsdp2_model_to_cpu",
    "load_fsdp2_model_to_gpu",
    "offload_fsdp_optimizer",
    "load_fsdp_optimizer",
    "offload_fsdp_grad",
    "load_fsdp_grad",
    "offload_fsdp_param_and_grad",
    "load_fsdp_param_and_grad",
    "detached_grads",
]

_CPU = torch.device("cpu")
# Gradients detached from their parameters, by parameter name, kept on the module between offload and load.
_DETACHED = "_verl_detached_grads"


def _same(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index or 0) == (b.index or 0)


def _model_device(model: nn.Module) -> torch.device:
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else _CPU


@torch.no_grad()
def offload_fsdp_model_to_cpu(model: nn.Module, empty_cache: bool = True) -> None:
    """Move the model's (sharded) parameters, gradients and buffers to host memory."""
    reject_fsdp1(model, "offload_fsdp_model_to_cpu")
    device = _model_device(model)
    if device.type == "cpu":
        return
    model.to(_CPU)
    if empty_cache:
        empty_device_cache(device)


@torch.no_grad()
def load_fsdp_model_to_gpu(model: nn.Module) -> None:
    """Bring the model back to this process's accelerator (a no-op on a CPU-only machine)."""
    reject_fsdp1(model, "load_fsdp_model_to_gpu")
    device = local_device()
    if not _same(_model_device(model), device):
        model.to(device)


offload_fsdp2_model_to_cpu = offload_fsdp_model_to_cpu
load_fsdp2_model_to_gpu = load_fsdp_model_to_gpu


def _move_state(optimizer: torch.optim.Optimizer, device: torch.device) -> bool:
    moved = False
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and not _same(value.device, device):
                state[key] = value.to(device, non_blocking=True)
                moved = True
    return moved


@torch.no_grad()
def offload_fsdp_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Move every tensor of the optimizer's state (Adam moments, steps) to host memory."""
    sources = {
        value.device
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    }
    if _move_state(optimizer, _CPU):
        for device in sources:
            empty_device_cache(device)


@torch.no_grad()
def load_fsdp_optimizer(optimizer: torch.optim.Optimizer, device_id: int | str | torch.device) -> None:
    """Move the optimizer's state to ``device_id`` (an accelerator index, or a device) before a step."""
    _move_state(optimizer, as_device(device_id))


def _detached(module: nn.Module) -> dict[str, torch.Tensor]:
    store = module.__dict__.get(_DETACHED)
    if store is None:
        store = {}
        module.__dict__[_DETACHED] = store
    return store


def _detach(module: nn.Module, name: str, parameter: nn.Parameter, device: torch.device | None) -> None:
    """Take ``parameter``'s gradient off it into the module's store (moved to ``device`` when given)."""
    grad = parameter.grad
    parameter.grad = None
    if device is not None:
        grad = grad.to(device, non_blocking=True)
    store = _detached(module)
    store[name] = store[name].to(grad.device) + grad if name in store else grad


def _reattach(module: nn.Module, colocated_only: bool) -> None:
    """Put stored gradients back on their parameters (moving them there unless ``colocated_only``), adding to any
    gradient accumulated meanwhile."""
    store = module.__dict__.get(_DETACHED)
    if not store:
        return
    for name, parameter in module.named_parameters():
        grad = store.get(name)
        if grad is None or (colocated_only and not _same(grad.device, parameter.device)):
            continue
        grad = grad.to(parameter.device, non_blocking=True)
        parameter.grad = grad if parameter.grad is None else parameter.grad + grad
        del store[name]


@torch.no_grad()
def offload_fsdp_grad(module: nn.Module) -> None:
    """Move gradients that are not in host memory there. They are detached from their parameters (PyTorch keeps
    a gradient on its parameter's device) until :func:`load_fsdp_grad`; an optimizer step in between would not see
    them."""
    reject_fsdp1(module, "offload_fsdp_grad")
    sources = set()
    for name, parameter in module.named_parameters():
        if parameter.grad is not None and parameter.grad.device.type != "cpu":
            sources.add(parameter.grad.device)
            _detach(module, name, parameter, _CPU)
    for device in sources:
        empty_device_cache(device)


@torch.no_grad()
def load_fsdp_grad(module: nn.Module, device_id: int | str | torch.device | None = None) -> None:
    """Put gradients detached by :func:`offload_fsdp_grad` (or left behind by the param-and-grad helpers) back on
    their parameters, on the parameters' device (``device_id`` is verl's target, where the parameters live)."""
    reject_fsdp1(module, "load_fsdp_grad")
    del device_id  # a gradient can only live on its parameter's device
    _reattach(module, colocated_only=False)


@torch.no_grad()
def offload_fsdp_param_and_grad(module: nn.Module, offload_grad: bool = False) -> None:
    """Move parameters to host memory; their gradients go along with ``offload_grad``, otherwise they stay on
    the accelerator, detached until :func:`load_fsdp_param_and_grad` brings the parameters back."""
    reject_fsdp1(module, "offload_fsdp_param_and_grad")
    device = _model_device(module)
    if device.type == "cpu":
        return
    if not offload_grad:
        for name, parameter in module.named_parameters():
            if parameter.grad is not None and parameter.device.type != "cpu":
                _detach(module, name, parameter, None)
    module.to(_CPU)
    empty_device_cache(device)


@torch.no_grad()
def load_fsdp_param_and_grad(module: nn.Module, device_id: int | str | torch.device, load_grad: bool = False) -> None:
    """Move parameters to ``device_id``; gradients in host memory come along with ``load_grad`` (otherwise they
    stay there, detached, until :func:`load_fsdp_grad`). Gradients kept on the accelerator by
    :func:`offload_fsdp_param_and_grad` are put back either way."""
    reject_fsdp1(module, "load_fsdp_param_and_grad")
    target = as_device(device_id)
    for name, parameter in module.named_parameters():
        moving = not _same(parameter.device, target)
        if moving and parameter.grad is not None and not load_grad:
            _detach(module, name, parameter, None)
    if not _same(_model_device(module), target):
        module.to(target)
    _reattach(module, colocated_only=not load_grad)


def detached_grads(module: nn.Module) -> dict[str, Any]:
    """The gradients currently detached from ``module``'s parameters, by parameter name (for inspection)."""
    return dict(module.__dict__.get(_DETACHED) or {})
