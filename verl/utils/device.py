"""Device helpers: one place that decides between CUDA and CPU.

Code that would otherwise hard-code ``"cuda"`` asks here instead, so the same
worker runs on a laptop CPU (gloo) and on a GPU node (nccl) unchanged.
"""

from __future__ import annotations

import torch

__all__ = [
    "is_cuda_available",
    "is_npu_available",
    "get_device_name",
    "get_torch_device",
    "get_device_id",
    "get_nccl_backend",
]

is_cuda_available: bool = torch.cuda.is_available()
# Ascend NPUs are not supported; the name exists so code written for verl can test it.
is_npu_available: bool = False


def get_device_name() -> str:
    """Return ``"cuda"`` when a CUDA device is visible, else ``"cpu"``."""
    return "cuda" if is_cuda_available else "cpu"


def get_torch_device():
    """Return the torch device module (``torch.cuda`` or ``torch.cpu``) for device-agnostic calls.

    Both modules expose ``synchronize``, ``current_device`` and friends, so callers can write
    ``get_torch_device().synchronize()`` without branching on the backend.
    """
    return getattr(torch, get_device_name())


def get_device_id() -> int:
    """Index of the current accelerator; 0 on CPU."""
    return torch.cuda.current_device() if is_cuda_available else 0


def get_nccl_backend() -> str:
    """Process-group backend for collectives: ``"nccl"`` on CUDA, ``"gloo"`` on CPU."""
    return "nccl" if is_cuda_available else "gloo"
