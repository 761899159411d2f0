"""The staleness budget: its arithmetic, its errors, and a simulation showing the documented bound holds."""

from __future__ import annotations

import random

import pytest

from verl.experimental.fully_async_policy.staleness import StalenessBudget


def test_budget_arithmetic():
    budget = StalenessBudget(groups_per_update=16, trigger_parameter_sync_step=2, staleness_threshold=0.5)
    assert budget.groups_per_sync == 32
    assert budget.max_stale_groups == 16
    assert budget.max_open_groups == 48
    assert StalenessBudget(8, 1, 0.0).max_open_groups == 8
    assert StalenessBudget(3, 1, 0.5).max_stale_groups == 1  # floor(1.5)


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"groups_per_update": 0, "trigger_parameter_sync_step": 1, "staleness_threshold": 0.0}, "require_batches"),
        (
            {"groups_per_update": 4, "trigger_parameter_sync_step": 0, "staleness_threshold": 0.0},
            "trigger_parameter_sync_step",
        ),
        (
            {"groups_per_update": 4, "trigger_parameter_sync_step": 1, "staleness_threshold": -1.0},
            "staleness_threshold",
        ),
    ],
)
def test_bad_budget_names_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        StalenessBudget(**kwargs)


def _simulate(budget: StalenessBudget, seed: int, periods: int = 30) -> list[int]:
    """Rollouter and trainer as in the recipe: groups start while the open count is under budget and finish after
    a long-tailed random time, in any order; the trainer takes groups in completion order, `groups_per_sync` per
    period, then syncs (leftovers are re-counted). Returns the stale groups consumed per period."""
    rng = random.Random(seed)
    version, open_groups = 0, 0
    in_flight: list[tuple[float, int]] = []  # (finish time, start version)
    queue: list[int] = []
    now, stale_per_period = 0.0, []
    for _ in range(periods):
        consumed, stale = 0, 0
        while consumed < budget.groups_per_sync:
            while open_groups < budget.max_open_groups:
                open_groups += 1
                in_flight.append((now + rng.paretovariate(1.2), version))
            in_flight.sort()
            finish, start_version = in_flight.pop(0)
            now = max(now, finish)
            queue.append(start_version)
            while queue and consumed < budget.groups_per_sync:
                started = queue.pop(0)
                consumed += 1
                stale += started < version
        version += 1
        open_groups = len(queue) + len(in_flight)
        stale_per_period.append(stale)
    return stale_per_period


@pytest.mark.parametrize("threshold", [0.0, 0.25, 0.5, 1.0, 2.0])
def test_simulated_stale_groups_never_exceed_the_bound(threshold):
    budget = StalenessBudget(groups_per_update=8, trigger_parameter_sync_step=2, staleness_threshold=threshold)
    worst = max(max(_simulate(budget, seed)) for seed in range(20))
    assert worst <= budget.max_stale_groups
    if threshold > 0:
        assert worst > 0, "the simulation never produced a stale group: it does not exercise the bound"
