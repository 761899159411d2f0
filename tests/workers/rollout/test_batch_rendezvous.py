"""BatchRendezvous: the calls of one trainer batch reach the engine as one batch; nothing waits forever."""

from __future__ import annotations

import asyncio

import pytest

from verl.workers.rollout.batch_rendezvous import BatchGroup, BatchRendezvous


class Engine:
    """Records every batch it serves; answers each request with its own value times ten."""

    def __init__(self, fail: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.fail = fail

    async def serve(self, requests: list[int]) -> list[int]:
        self.batches.append(list(requests))
        await asyncio.sleep(0.001)
        if self.fail:
            raise ValueError("engine step failed")
        return [r * 10 for r in requests]


def test_calls_of_one_group_are_served_as_one_batch():
    async def scenario():
        rendezvous, engine = BatchRendezvous(window_s=5.0), Engine()
        group = BatchGroup("step-1", calls=2)
        first = asyncio.ensure_future(rendezvous.serve(group, [1, 2, 3], engine.serve))
        await asyncio.sleep(0.01)  # the second worker's call arrives a little later
        second = await rendezvous.serve(group, [4, 5], engine.serve)
        return await first, second, engine.batches, list(rendezvous.merged_calls)

    first, second, batches, merged = asyncio.run(scenario())
    assert batches == [[1, 2, 3, 4, 5]] and merged == [2]
    assert first == [10, 20, 30] and second == [40, 50]


def test_a_missing_call_costs_the_window_and_late_calls_go_alone():
    async def scenario():
        rendezvous, engine = BatchRendezvous(window_s=0.05), Engine()
        group = BatchGroup("step-2", calls=3)
        first = asyncio.ensure_future(rendezvous.serve(group, [1], engine.serve))
        second = asyncio.ensure_future(rendezvous.serve(group, [2], engine.serve))
        results = await asyncio.gather(first, second)
        late = await asyncio.wait_for(rendezvous.serve(group, [3], engine.serve), timeout=1.0)  # e.g. a second turn
        alone = await rendezvous.serve(None, [4], engine.serve)
        return results, late, alone, engine.batches

    (first, second), late, alone, batches = asyncio.run(scenario())
    assert batches == [[1, 2], [3], [4]]
    assert (first, second, late, alone) == ([10], [20], [30], [40])


def test_an_engine_failure_reaches_every_call_of_the_group():
    async def scenario():
        rendezvous = BatchRendezvous(window_s=5.0)
        engine = Engine(fail=True)
        group = BatchGroup("step-3", calls=2)
        calls = [asyncio.ensure_future(rendezvous.serve(group, [i], engine.serve)) for i in (1, 2)]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(scenario())
    assert all(isinstance(r, ValueError) and "engine step failed" in str(r) for r in results)


def test_a_cancelled_first_call_does_not_strand_the_others():
    async def scenario():
        rendezvous, engine = BatchRendezvous(window_s=5.0), Engine()
        group = BatchGroup("step-4", calls=3)
        first = asyncio.ensure_future(rendezvous.serve(group, [1], engine.serve))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(rendezvous.serve(group, [2], engine.serve))
        await asyncio.sleep(0.01)
        first.cancel()
        return await asyncio.wait_for(asyncio.gather(second, return_exceptions=True), timeout=1.0)

    (second,) = asyncio.run(scenario())
    assert isinstance(second, RuntimeError | asyncio.CancelledError)


@pytest.mark.parametrize("calls", [0, 1])
def test_groups_of_one_call_do_not_wait(calls):
    async def scenario():
        rendezvous, engine = BatchRendezvous(window_s=5.0), Engine()
        return await asyncio.wait_for(rendezvous.serve(BatchGroup("g", calls), [7], engine.serve), timeout=1.0)

    assert asyncio.run(scenario()) == [70]
