"""Stage timers and device-memory reports used around training stages (verl's ``profiler.performance``).

:func:`marked_timer` is the trainer's stage timer: it adds a block's wall time to ``timing_raw[name]`` and names
the stage in ``torch.profiler`` traces.
Memory figures come from the accelerator's allocator; on CPU they are reported as 0.
"""

from __future__ import annotations

import datetime
import functools
import inspect
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from verl.utils.logger import DecoratorLoggerBase

__all__ = [
    "GPUMemoryLogger",
    "gather_timing",
    "log_gpu_memory_usage",
    "log_print",
    "marked_timer",
    "reduce_timing",
    "simple_timer",
    "topk_reduce_ratio_min_max",
]

_UNITS = {"GB": 1024**3, "MB": 1024**2, "KB": 1024}


def _get_current_mem_info(unit: str = "GB", precision: int = 2) -> tuple[str, str, str, str]:
    """``(allocated, reserved, used, total)`` device memory as text in ``unit``; all ``0.00`` without CUDA."""
    if unit not in _UNITS:
        raise ValueError(f"unit must be one of {list(_UNITS)}, got {unit!r}")
    if not torch.cuda.is_available():
        return ("0.00",) * 4  # type: ignore[return-value]
    free, total = torch.cuda.mem_get_info()
    values = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), total - free, total)
    return tuple(f"{v / _UNITS[unit]:.{precision}f}" for v in values)  # type: ignore[return-value]


def _memory_line(head: str) -> str:
    allocated, reserved, used, total = _get_current_mem_info()
    return (
        f"{head}, memory allocated (GB): {allocated}, memory reserved (GB): {reserved}, "
        f"device memory used/total (GB): {used}/{total}"
    )


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def log_gpu_memory_usage(
    head: str, logger: logging.Logger | None = None, level: int = logging.DEBUG, rank: int | None = 0
) -> None:
    """Report device memory with the prefix ``head`` through ``logger`` (or ``print``), on process rank ``rank``
    only (``None``: every rank)."""
    if rank is not None and _rank() != rank:
        return
    message = _memory_line(head)
    if logger is None:
        print(message)
    else:
        logger.log(level, message)


class GPUMemoryLogger(DecoratorLoggerBase):
    """Decorator reporting device memory before and after each call, e.g. ``@GPUMemoryLogger(role="actor")``."""

    def __init__(
        self, role: str, logger: logging.Logger | None = None, level: int = logging.DEBUG, log_only_rank_0: bool = True
    ) -> None:
        super().__init__(role, logger, level, _rank(), log_only_rank_0)

    def __call__(self, decorated_function: Callable) -> Callable:
        @functools.wraps(decorated_function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return self.log(decorated_function, *args, **kwargs)

        return wrapper

    def log(self, func: Callable, *args: Any, **kwargs: Any) -> Any:
        self.logging_function(_memory_line(f"Before {func.__name__}"))
        output = func(*args, **kwargs)
        self.logging_function(_memory_line(f"After {func.__name__}"))
        return output


def log_print(ctn: Any) -> None:
    """Print ``ctn`` prefixed with the time and the caller's file, line and function."""
    frame = inspect.currentframe()
    caller = frame.f_back if frame is not None else None
    where = (
        f"{caller.f_code.co_filename.rsplit('/', 1)[-1]}:{caller.f_lineno}:{caller.f_code.co_name}"
        if caller is not None
        else "?"
    )
    print(f"[{datetime.datetime.now():%Y-%m-%d %H:%M:%S}-{where}]: {ctn}")


@contextmanager
def marked_timer(
    name: str,
    timing_raw: dict[str, float],
    color: str | None = None,
    domain: str | None = None,
    category: str | None = None,
) -> Iterator[None]:
    """Add the wall time of the block to ``timing_raw[name]`` (seconds) and mark it as ``name`` in a running
    ``torch.profiler`` trace. ``color``/``domain``/``category`` style Nsight ranges in verl and are ignored. A
    block that raises adds nothing."""
    with torch.profiler.record_function(name):
        start = time.perf_counter()
        yield
        elapsed = time.perf_counter() - start
    timing_raw[name] = timing_raw.get(name, 0.0) + elapsed


def _timer(name: str, timing_raw: dict[str, float]) -> Iterator[None]:
    """Generator form of the stage timer, for ``yield from _timer(...)`` inside a caller's own context manager
    (verl 0.4's spelling)."""
    with marked_timer(name, timing_raw):
        yield


@contextmanager
def simple_timer(name: str, timing_raw: dict[str, float]) -> Iterator[None]:
    """Add the wall time of the block to ``timing_raw[name]`` (seconds)."""
    yield from _timer(name, timing_raw)


def _sorted_values(timing_raw: dict[str, float]) -> tuple[list[str], list[float]]:
    keys = sorted(timing_raw)
    return keys, [float(timing_raw[k]) for k in keys]


def _comm_device() -> torch.device:
    backend = dist.get_backend()
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


def reduce_timing(timing_raw: dict[str, float], reduce_op: Any = None) -> dict[str, float]:
    """``timing_raw`` reduced over all ranks (default: averaged); unchanged outside torch.distributed. Every rank
    must pass the same keys."""
    if not (dist.is_available() and dist.is_initialized()):
        return timing_raw
    keys, values = _sorted_values(timing_raw)
    tensor = torch.tensor(values, dtype=torch.float32, device=_comm_device())
    op = reduce_op if reduce_op is not None else dist.ReduceOp.SUM
    dist.all_reduce(tensor, op=op)
    if reduce_op is None:
        tensor /= dist.get_world_size()
    return dict(zip(keys, tensor.cpu().tolist(), strict=True))


def gather_timing(timing_raw: dict[str, float]) -> dict[str, list[float]]:
    """Every rank's value per key (``{key: [rank0, rank1, ...]}``); one entry outside torch.distributed."""
    if not (dist.is_available() and dist.is_initialized()):
        return {k: [v] for k, v in timing_raw.items()}
    keys, values = _sorted_values(timing_raw)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, values)
    return {key: [rank_values[i] for rank_values in gathered] for i, key in enumerate(keys)}


def topk_reduce_ratio_min_max(timing: float, k: int = 10) -> tuple[float, float, float]:
    """``(tail_ratio, min, max)`` of one timing over the ranks: ``tail_ratio`` is the fraction of ranks slower
    than the ``(100 - k)``-th percentile (stragglers). ``(-1, -1, -1)`` outside torch.distributed."""
    if not (dist.is_available() and dist.is_initialized()):
        return -1.0, -1.0, -1.0
    device = _comm_device()
    mine = torch.tensor([float(timing)], dtype=torch.float32, device=device)
    everyone = [torch.zeros(1, dtype=torch.float32, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    stacked = torch.cat(everyone)
    threshold = torch.quantile(stacked, 1 - k / 100)
    return (stacked > threshold).float().mean().item(), stacked.min().item(), stacked.max().item()
