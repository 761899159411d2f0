"""``DynamicScheduleContext``: what a fully-async scheduling decision looks at, under verl's name.

One sync period trains ``trigger_parameter_sync_step`` updates of ``required_samples`` samples each; the rollout may
run ahead of what the trainer has consumed by ``buffer_samples`` (the staleness budget, see ``staleness.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DynamicScheduleContext"]


@dataclass
class DynamicScheduleContext:
    """Counts and waits of the current sync period. ``step_required_samples`` is derived: the samples one whole
    period trains on."""

    required_samples: int
    trigger_parameter_sync_step: int
    total_generated_samples: int
    expected_samples: int
    buffer_samples: int
    step_wait_times: list[float] = field(default_factory=list)
    step_wait_samples: list[int] = field(default_factory=list)
    only_hybrid: bool = False
    last_activate_duration_s: float = 0.0
    last_deactivate_duration_s: float = 0.0
    step_required_samples: int = field(init=False)

    def __post_init__(self) -> None:
        if self.required_samples < 1 or self.trigger_parameter_sync_step < 1:
            raise ValueError(
                f"DynamicScheduleContext: required_samples ({self.required_samples}) and "
                f"trigger_parameter_sync_step ({self.trigger_parameter_sync_step}) must be >= 1"
            )
        self.step_required_samples = self.required_samples * self.trigger_parameter_sync_step

    @property
    def ahead_samples(self) -> int:
        """How far generation runs ahead of what the trainer has been promised (negative: behind)."""
        return self.total_generated_samples - self.expected_samples

    @property
    def within_budget(self) -> bool:
        """True while the lead stays within the staleness budget (``buffer_samples``)."""
        return self.ahead_samples <= self.buffer_samples

    @property
    def mean_wait_per_sample_s(self) -> float:
        """Seconds the trainer waited per sample it had to wait for (0 when none were waited on)."""
        waited = sum(self.step_wait_samples)
        return sum(self.step_wait_times) / waited if waited else 0.0
