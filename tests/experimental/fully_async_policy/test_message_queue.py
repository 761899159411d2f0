"""MessageQueue: FIFO with timeouts, backpressure, close-with-reason and exact counts (no Ray needed)."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from verl.experimental.fully_async_policy.message_queue import (
    END_OF_STREAM,
    HELD_BATCHES,
    MessageQueue,
    QueueClosedError,
)


def run(coro):
    return asyncio.run(coro)


def test_fifo_and_statistics():
    async def scenario():
        queue = MessageQueue(4)
        for i in range(3):
            await queue.put(i)
        got = await queue.get(2, timeout_s=1)
        stats = await queue.get_statistics()
        return got, stats

    got, stats = run(scenario())
    assert got == [0, 1]
    assert stats["queue/total_put"] == 3 and stats["queue/total_get"] == 2 and stats["queue/size"] == 1


def test_get_timeout_gives_samples_back_and_names_the_wait():
    async def scenario():
        queue = MessageQueue(4)
        await queue.put("a")
        with pytest.raises(TimeoutError, match="1 of 3 sample\\(s\\) arrived within 0.05s"):
            await queue.get(3, timeout_s=0.05)
        return await queue.get(1, timeout_s=0.05), await queue.get_statistics()

    got, stats = run(scenario())
    assert got == ["a"], "a timed-out get must not lose what it had taken"
    assert stats["queue/total_get"] == 1 and stats["queue/total_put"] == 1


def test_put_backpressure_times_out_with_the_queue_size():
    async def scenario():
        queue = MessageQueue(1)
        await queue.put(1)
        await queue.put(2, timeout_s=0.05)

    with pytest.raises(TimeoutError, match="no room within 0.05s \\(size 1 of 1\\)"):
        run(scenario())


def test_put_many_fills_as_room_appears_and_keeps_order():
    """One call for many items: more than fit wait for the consumer, in order; a timeout says how many got in."""

    async def scenario():
        queue = MessageQueue(2)
        producer = asyncio.ensure_future(queue.put_many([1, 2, 3, 4], timeout_s=5))
        got = await queue.get(2, timeout_s=1)
        got += await queue.get(2, timeout_s=1)
        size = await producer
        stuck = MessageQueue(2)
        with pytest.raises(TimeoutError, match="\\(size 2 of 2\\); 2 of 3 item\\(s\\) of this call queued"):
            await stuck.put_many(["a", "b", "c"], timeout_s=0.05)
        return got, size, await queue.get_statistics(), await stuck.get(2, timeout_s=0.05)

    got, size, stats, kept = run(scenario())
    assert got == [1, 2, 3, 4] and size <= 2
    assert stats["queue/total_put"] == 4 and stats["queue/total_get"] == 4
    assert kept == ["a", "b"], "items queued before the timeout stay queued"


def test_close_wakes_waiters_with_the_reason():
    async def scenario():
        queue = MessageQueue(2)
        waiter = asyncio.ensure_future(queue.get(1, timeout_s=5))
        await asyncio.sleep(0.01)
        await queue.close("rollouter failed: ValueError: boom")
        return await waiter

    with pytest.raises(QueueClosedError, match="rollouter failed: ValueError: boom"):
        run(scenario())


def test_end_of_stream_stops_a_get_early_and_stays():
    async def scenario():
        queue = MessageQueue(4)
        await queue.put("x")
        await queue.put(END_OF_STREAM)
        first = await queue.get(3, timeout_s=1)
        second = await queue.get(1, timeout_s=1)
        return first, second, await queue.get_statistics()

    first, second, stats = run(scenario())
    assert first == ["x", END_OF_STREAM] and second == [END_OF_STREAM]
    assert stats["queue/total_put"] == 1 and stats["queue/total_get"] == 1 and stats["queue/size"] == 0


def test_bad_sizes_are_refused_by_name():
    with pytest.raises(ValueError, match="max_queue_size must be >= 1"):
        MessageQueue(0)
    with pytest.raises(ValueError, match="count must be >= 1"):
        run(MessageQueue(1).get(0))


class Payload:
    """A queued item that can be watched with a weak reference."""


def test_handed_out_items_stay_referenced_for_the_next_gets():
    """What a consumer took stays referenced by the queue until HELD_BATCHES later gets, so an object-store entry a
    sample nests survives until the consumer has fetched it, whatever the consumer did with its copy."""
    assert HELD_BATCHES == 2

    async def scenario():
        queue = MessageQueue(8)
        items = [Payload() for _ in range(4)]
        watches = [weakref.ref(item) for item in items]
        await queue.put_many(items)
        del items
        alive = []
        for _ in range(4):
            await queue.get(1, timeout_s=1)  # the consumer drops what it got at once
            gc.collect()
            alive.append([watch() is not None for watch in watches])
        return alive

    alive = run(scenario())
    assert alive[0] == [True, True, True, True]
    assert alive[1] == [True, True, True, True]
    assert alive[2] == [False, True, True, True], "a batch is released after two later gets"
    assert alive[3] == [False, False, True, True]
