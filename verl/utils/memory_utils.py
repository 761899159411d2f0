"""Accelerator memory housekeeping between phases of a step (rollout, training, weight sync).

A colocated rollout and trainer take turns on one GPU; releasing what the caching allocator holds but no tensor uses
lets the next phase start without an out-of-memory error. Everything here is a no-op on a CPU-only process, where
there is no caching allocator.
"""

from __future__ import annotations

import gc
import logging

import torch

from verl.utils.device import is_cuda_available

__all__ = [
    "aggressive_empty_cache",
    "reset_memory_stats",
    "get_memory_info",
    "log_memory_usage",
]

logger = logging.getLogger(__name__)

_GIB = 1024**3


def aggressive_empty_cache(force_sync: bool = True, max_retries: int = 3) -> None:
    """Collect garbage and return cached, unused accelerator memory to the driver, repeating while it helps.

    Each round runs ``gc.collect()`` (freeing tensors only reachable through reference cycles) and
    ``empty_cache()``; ``force_sync`` synchronises first so memory of finished kernels counts as free. Rounds stop
    after ``max_retries`` or once a round frees less than 1 GiB of reserved memory.
    """
    if not is_cuda_available:
        gc.collect()
        return
    for attempt in range(max(1, int(max_retries))):
        reserved_before = torch.cuda.memory_reserved()
        gc.collect()
        if force_sync:
            torch.cuda.synchronize()
        torch.cuda.empty_cache()
        freed = reserved_before - torch.cuda.memory_reserved()
        logger.info("aggressive_empty_cache round %d freed %.2f GiB reserved memory", attempt + 1, freed / _GIB)
        if freed < _GIB:
            break


def reset_memory_stats() -> None:
    """Reset the peak and accumulated allocator statistics, so the next peak reading covers one phase only."""
    if is_cuda_available:
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.reset_accumulated_memory_stats()


def get_memory_info() -> dict[str, float]:
    """Memory of the current CUDA device in GiB (total, reserved, allocated, cached = reserved - allocated, and
    the peaks); empty without CUDA."""
    if not is_cuda_available:
        return {}
    device = torch.cuda.current_device()
    reserved = torch.cuda.memory_reserved()
    allocated = torch.cuda.memory_allocated()
    return {
        "total_memory_gb": torch.cuda.get_device_properties(device).total_memory / _GIB,
        "reserved_memory_gb": reserved / _GIB,
        "allocated_memory_gb": allocated / _GIB,
        "cached_memory_gb": (reserved - allocated) / _GIB,
        "max_memory_allocated_gb": torch.cuda.max_memory_allocated() / _GIB,
        "max_memory_reserved_gb": torch.cuda.max_memory_reserved() / _GIB,
    }


def log_memory_usage(stage: str = "current") -> None:
    """Log :func:`get_memory_info` at INFO under the label ``stage``; nothing without CUDA."""
    info = get_memory_info()
    if not info:
        return
    logger.info(
        "memory [%s]: total %.2f GiB, allocated %.2f GiB, reserved %.2f GiB, cached %.2f GiB",
        stage,
        info["total_memory_gb"],
        info["allocated_memory_gb"],
        info["reserved_memory_gb"],
        info["cached_memory_gb"],
    )
