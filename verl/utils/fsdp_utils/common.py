"""What the FSDP helpers share: which FSDP a module uses, the local device, and the FSDP1 refusal.

This package shards with FSDP2 (``fully_shard``) only. verl's helpers also accept FSDP1
``FullyShardedDataParallel`` wrappers, which nothing here creates; handing one in is a TypeError that says so,
instead of a half-working code path.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from verl.utils.device import get_device_name

__all__ = ["FSDP", "fsdp_version", "reject_fsdp1", "local_device", "as_device"]


def fsdp_version(model: Any) -> int:
    """1 for an FSDP1 ``FullyShardedDataParallel`` wrapper, 2 for a ``fully_shard``-ed module, 0 otherwise."""
    if isinstance(model, FSDP):
        return 1
    return 2 if isinstance(model, FSDPModule) else 0


def reject_fsdp1(model: Any, what: str) -> None:
    """Raise a TypeError naming ``what`` when ``model`` is an FSDP1 wrapper."""
    if fsdp_version(model) == 1:
        raise TypeError(
            f"{what}: got an FSDP1 FullyShardedDataParallel module; this package shards with FSDP2 only "
            "(torch.distributed.fsdp.fully_shard, e.g. verl.utils.fsdp_utils.apply_fsdp2)"
        )


def local_device() -> torch.device:
    """This process's accelerator (its current CUDA device), or the CPU without one."""
    if get_device_name() == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def as_device(device_id: int | str | torch.device | None) -> torch.device:
    """verl passes device *indices* (``get_device_id()``); an index means that index of this machine's
    accelerator, which on a CPU-only machine is the CPU."""
    if device_id is None:
        return local_device()
    if isinstance(device_id, int):
        return torch.device("cuda", device_id) if get_device_name() == "cuda" else torch.device("cpu")
    return torch.device(device_id)


def empty_device_cache(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
