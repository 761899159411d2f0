"""Stage timers under verl 0.4's path ``verl.utils.debug.performance`` (see :mod:`verl.utils.profiler.performance`)."""

from verl.utils.profiler.performance import (
    GPUMemoryLogger,
    _timer,
    log_gpu_memory_usage,
    log_print,
    marked_timer,
    reduce_timing,
    simple_timer,
)

__all__ = [
    "GPUMemoryLogger",
    "_timer",
    "log_gpu_memory_usage",
    "log_print",
    "marked_timer",
    "reduce_timing",
    "simple_timer",
]
