"""Device helpers: one place that decides between CUDA and CPU.

Code that would otherwise hard-code ``"cuda"`` asks here instead, so the same
worker runs on a laptop CPU (gloo) and on a GPU node (nccl) unchanged. CUDA is the
only accelerator this build drives; the NPU names exist so code written for verl can
test them and take its CUDA/CPU branch.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

__all__ = [
    "is_cuda_available",
    "is_npu_available",
    "is_torch_npu_available",
    "get_device_name",
    "get_torch_device",
    "get_device_id",
    "get_nccl_backend",
    "get_resource_name",
    "get_visible_devices_keyword",
    "set_expandable_segments",
    "auto_set_device",
    "get_device_capability",
    "is_device_available",
    "manual_seed",
    "manual_seed_all",
]

logger = logging.getLogger(__name__)

is_cuda_available: bool = torch.cuda.is_available()
# Ascend NPUs are not supported; the name exists so code written for verl can test it.
is_npu_available: bool = False


def is_torch_npu_available(check_device: bool = True) -> bool:
    """Always False: this build has no Ascend NPU support (``torch_npu`` is never imported)."""
    return False


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


def get_resource_name() -> str:
    """The Ray resource that counts accelerators (``"GPU"``); Ray lists CUDA devices under it."""
    return "GPU"


def get_visible_devices_keyword() -> str:
    """The environment variable that restricts which accelerators a process sees (``CUDA_VISIBLE_DEVICES``)."""
    return "CUDA_VISIBLE_DEVICES"


def set_expandable_segments(enable: bool) -> None:
    """Switch the CUDA caching allocator's expandable segments on or off (fewer fragmentation OOMs when on).

    A no-op without CUDA: the CPU allocator has no such setting.
    """
    if not is_cuda_available:
        return
    torch.cuda.memory._set_allocator_settings(f"expandable_segments:{bool(enable)}")


def _device_of(config: Any) -> Any:
    trainer = getattr(config, "trainer", None)
    return getattr(trainer, "device", None) if trainer is not None else None


def auto_set_device(config: Any) -> None:
    """Point ``config.trainer.device`` at the accelerator this machine has.

    On a CUDA machine a foreign accelerator name (``npu``, ...) becomes ``cuda``, with a warning. ``auto`` is left
    alone because it already resolves to the detected device, and so is ``cpu``: running on the CPU of a GPU
    machine is a choice this package supports (verl turns it into the accelerator). On a machine without an
    accelerator nothing changes (``trainer.device=cuda`` then fails with a clear error when the worker starts).
    """
    current = _device_of(config)
    if current is None:
        return
    detected = get_device_name()
    if detected == "cpu" or current in (detected, "auto", "cpu"):
        return
    logger.warning(
        "trainer.device=%s but this machine has %s devices; using trainer.device=%s", current, detected, detected
    )
    config.trainer.device = detected


def get_device_capability(device_id: int = 0) -> tuple[int | None, int | None]:
    """``(major, minor)`` compute capability of CUDA device ``device_id``; ``(None, None)`` without CUDA."""
    if not is_cuda_available:
        return None, None
    return torch.cuda.get_device_capability(device_id)


def is_device_available() -> bool:
    """Whether an accelerator (CUDA) is visible to this process."""
    return is_cuda_available


def manual_seed(seed: int) -> None:
    """Seed the current accelerator's generator (the CPU generator without one)."""
    if is_cuda_available:
        torch.cuda.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """Seed every accelerator's generator (the CPU generator without one)."""
    if is_cuda_available:
        torch.cuda.manual_seed_all(seed)
    else:
        torch.manual_seed(seed)
