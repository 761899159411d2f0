"""DistProfiler: per-rank profiling switched on and off by the trainer around selected steps.

Each worker owns a :class:`DistProfiler` built from its role's :class:`ProfilerConfig`. The trainer calls
``start_profile`` / ``stop_profile`` (the :class:`DistProfilerExtension` methods, dispatched to every rank) around a
profiled step, and worker methods decorated with :meth:`DistProfiler.annotate` become named stages of the trace.
The profiler only acts when it is enabled, this rank is selected and a step is being profiled; otherwise every
call is a no-op, so decorated code costs nothing in normal runs.

Backends (``config.tool``): ``torch`` (``torch.profiler`` traces) and ``torch_memory`` (CUDA allocator snapshots)
run here. verl's ``nsys`` (Nsight under Ray), ``npu`` (Ascend) and ``precision_debugger`` (msprobe) backends are
not part of this build: enabling one raises :class:`~verl.utils.extras.MissingExtraError` naming it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import subprocess
from collections.abc import Callable
from typing import Any

import torch

from verl.utils.config_builder import as_config
from verl.utils.extras import MissingExtraError, missing_message
from verl.utils.profiler.config import ProfilerConfig

__all__ = [
    "DistProfiler",
    "DistProfilerExtension",
    "ProfilerConfig",
    "build_rollout_dist_profiler",
    "mark_annotate",
    "mark_end_range",
    "mark_start_range",
]

logger = logging.getLogger(__name__)

_NOT_HERE = {
    "nsys": "Nsight Systems profiling of Ray workers (verl's nsys backend)",
    "npu": "the Ascend NPU profiler",
    "precision_debugger": "the msprobe precision debugger (Ascend tooling)",
}


def mark_start_range(
    message: str | None = None, color: str | None = None, domain: str | None = None, category: str | None = None
) -> int | None:
    """Open an NVTX range named ``message`` (visible in Nsight); returns its id for :func:`mark_end_range`, or None
    without CUDA. ``color``/``domain``/``category`` are accepted for verl compatibility."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.nvtx.range_start(message or "")


def mark_end_range(range_id: int | None) -> None:
    """Close a range opened by :func:`mark_start_range` (None: nothing was opened)."""
    if range_id is not None and torch.cuda.is_available():
        torch.cuda.nvtx.range_end(range_id)


def mark_annotate(
    message: str | None = None, color: str | None = None, domain: str | None = None, category: str | None = None
) -> Callable:
    """Decorator naming every call of the function in ``torch.profiler`` traces (``record_function``)."""

    def decorator(func: Callable) -> Callable:
        label = message or func.__name__

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with torch.profiler.record_function(label):
                return func(*args, **kwargs)

        return wrapper

    return decorator


class _Inactive:
    """The backend of a profiler that is off: every call does nothing."""

    def start(self, **kwargs: Any) -> None:
        return None

    def stop(self) -> None:
        return None

    def step(self) -> None:
        return None


def _backend(tool: str | None, rank: int, config: Any, tool_config: Any, save_file_prefix: str | None) -> Any:
    if tool == "torch":
        from verl.utils.profiler.torch_profile import Profiler

        return Profiler(rank=rank, config=config, tool_config=tool_config, save_file_prefix=save_file_prefix)
    if tool == "torch_memory":
        from verl.utils.profiler.torch_memory_profile import TorchMemoryProfiler

        return TorchMemoryProfiler(rank=rank, config=config, tool_config=tool_config, save_file_prefix=save_file_prefix)
    if tool in _NOT_HERE:
        raise MissingExtraError(
            missing_message(
                f"profiler tool {tool!r}",
                _NOT_HERE[tool],
                reason="use tool 'torch' (torch.profiler traces) or 'torch_memory' (CUDA memory snapshots)",
            )
        )
    if tool is None:
        raise ValueError("profiler enabled without a tool; set tool to 'torch' or 'torch_memory'")
    raise ValueError(f"unknown profiler tool {tool!r}; this build runs 'torch' and 'torch_memory'")


