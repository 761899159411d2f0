"""Metric (values with an explicit reduction), reduce_metrics and append_to_dict."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from verl.utils.metric import AggregationType, Metric, reduce_metrics
from verl.utils.py_functional import append_to_dict


def test_metric_reductions_and_value_types():
    metric = Metric("sum", [1, 2.5])
    metric.append(torch.tensor(0.5))
    metric.append(np.float32(1.0))
    metric.append(np.array([2.0]))
    assert metric.values == [1, 2.5, 0.5, 1.0, 2.0]
    assert metric.aggregate() == pytest.approx(7.0)
    assert Metric(AggregationType.MAX, [3, 7, 5]).aggregate() == 7
    assert Metric("min", [3, 7, 5]).aggregate() == 3
    assert math.isnan(Metric("mean").aggregate()) and Metric("sum").aggregate() == 0.0


def test_metric_rejects_bad_values_and_mixed_aggregations():
    with pytest.raises(ValueError):
        Metric("median")
    with pytest.raises(ValueError, match="scalar"):
        Metric("mean").append(torch.ones(2))
    with pytest.raises(ValueError, match="number"):
        Metric("mean").append("0.5")
    with pytest.raises(ValueError, match="cannot merge a 'sum' metric into a 'mean' one"):
        Metric("mean", 1.0).extend(Metric("sum", 2.0))


def test_aggregate_dp_averages_partial_sums_over_ranks():
    # Two ranks, two micro-batches each: a globally normalised loss is a partial sum per micro-batch.
    ranks = [Metric("sum", [0.1, 0.3]), Metric("sum", [0.5, 0.7])]
    assert Metric.aggregate_dp(ranks) == pytest.approx((0.1 + 0.5) / 2 + (0.3 + 0.7) / 2)
    assert Metric.aggregate_dp([Metric("max", [1, 9]), Metric("max", [4, 2])]) == 9
    with pytest.raises(ValueError, match="same number of values"):
        Metric.aggregate_dp([Metric("sum", [1]), Metric("sum", [1, 2])])
    with pytest.raises(ValueError, match="at least one"):
        Metric.aggregate_dp([])


def test_reduce_metrics_guesses_from_key_and_skips_none():
    metrics = {
        "actor/pg_loss": [1.0, torch.tensor(3.0)],
        "perf/max_memory_gb": [2.0, 5.0, 3.0],
        "perf/min_free_gb": [2.0, 5.0, 1.0],
        "actor/lr": 0.1,
        "actor/kl": [None, 4.0],
        "only_none": [None],
        "empty": [],
        "critic/vf_loss": Metric("sum", [0.25, 0.5]),
    }
    out = reduce_metrics(metrics)
    assert out is metrics  # in place, as verl does
    assert out["actor/pg_loss"] == 2.0 and out["perf/max_memory_gb"] == 5.0 and out["perf/min_free_gb"] == 1.0
    assert out["actor/lr"] == 0.1 and out["actor/kl"] == 4.0 and out["critic/vf_loss"] == 0.75
    assert "only_none" not in out and math.isnan(out["empty"])


def test_append_to_dict_keeps_each_metrics_aggregation():
    acc: dict = {}
    for step in range(3):
        append_to_dict(acc, {"loss": Metric("sum", float(step)), "lr": 0.1, "kl": [step, step]}, prefix="actor/")
    assert isinstance(acc["actor/loss"], Metric) and acc["actor/loss"].aggregation is AggregationType.SUM
    assert acc["actor/lr"] == [0.1, 0.1, 0.1] and acc["actor/kl"] == [0, 0, 1, 1, 2, 2]
    assert reduce_metrics(acc)["actor/loss"] == 3.0
