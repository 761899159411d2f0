"""verl's ``verl.trainer.config.config`` module: the small trainer-level configs its YAML names by class path.

``ModuleConfig`` (a Python file or module a reward manager is loaded from) lives with the reward configs; it is
importable here too because verl's reward YAML names it by this path. ``ProfileConfig`` and
``HybridRolloutSwitchConfig`` describe verl features this build does not have (a step-range profiler, lending
trainer GPUs to the rollout); their YAML blocks are accepted and have no effect (``inert_keys.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from verl.base_config import BaseConfig, check
from verl.trainer.config.base_model import BaseModelConfig
from verl.workers.config.actor import CheckpointConfig
from verl.workers.config.reward import ModuleConfig

__all__ = ["BaseModelConfig", "CheckpointConfig", "HybridRolloutSwitchConfig", "ModuleConfig", "ProfileConfig"]


@dataclass
class ProfileConfig(BaseConfig):
    """Profile ``profile_ranks`` (None: all) from step ``step_start`` to ``step_end``, saving to ``save_path``."""

    profile_ranks: list[int] | None = None
    step_start: int = -1
    step_end: int = -1
    save_path: str | None = None


@dataclass
class HybridRolloutSwitchConfig(BaseConfig):
    """verl's ``trainer.v1.hybrid_rollout``: lend idle trainer GPUs to the rollout between steps, reclaiming them once
    ``switch_threshold_ratio`` of a batch can be sampled (adapted per step when ``adaptive_switch_threshold``)."""

    enable_switch: bool = False
    switch_threshold_ratio: float = 0.4
    adaptive_switch_threshold: bool = True
    switch_threshold_step_up: float = 0.05
    switch_threshold_step_down: float = 0.03
    switch_threshold_release_steps: int = 2
    switch_cost_window_size: int = 3

    def __post_init__(self) -> None:
        check(
            0.0 < self.switch_threshold_ratio <= 1.0,
            "switch_threshold_ratio",
            f"must be in (0, 1], got {self.switch_threshold_ratio}",
        )
        check(
            self.switch_cost_window_size >= 1,
            "switch_cost_window_size",
            f"must be >= 1, got {self.switch_cost_window_size}",
        )
