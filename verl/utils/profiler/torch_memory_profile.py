"""The ``torch_memory`` profiler backend: CUDA allocator history snapshots (open them at pytorch.org/memory_viz).

Recording starts with the first profiled step; after ``memory_snapshot_num_steps`` profiled steps the history is
dumped to ``save_path/[<role>_]rank<r>_step<s>_memory.pickle``. It needs CUDA: without it, starting raises.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

logger = logging.getLogger(__name__)

__all__ = ["TorchMemoryProfiler"]


class TorchMemoryProfiler:
    """One process's CUDA memory-history recorder, driven by :class:`~verl.utils.profiler.profile.DistProfiler`."""

    def __init__(
        self, rank: int, config: Any, tool_config: Any = None, save_file_prefix: str | None = None, **kwargs: Any
    ) -> None:
        from verl.utils.config_builder import as_config
        from verl.utils.profiler.config import ProfilerConfig, TorchMemoryToolConfig

        self.rank = rank
        self.tool_config = as_config(tool_config, TorchMemoryToolConfig, "tool_config")
        self.save_path = as_config(config, ProfilerConfig, "profiler").save_path or os.path.join(
            os.getcwd(), "torch_memory"
        )
        self.prefix = f"{save_file_prefix}_" if save_file_prefix else ""
        self._recording = False
        self._steps = 0
        self._step_label = "0"
        self.saved_files: list[str] = []

    def start(self, profile_step: Any = None, **kwargs: Any) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"rank {self.rank}: profiler tool 'torch_memory' records the CUDA allocator, and no "
                "CUDA device is visible; use tool 'torch' (with contents: [memory]) on CPU"
            )
        if profile_step is not None:
            self._step_label = str(profile_step)
        if not self._recording:
            torch.cuda.memory._record_memory_history(
                max_entries=self.tool_config.trace_alloc_max_entries, stacks="python"
            )
            self._recording = True

    def stop(self) -> None:
        if not self._recording:
            return
        self._steps += 1
        if self._steps < self.tool_config.memory_snapshot_num_steps:
            return
        os.makedirs(self.save_path, exist_ok=True)
        path = os.path.join(self.save_path, f"{self.prefix}rank{self.rank}_step{self._step_label}_memory.pickle")
        torch.cuda.memory._dump_snapshot(path)
        torch.cuda.memory._record_memory_history(enabled=None)
        self._recording = False
        self._steps = 0
        self.saved_files.append(path)
        logger.info("rank %d: CUDA memory snapshot written to %s", self.rank, path)

    def step(self) -> None:
        """Snapshots are per profiled step; there is no finer schedule."""
