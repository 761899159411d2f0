"""verl's ``detach_utils`` names for the fully-async recipe: the sample type, batch assembly, metric aggregation.

- ``RolloutSample`` is this recipe's prompt group as it travels through the queue (see ``sample.py``).
- :func:`assemble_batch_from_rollout_samples` is how the trainer turns the groups of one update into a batch: in
  stream order, so the result does not depend on which group finished first.
- :class:`MetricsAggregator` folds the metrics of the updates of one sync period into one row.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from verl.experimental.fully_async_policy.sample import RolloutSample
from verl.protocol import DataProto

__all__ = ["MetricsAggregator", "RolloutSample", "assemble_batch_from_rollout_samples"]


def assemble_batch_from_rollout_samples(
    rollout_samples: Sequence[RolloutSample], tokenizer: Any = None, config: Any = None, balance_batch: Any = None
) -> DataProto:
    """One batch of the groups' rows, ordered by each group's position in the prompt stream. ``tokenizer``,
    ``config`` and ``balance_batch`` are verl's arguments; balancing over ranks happens later in the trainer."""
    if not rollout_samples:
        raise ValueError("assemble_batch_from_rollout_samples: no rollout samples to assemble")
    ordered = sorted(rollout_samples, key=lambda sample: sample.index)
    return DataProto.concat([sample.batch for sample in ordered])


class MetricsAggregator:
    """Folds per-update metrics of one sync period into one value per key.

    Seconds (``timing_s/*``) and counts (names with ``sum``/``total``/``count``) add up; ``min``/``max`` keep the
    extreme; version and step counters (``param_version``, ``global_step``) keep the last value; everything else is
    averaged, weighted by the number of samples of each update.
    """

    LAST = ("param_version", "global_step", "consumed_groups")

    def __init__(self, total_gpus: int, hybrid_gpus: int = 0, standalone_gpus: int = 0) -> None:
        self.total_gpus, self.hybrid_gpus, self.standalone_gpus = (
            int(total_gpus),
            int(hybrid_gpus),
            int(standalone_gpus),
        )
        self.reset()

    def reset(self) -> None:
        self.metric_values: dict[str, list[float]] = defaultdict(list)
        self.metric_weights: dict[str, list[int]] = defaultdict(list)
        self.sample_counts: list[int] = []
        self.timestamps: list[float] = []
        self.step_count = 0

    def add_step_metrics(self, metrics: dict[str, Any], sample_count: int, timestamp: float | None = None) -> None:
        """Record one update's numeric metrics (others are ignored) and how many samples it trained on."""
        self.sample_counts.append(int(sample_count))
        self.timestamps.append(time.time() if timestamp is None else float(timestamp))
        self.step_count += 1
        for key, value in metrics.items():
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = value.item()
            if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
                self.metric_values[key].append(float(value))
                self.metric_weights[key].append(int(sample_count))

    def aggregation_of(self, key: str) -> str:
        """``sum`` | ``min`` | ``max`` | ``last`` | ``mean`` for ``key``."""
        lower = key.lower()
        if lower.startswith("timing_s/") or any(word in lower for word in ("sum", "total", "count")):
            return "sum"
        if any(word in lower for word in self.LAST):
            return "last"
        if lower.endswith("/max") or "max" in lower.rsplit("/", 1)[-1]:
            return "max"
        if lower.endswith("/min") or "min" in lower.rsplit("/", 1)[-1]:
            return "min"
        return "mean"

    def _aggregate(self, key: str) -> float:
        values, weights = self.metric_values[key], self.metric_weights[key]
        kind = self.aggregation_of(key)
        if kind == "sum":
            return float(sum(values))
        if kind == "last":
            return values[-1]
        if kind == "max":
            return max(values)
        if kind == "min":
            return min(values)
        total = sum(weights)
        if total <= 0:
            return float(sum(values) / len(values))
        return float(sum(v * w for v, w in zip(values, weights)) / total)

    def get_aggregated_metrics(self) -> dict[str, float]:
        """One value per key over the updates recorded since the last ``reset``, plus the period's wall time."""
        if self.step_count == 0:
            return {}
        aggregated = {key: self._aggregate(key) for key in self.metric_values}
        aggregated["fully_async/period/updates"] = float(self.step_count)
        aggregated["fully_async/period/samples"] = float(sum(self.sample_counts))
        if self.step_count > 1:
            aggregated["fully_async/period/wall_s"] = self.timestamps[-1] - self.timestamps[0]
        return aggregated

    def get_current_stats(self) -> dict[str, Any]:
        return {
            "step_count": self.step_count,
            "total_samples": sum(self.sample_counts),
            "metric_names": sorted(self.metric_values),
        }
