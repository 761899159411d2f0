"""Typed profiler settings (verl's ``global_profiler`` / ``<role>.profiler`` blocks and their ``tool_config``).

:class:`ProfilerConfig` says whether, where and on which ranks to profile; one tool config per backend says how.
Only the ``torch`` and ``torch_memory`` backends run in this build (see :mod:`verl.utils.profiler.profile`); the
Nsight, Ascend NPU and msprobe configs are kept so that verl YAML files load and validate unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from verl.base_config import BaseConfig, check

__all__ = [
    "NPUToolConfig",
    "NsightToolConfig",
    "PrecisionDebuggerToolConfig",
    "ProfilerConfig",
    "TorchMemoryToolConfig",
    "TorchProfilerScheduleConfig",
    "TorchProfilerToolConfig",
]

T = TypeVar("T")

TORCH_CONTENTS = ("cuda", "cpu", "memory", "shapes", "stack")
NPU_CONTENTS = ("npu", "cpu", "memory", "shapes", "module", "stack")
NPU_LEVELS = ("level_none", "level0", "level1", "level2")


def _check_token_window(start: int | None, end: int | None) -> None:
    for key, value in (("profile_token_start", start), ("profile_token_end", end)):
        check(
            value is None or (isinstance(value, int) and value >= 0), key, f"must be an int >= 0 or None, got {value!r}"
        )
    if start is not None and end is not None:
        check(end > start, "profile_token_end", f"({end}) must be > profile_token_start ({start})")


def _check_contents(contents: Any, allowed: tuple[str, ...]) -> None:
    check(isinstance(contents, list), "contents", f"must be a list, got {type(contents).__name__}")
    for item in contents:
        check(item in allowed, "contents", f"{item!r} is not one of {list(allowed)}")


@dataclass
class NsightToolConfig(BaseConfig):
    """Nsight Systems: ``discrete`` gives every annotated stage its own report instead of one per step."""

    discrete: bool = False
    name: str = "nsight"


@dataclass
class TorchProfilerScheduleConfig(BaseConfig):
    """A ``torch.profiler.schedule`` over the steps the profiler is advanced by (:meth:`DistProfiler.step`):
    ``skip_first`` steps, then ``repeat`` cycles (0: unbounded) of ``wait`` idle, ``warmup`` traced-but-dropped and
    ``active`` recorded steps. ``active == 0`` turns scheduling off: everything between start and stop is kept."""

    skip_first: int = 0
    wait: int = 0
    warmup: int = 0
    active: int = 0
    repeat: int = 0
    name: str = "torch_schedule"

    def __post_init__(self) -> None:
        for key in ("skip_first", "wait", "warmup", "active", "repeat"):
            value = getattr(self, key)
            check(
                isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                key,
                f"must be an int >= 0, got {value!r}",
            )

    @property
    def enabled(self) -> bool:
        return self.active > 0


@dataclass
class TorchProfilerToolConfig(BaseConfig):
    """``torch.profiler`` settings. ``contents`` picks what is recorded besides CPU activity (``cuda`` kernels,
    ``memory``, ``shapes``, ``stack``; empty = CPU and CUDA activity only); ``discrete`` writes one trace per
    annotated stage;
    ``schedule`` sub-samples the steps (:class:`TorchProfilerScheduleConfig`). ``profile_token_start/end`` select
    response tokens for rollout engines and have no effect on training workers."""

    contents: list[str] = field(default_factory=list)
    discrete: bool = False
    profile_token_start: int | None = None
    profile_token_end: int | None = None
    schedule: TorchProfilerScheduleConfig | None = None
    name: str = "torch"

    def __post_init__(self) -> None:
        _check_contents(self.contents, TORCH_CONTENTS)
        _check_token_window(self.profile_token_start, self.profile_token_end)


@dataclass
class TorchMemoryToolConfig(BaseConfig):
    """CUDA memory-history snapshots: up to ``trace_alloc_max_entries`` allocations with ``stack_depth`` frames,
    dumped after ``memory_snapshot_num_steps`` profiled steps."""

    trace_alloc_max_entries: int = 100_000
    stack_depth: int = 32
    memory_snapshot_num_steps: int = 1
    name: str = "torch_memory"

    def __post_init__(self) -> None:
        for key in ("trace_alloc_max_entries", "stack_depth", "memory_snapshot_num_steps"):
            value = getattr(self, key)
            check(
                isinstance(value, int) and not isinstance(value, bool) and value > 0,
                key,
                f"must be a positive int, got {value!r}",
            )


@dataclass
class PrecisionDebuggerToolConfig(BaseConfig):
    """msprobe precision-debugger settings (Ascend tooling; not runnable in this build, accepted for YAML
    compatibility): its ``config_path``, the worker ``stages`` to dump, ``strict`` failure on unknown stages.
    ``steps`` is deprecated in verl (``global_profiler.steps`` decides)."""

    name: str = "precision_debugger"
    config_path: str | None = None
    steps: list[int] | None = None
    stages: list[str] | None = None
    strict: bool = False

    def __post_init__(self) -> None:
        check(
            self.config_path is None or isinstance(self.config_path, str),
            "config_path",
            f"must be a str or None, got {self.config_path!r}",
        )
        check(
            self.steps is None or isinstance(self.steps, list), "steps", f"must be a list of ints, got {self.steps!r}"
        )
        check(
            self.stages is None or isinstance(self.stages, list),
            "stages",
            f"must be a list of stage names, got {self.stages!r}",
        )
        check(isinstance(self.strict, bool), "strict", f"must be a bool, got {self.strict!r}")


@dataclass
class NPUToolConfig(NsightToolConfig):
    """Ascend NPU profiler settings (not runnable in this build, accepted for YAML compatibility)."""

    contents: list[str] = field(default_factory=list)
    level: str = "level0"
    analysis: bool = False
    profile_token_start: int | None = None
    profile_token_end: int | None = None
    name: str = "npu"

    def __post_init__(self) -> None:
        _check_contents(self.contents, NPU_CONTENTS)
        check(self.level in NPU_LEVELS, "level", f"must be one of {list(NPU_LEVELS)}, got {self.level!r}")
        check(isinstance(self.analysis, bool), "analysis", f"must be a bool, got {self.analysis!r}")
        _check_token_window(self.profile_token_start, self.profile_token_end)


@dataclass
class ProfilerConfig(BaseConfig):
    """Whether and where one role profiles.

    ``tool``: ``torch`` | ``torch_memory`` (run here) or ``nsys`` | ``npu`` | ``precision_debugger`` (verl's other
    backends). ``enable`` switches it on; ``all_ranks`` / ``ranks`` pick the ranks (default: rank 0).
    ``save_path`` receives the traces. ``finish_hook_cmd`` is a shell command run once after the last profiled
    step on ``finish_hook_ranks`` (or all ranks, or else the profiled ranks), with ``VERL_PROFILE_SAVE_PATH``,
    ``VERL_PROFILE_TOOL``, ``VERL_PROFILE_RANK``, ``VERL_PROFILE_PID`` and ``VERL_PROFILE_ROLE`` set, e.g. to
    upload the traces. ``relocate_results`` only concerns backends that write elsewhere (Nsight under Ray).
    """

    tool: str | None = None
    enable: bool = False
    all_ranks: bool = False
    ranks: list[int] = field(default_factory=list)
    save_path: str | None = None
    tool_config: Any = None
    global_tool_config: Any = None
    relocate_results: bool = False
    finish_hook_cmd: str | None = None
    finish_hook_all_ranks: bool = False
    finish_hook_ranks: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        check(isinstance(self.ranks, list | tuple | set), "ranks", f"must be a list of ints, got {self.ranks!r}")
        check(
            isinstance(self.finish_hook_ranks, list | tuple | set),
            "finish_hook_ranks",
            f"must be a list of ints, got {self.finish_hook_ranks!r}",
        )
        check(
            self.finish_hook_cmd is None or isinstance(self.finish_hook_cmd, str),
            "finish_hook_cmd",
            f"must be a shell command string or None, got {self.finish_hook_cmd!r}",
        )

    def _combine(self, other: ProfilerConfig, both: bool) -> ProfilerConfig:
        if self.tool != other.tool:
            raise ValueError(f"cannot combine profiler configs of different tools: {self.tool!r} and {other.tool!r}")
        flag = (lambda a, b: a and b) if both else (lambda a, b: a or b)
        sets = (lambda a, b: set(a or []) & set(b or [])) if both else (lambda a, b: set(a or []) | set(b or []))
        return ProfilerConfig(
            tool=self.tool,
            enable=flag(self.enable, other.enable),
            all_ranks=flag(self.all_ranks, other.all_ranks),
            ranks=sorted(sets(self.ranks, other.ranks)),
            save_path=self.save_path,
            tool_config=self.tool_config,
            global_tool_config=self.global_tool_config or other.global_tool_config,
            relocate_results=flag(self.relocate_results, other.relocate_results),
            finish_hook_cmd=self.finish_hook_cmd or other.finish_hook_cmd,
            finish_hook_all_ranks=flag(self.finish_hook_all_ranks, other.finish_hook_all_ranks),
            finish_hook_ranks=sorted(sets(self.finish_hook_ranks, other.finish_hook_ranks)),
        )

    def union(self, other: ProfilerConfig) -> ProfilerConfig:
        """Profile wherever either config does (same tool required)."""
        return self._combine(other, both=False)

    def intersect(self, other: ProfilerConfig) -> ProfilerConfig:
        """Profile only where both configs do (same tool required)."""
        return self._combine(other, both=True)
