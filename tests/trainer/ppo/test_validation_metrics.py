"""Validation metrics: bootstrap statistics, majority vote, per-source aggregation, logged key names."""

from __future__ import annotations

import numpy as np
import pytest

from verl.trainer.ppo.metric_utils import (
    bootstrap_metric,
    calc_maj_val,
    flatten_validation_metrics,
    process_validation_metrics,
)


def test_bootstrap_is_seeded_and_leaves_the_global_rng_alone():
    np.random.seed(7)
    expected_next = np.random.rand()
    np.random.seed(7)
    first = bootstrap_metric([0.0, 1.0], subset_size=2, reduce_fns=[np.max, np.min], n_bootstrap=4000, seed=3)
    assert np.random.rand() == expected_next
    assert first == bootstrap_metric([0.0, 1.0], 2, [np.max, np.min], n_bootstrap=4000, seed=3)
    (best, _), (worst, _) = first
    assert best == pytest.approx(0.75, abs=0.03) and worst == pytest.approx(0.25, abs=0.03)  # 1 - 1/4, 1/4
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_metric([], 1, [np.mean])


def test_majority_vote_returns_the_first_value_of_the_winner():
    votes = [{"p": "x", "v": 0.0}, {"p": "y", "v": 1.0}, {"p": "y", "v": 0.5}]
    assert calc_maj_val(votes, vote_key="p", val_key="v") == 1.0


def test_process_validation_metrics_per_source():
    result = process_validation_metrics(
        data_sources=["gsm", "gsm", "gsm", "gsm", "math"],
        sample_uids=["u1", "u1", "u2", "u2", "u3"],
        infos_dict={"reward": [1.0, 0.0, 1.0, 1.0, 0.5], "pred": ["a", "b", "a", "a", None]},
    )
    gsm = result["gsm"]["reward"]
    assert gsm["mean@2"] == pytest.approx(0.75) and gsm["std@2"] == pytest.approx(0.25)
    assert {"best@2/mean", "worst@2/std", "maj@2/mean"} <= set(gsm)
    assert "pred" not in result["gsm"]  # strings only vote
    assert result["math"] == {"reward": {"mean@1": 0.5}}


def test_missing_sessions_count_as_failures():
    result = process_validation_metrics(
        ["s", "s"], ["u", "u"], {"acc": [1.0, 0.0]}, expected_acc_counts={("s", "u"): 4, ("s", "v"): 2}
    )
    assert result["s"]["acc"]["mean@4"] == 0.25  # u: 1 success of 4 expected sessions
    assert result["s"]["acc"]["mean@2"] == 0.0  # v: no session came back, both count as failures
    assert result["s"]["acc_success_only"]["mean@2"] == 0.5


def test_flattened_keys_and_the_older_call_form():
    flat = flatten_validation_metrics(
        {"gsm": {"reward": {"mean@4": 0.5, "best@2/mean": 0.6, "best@4/mean": 0.7, "std@4": 0.1}}}
    )
    assert flat == {
        "val-core/gsm/reward/mean@4": 0.5,
        "val-aux/gsm/reward/best@2/mean": 0.6,
        "val-core/gsm/reward/best@4/mean": 0.7,
        "val-aux/gsm/reward/std@4": 0.1,
    }
    legacy = process_validation_metrics(["d", "d"], ["u", "u"], [1.0, 0.0])
    assert legacy == {
        "val-core/d/reward/mean@2": 0.5,
        "val-aux/d/reward/best@2": 1.0,
        "val-aux/d/reward/worst@2": 0.0,
        "val-aux/d/reward/pass@2": 1.0,
    }
