"""``Metric`` (values with an explicit reduction) and ``reduce_metrics``.

A worker reports one value per micro-batch. Most are means of something and reduce by their mean, but a loss
that is already normalised by the global batch (a partial sum) must be *summed* over micro-batches to give the
global value, and a peak must take the max. A plain list of values says nothing about that, so its reduction is
guessed from the key (``max`` / ``min`` in the name, else the mean); a :class:`Metric` says it explicitly.
"""

from __future__ import annotations

import math
import numbers
from enum import Enum
from typing import Any

import numpy as np
import torch

__all__ = ["AggregationType", "Metric", "reduce_metrics"]


class AggregationType(Enum):
    """How a metric's values reduce to one number."""

    MEAN = "mean"
    SUM = "sum"
    MIN = "min"
    MAX = "max"


Numeric = int | float | torch.Tensor | np.ndarray | np.number
NumericType = (int, float, torch.Tensor, np.ndarray, np.number)  # for isinstance checks


def _as_number(value: Any) -> int | float:
    """A plain Python number from a number, numpy scalar or one-element tensor/array; anything else raises."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"a metric value must be a scalar, got a tensor of shape {tuple(value.shape)}")
        return value.detach().item()
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise ValueError(f"a metric value must be a scalar, got an array of shape {value.shape}")
        return value.item()
    if isinstance(value, np.number | np.bool_):
        return value.item()
    if not isinstance(value, numbers.Number):
        raise ValueError(f"a metric value must be a number or a scalar tensor, got {type(value).__name__}: {value!r}")
    return value


def _reduce(values: list[float], aggregation: AggregationType) -> float:
    if not values:
        return 0.0 if aggregation is AggregationType.SUM else math.nan
    if aggregation is AggregationType.MEAN:
        return float(np.mean(values))
    if aggregation is AggregationType.SUM:
        return float(np.sum(values))
    if aggregation is AggregationType.MIN:
        return float(np.min(values))
    return float(np.max(values))


class Metric:
    """Values of one metric (e.g. one per micro-batch) and the reduction that turns them into one number."""

    def __init__(self, aggregation: str | AggregationType, value: Numeric | list[Numeric] | Metric | None = None):
        if isinstance(aggregation, str):
            aggregation = AggregationType(aggregation)  # ValueError names the bad string
        if not isinstance(aggregation, AggregationType):
            raise ValueError(
                f"Metric aggregation must be one of {[a.value for a in AggregationType]}, got {aggregation!r}"
            )
        self.aggregation = aggregation
        self.values: list[int | float] = []
        if value is not None:
            self.extend(value) if isinstance(value, list) else self.append(value)

    def __repr__(self) -> str:
        return f"Metric(aggregation={self.aggregation.value!r}, values={self.values!r})"

    def append(self, value: Numeric | Metric) -> None:
        """Add one value; a Metric adds all of its values (same aggregation required)."""
        if isinstance(value, Metric):
            self.extend(value)
        else:
            self.values.append(_as_number(value))

    def extend(self, values: Metric | list[Numeric]) -> None:
        """Add several values, or all values of another Metric with the same aggregation."""
        if isinstance(values, Metric):
            if values.aggregation != self.aggregation:
                raise ValueError(
                    f"cannot merge a {values.aggregation.value!r} metric into a {self.aggregation.value!r} one"
                )
            values = values.values
        for value in values:
            self.append(value)

    def aggregate(self) -> float:
        """The reduced value (nan for no values, 0 for an empty sum)."""
        return _reduce(self.values, self.aggregation)

    @classmethod
    def aggregate_dp(cls, metric_lists: list[Metric]) -> float:
        """Reduce one metric reported by every data-parallel rank (each with one value per micro-batch).

        Sums and means first average over ranks (each rank saw a shard of the same global batch, so its partial
        sum is already the global value's share times dp), then reduce over micro-batches; min and max reduce
        over every value of every rank.
        """
        if not metric_lists:
            raise ValueError("Metric.aggregate_dp needs at least one Metric (one per data-parallel rank)")
        lengths = [len(m.values) for m in metric_lists]
        if len(set(lengths)) != 1:
            raise ValueError(f"Metric.aggregate_dp: every rank must report the same number of values, got {lengths}")
        aggregation = metric_lists[0].aggregation
        table = np.asarray([m.values for m in metric_lists], dtype=np.float64)  # [dp, micro-batches]
        if aggregation in (AggregationType.SUM, AggregationType.MEAN):
            return _reduce(table.mean(axis=0).tolist(), aggregation)
        return _reduce(table.ravel().tolist(), aggregation)

    @classmethod
    def from_dict(cls, data: dict[str, Numeric], aggregation: str | AggregationType) -> dict[str, Metric]:
        """One Metric per key, all with the same aggregation."""
        return {key: cls(aggregation=aggregation, value=value) for key, value in data.items()}

    def init_list(self) -> Metric:
        """An empty Metric with this one's aggregation (what ``append_to_dict`` starts a new key with)."""
        return Metric(aggregation=self.aggregation)


def _guess_aggregation(key: str) -> AggregationType:
    if "max" in key:
        return AggregationType.MAX
    if "min" in key:
        return AggregationType.MIN
    return AggregationType.MEAN


def reduce_metrics(metrics: dict[str, Metric | list[Any] | Any]) -> dict[str, Any]:
    """Reduce every entry of ``metrics`` to one number, in place, and return the dict.

    A :class:`Metric` uses its own aggregation; a list uses the max when its key contains ``max``, the min when
    it contains ``min``, else the mean (an empty list gives nan). ``None`` entries are skipped and a list holding
    only ``None`` drops its key; a scalar stays itself (as a float).
    """
    dropped = []
    for key, value in metrics.items():
        if isinstance(value, Metric):
            metrics[key] = value.aggregate()
            continue
        if not isinstance(value, list | tuple | np.ndarray):
            value = [value]
        numbers_ = [_as_number(v) for v in value if v is not None]
        if len(value) and not numbers_:
            dropped.append(key)
            continue
        metrics[key] = _reduce(numbers_, _guess_aggregation(key))
    for key in dropped:
        del metrics[key]
    return metrics