class DistProfiler:
    """Profiling of one rank, configured by ``config`` (a :class:`ProfilerConfig`; None: off).

    ``tool_config`` overrides ``config.tool_config``; ``save_file_prefix`` (usually the role) starts every file
    name so that roles sharing ``save_path`` do not collide.
    """

    def __init__(
        self,
        rank: int,
        config: ProfilerConfig | None = None,
        tool_config: Any = None,
        save_file_prefix: str | None = None,
        **kwargs: Any,
    ) -> None:
        config = as_config(config, ProfilerConfig, "profiler")
        self.rank = rank
        self.config = config
        self.tool_config = tool_config if tool_config is not None else config.tool_config
        self.save_file_prefix = save_file_prefix
        self._tool = config.tool
        self._enable = bool(config.enable)
        self._this_step = False
        ranks = list(config.ranks or [])
        if config.all_ranks:
            self._this_rank = True
        elif ranks:
            self._this_rank = rank in ranks
        else:
            self._this_rank = self._enable and rank == 0
        hook_ranks = list(config.finish_hook_ranks or [])
        if config.finish_hook_all_ranks:
            self._finish_hook_this_rank = True
        elif hook_ranks:
            self._finish_hook_this_rank = rank in hook_ranks
        else:
            self._finish_hook_this_rank = self._this_rank
        self._finish_hook_cmd = config.finish_hook_cmd
        # tool configs differ per backend; only some (torch, nsight) have ``discrete``
        self._discrete = bool(getattr(self.tool_config, "discrete", False)) if self.tool_config is not None else False
        if self._enable and self._this_rank:
            self._impl = _backend(self._tool, rank, config, self.tool_config, save_file_prefix)
        else:
            self._impl = _Inactive()

    def check_enable(self) -> bool:
        return self._enable

    def check_this_rank(self) -> bool:
        return self._this_rank

    def check_this_step(self) -> bool:
        return self._this_step

    def is_discrete_mode(self) -> bool:
        return self._discrete

    def start(self, **kwargs: Any) -> Any:
        """Begin profiling a step on this rank (``profile_step=`` labels the trace)."""
        if self._enable and self._this_rank:
            self._this_step = True
            return self._impl.start(**kwargs)
        return None

    def stop(self, run_command: bool = True) -> Any:
        """End the step's profiling; with ``run_command`` (the last profiled step) run ``finish_hook_cmd``."""
        result = None
        if self._enable and self._this_rank:
            self._this_step = False
            result = self._impl.stop()
        if self._enable and run_command:
            self._run_finish_command()
        return result

    def run_finish_hook(self, run_command: bool = True) -> None:
        """Run ``finish_hook_cmd`` now (for drivers that stop their backend themselves)."""
        if self._enable and run_command:
            self._run_finish_command()

    def step(self) -> Any:
        """Advance the backend's schedule (torch profiler); a no-op elsewhere."""
        if self._enable and self._this_rank:
            return self._impl.step()
        return None

    def _run_finish_command(self) -> None:
        cmd = self._finish_hook_cmd
        if not cmd or not self._finish_hook_this_rank:
            return
        save_path = self.config.save_path
        env = dict(
            os.environ,
            VERL_PROFILE_SAVE_PATH=str(save_path or ""),
            VERL_PROFILE_TOOL=str(self._tool or ""),
            VERL_PROFILE_RANK=str(self.rank),
            VERL_PROFILE_PID=str(os.getpid()),
        )
        if self.save_file_prefix:
            env["VERL_PROFILE_ROLE"] = str(self.save_file_prefix)
        try:  # a failing upload must never stop training
            result = subprocess.run(["/bin/sh", "-c", cmd], env=env, capture_output=True, text=True)
        except OSError as exc:
            logger.warning("rank %d: profiler finish_hook_cmd %r could not start: %s", self.rank, cmd, exc)
            return
        if result.returncode != 0:
            logger.warning(
                "rank %d: profiler finish_hook_cmd %r exited with %d: %s",
                self.rank,
                cmd,
                result.returncode,
                (result.stdout + result.stderr).strip()[-2000:],
            )

    @classmethod
    def annotate(
        cls,
        message: str | None = None,
        color: str | None = None,
        domain: str | None = None,
        category: str | None = None,
        **kwargs_outer: Any,
    ) -> Callable:
        """Decorator for worker methods: while ``self.profiler`` profiles a step on this rank, the call is a named
        stage of the trace (its own trace in discrete mode); otherwise the method runs unchanged."""

        def decorator(func: Callable) -> Callable:
            @functools.wraps(func)
            def wrapper(self_instance: Any, *args: Any, **kwargs: Any) -> Any:
                profiler = getattr(self_instance, "profiler", None)
                active = (
                    isinstance(profiler, DistProfiler)
                    and profiler.check_enable()
                    and profiler.check_this_rank()
                    and profiler.check_this_step()
                )
                annotate = getattr(profiler._impl, "annotate", None) if active else None
                if annotate is None:
                    return func(self_instance, *args, **kwargs)
                wrapped = annotate(message=message, color=color, domain=domain, category=category, **kwargs_outer)(func)
                return wrapped(self_instance, *args, **kwargs)

            return wrapper

        return decorator


def build_rollout_dist_profiler(
    replica_rank: int, replica_world_size: int, config: Any = None, tool_config: Any = None
) -> DistProfiler:
    """A :class:`DistProfiler` for rollout replica ``replica_rank``, whose engine spans ``replica_world_size``
    GPUs: ``config.ranks`` lists global GPU ranks, so a replica is profiled when it owns one of them."""
    config = as_config(config, ProfilerConfig, "profiler")
    if not config.all_ranks:
        ranks = list(config.ranks or [])
        if ranks and replica_world_size and replica_world_size > 0:
            config = dataclasses.replace(config, ranks=sorted({int(r) // replica_world_size for r in ranks}))
    return DistProfiler(rank=replica_rank, config=config, tool_config=tool_config)


class DistProfilerExtension:
    """Mixin for workers: exposes the worker's ``profiler`` to the trainer as remote methods called on every rank."""

    def __init__(self, profiler: DistProfiler) -> None:
        self.profiler = profiler

    from verl.single_controller.base.decorator import Dispatch, register

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def start_profile(self, **kwargs: Any) -> None:
        """Start profiling the current step on the selected ranks."""
        self.profiler.start(**kwargs)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def stop_profile(self, run_command: bool = True) -> None:
        """Stop profiling the current step (``run_command``: also run the finish hook; last profiled step)."""
        self.profiler.stop(run_command=run_command)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def step_profile(self) -> None:
        """Advance the profiler's schedule."""
        self.profiler.step()

    del Dispatch, register
