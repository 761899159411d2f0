"""The ``torch`` profiler backend: ``torch.profiler`` traces (Chrome/Perfetto JSON) of the profiled steps.

Continuous mode records everything from :meth:`Profiler.start` to :meth:`Profiler.stop` into one trace per step,
with each annotated stage named inside it. Discrete mode (``tool_config.discrete``) writes one trace per annotated
stage instead. Traces go to ``save_path`` as ``[<role>_]rank<r>_step<s>[_<stage>].json``; with a schedule, one file
per recorded window (``..._w<n>.json``).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity

logger = logging.getLogger(__name__)

__all__ = ["Profiler"]


def _activities(contents: list[str]) -> list[ProfilerActivity]:
    activities = [ProfilerActivity.CPU]
    if (not contents or "cuda" in contents) and torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    return activities


class Profiler:
    """One process's ``torch.profiler`` session, driven by :class:`~verl.utils.profiler.profile.DistProfiler`."""

    def __init__(
        self, rank: int, config: Any, tool_config: Any = None, save_file_prefix: str | None = None, **kwargs: Any
    ) -> None:
        from verl.utils.config_builder import as_config
        from verl.utils.profiler.config import ProfilerConfig, TorchProfilerToolConfig

        self.rank = rank
        self.tool_config = as_config(tool_config, TorchProfilerToolConfig, "tool_config")
        self.save_path = as_config(config, ProfilerConfig, "profiler").save_path or os.path.join(
            os.getcwd(), "torch_profile"
        )
        self.prefix = f"{save_file_prefix}_" if save_file_prefix else ""
        self.discrete = bool(self.tool_config.discrete)
        self._profile: torch.profiler.profile | None = None
        self._step_label = "0"
        self._starts = 0
        self._windows = 0
        self.saved_files: list[str] = []

    # -- session -------------------------------------------------------------------------------------------------
    def _trace_path(self, stage: str | None = None) -> str:
        os.makedirs(self.save_path, exist_ok=True)
        stage_part = f"_{stage}" if stage else ""
        return os.path.join(self.save_path, f"{self.prefix}rank{self.rank}_step{self._step_label}{stage_part}.json")

    def _new_profile(self, stage: str | None) -> torch.profiler.profile:
        contents = list(self.tool_config.contents or [])
        schedule_cfg = self.tool_config.schedule
        kwargs: dict[str, Any] = {}
        if schedule_cfg is not None and int(schedule_cfg.active or 0) > 0 and stage is None:
            kwargs["schedule"] = torch.profiler.schedule(
                wait=int(schedule_cfg.wait),
                warmup=int(schedule_cfg.warmup),
                active=int(schedule_cfg.active),
                repeat=int(schedule_cfg.repeat),
                skip_first=int(schedule_cfg.skip_first),
            )
            kwargs["on_trace_ready"] = self._save_window
        return torch.profiler.profile(
            activities=_activities(contents),
            record_shapes="shapes" in contents,
            profile_memory="memory" in contents,
            with_stack="stack" in contents,
            **kwargs,
        )

    def _save(self, prof: torch.profiler.profile, path: str) -> None:
        prof.export_chrome_trace(path)
        self.saved_files.append(path)
        logger.info("rank %d: torch profiler trace written to %s", self.rank, path)

    def _save_window(self, prof: torch.profiler.profile) -> None:
        self._windows += 1
        self._save(prof, self._trace_path().removesuffix(".json") + f"_w{self._windows}.json")

    @property
    def running(self) -> bool:
        return self._profile is not None

    def start(self, profile_step: Any = None, **kwargs: Any) -> None:
        """Begin recording step ``profile_step`` (continuous mode; discrete mode records per stage instead)."""
        self._starts += 1
        self._step_label = str(profile_step) if profile_step is not None else str(self._starts)
        if self.discrete or self._profile is not None:
            return
        self._windows = 0
        self._profile = self._new_profile(None)
        self._profile.start()

    def stop(self) -> None:
        """Stop recording and write the step's trace (scheduled sessions wrote theirs window by window)."""
        prof, self._profile = self._profile, None
        if prof is None:
            return
        prof.stop()
        if prof.on_trace_ready is None:  # scheduled sessions saved each window as it closed
            self._save(prof, self._trace_path())

    def step(self) -> None:
        """Advance the schedule (a no-op when nothing is recording)."""
        if self._profile is not None:
            self._profile.step()

    def annotate(self, message: str | None = None, role: str | None = None, **kwargs: Any) -> Callable:
        """Decorator naming a stage: a ``record_function`` range in continuous mode, its own trace in discrete
        mode."""

        def decorator(func: Callable) -> Callable:
            label = message or role or func.__name__

            @functools.wraps(func)
            def wrapper(*args: Any, **kw: Any) -> Any:
                if not self.discrete:
                    with torch.profiler.record_function(label):
                        return func(*args, **kw)
                prof = self._new_profile(label)
                with prof:
                    with torch.profiler.record_function(label):
                        result = func(*args, **kw)
                self._save(prof, self._trace_path(label.replace("/", "_")))
                return result

            return wrapper

        return decorator
