"""The in-flight bound of a generate call: the limiter itself, the workers' shares and validation's default."""

from __future__ import annotations

import asyncio

import pytest
from omegaconf import OmegaConf

from verl.experimental.agent_loop.concurrency import InFlightLimiter, share_of, validation_max_in_flight


def _run_all(limiter: InFlightLimiter, count: int) -> list[int]:
    async def one(i: int) -> int:
        await asyncio.sleep(0.001 * (i % 3))
        return i

    async def main() -> list[int]:
        return list(await asyncio.gather(*(limiter.run(lambda i=i: one(i)) for i in range(count))))

    return asyncio.run(main())


def test_limiter_holds_the_bound_and_keeps_every_result_in_order():
    bounded = InFlightLimiter(4)
    assert _run_all(bounded, 50) == list(range(50))
    assert bounded.peak == 4 and bounded.in_flight == 0
    unbounded = InFlightLimiter(None)
    assert _run_all(unbounded, 50) == list(range(50))
    assert unbounded.peak == 50


def test_limiter_refuses_a_bound_below_one():
    with pytest.raises(ValueError, match="must be >= 1"):
        InFlightLimiter(0)


def test_worker_shares_never_sum_past_the_bound_when_it_covers_every_worker():
    assert share_of(None, 4) is None
    assert share_of(10, 4) == 2 and share_of(8, 4) == 2 and share_of(3, 4) == 1


def test_validation_bound_defaults_to_one_training_step_of_samples():
    config = OmegaConf.create({"data": {"train_batch_size": 16}, "rollout": {"n": 4, "val_kwargs": {}}})
    assert validation_max_in_flight(config) == 64
    config.rollout.val_kwargs.max_in_flight = 5
    assert validation_max_in_flight(config) == 5
    config.rollout.val_kwargs.max_in_flight = 0
    with pytest.raises(ValueError, match="rollout.val_kwargs.max_in_flight"):
        validation_max_in_flight(config)
