"""Metric values gathered over micro-batches and ranks, and how they reduce to one number per key."""

from verl.utils.metric.utils import AggregationType, Metric, reduce_metrics

__all__ = ["AggregationType", "Metric", "reduce_metrics"]
