"""Profiling and timing (verl's ``verl.utils.profiler``): the per-rank :class:`DistProfiler`, its config, stage
timers and device-memory logging. See :mod:`verl.utils.profiler.profile` for which backends run here."""

from verl.utils.profiler.config import (
    NPUToolConfig,
    NsightToolConfig,
    PrecisionDebuggerToolConfig,
    ProfilerConfig,
    TorchMemoryToolConfig,
    TorchProfilerScheduleConfig,
    TorchProfilerToolConfig,
)
from verl.utils.profiler.performance import (
    GPUMemoryLogger,
    gather_timing,
    log_gpu_memory_usage,
    marked_timer,
    reduce_timing,
    simple_timer,
    topk_reduce_ratio_min_max,
)
from verl.utils.profiler.profile import (
    DistProfiler,
    DistProfilerExtension,
    build_rollout_dist_profiler,
    mark_annotate,
    mark_end_range,
    mark_start_range,
)

__all__ = [
    "DistProfiler",
    "DistProfilerExtension",
    "GPUMemoryLogger",
    "NPUToolConfig",
    "NsightToolConfig",
    "PrecisionDebuggerToolConfig",
    "ProfilerConfig",
    "TorchMemoryToolConfig",
    "TorchProfilerScheduleConfig",
    "TorchProfilerToolConfig",
    "build_rollout_dist_profiler",
    "gather_timing",
    "log_gpu_memory_usage",
    "mark_annotate",
    "mark_end_range",
    "mark_start_range",
    "marked_timer",
    "reduce_timing",
    "simple_timer",
    "topk_reduce_ratio_min_max",
]
