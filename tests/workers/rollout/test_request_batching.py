"""RequestCoalescer: requests made in one turn of the event loop share one send; each caller gets its own answer."""

from __future__ import annotations

import asyncio

import pytest

from verl.workers.rollout.batch_rendezvous import BatchRendezvous
from verl.workers.rollout.batch_wire import pack_batch, unpack_batch
from verl.workers.rollout.request_batching import RequestCoalescer, gather_each, serve_request_batch


class Engine:
    """Answers a request with its prompt reversed; refuses empty prompts; records every batch it was sent."""

    def __init__(self) -> None:
        self.sends: list[list[str]] = []

    async def generate(self, prompt_ids, sampling_params, request_id):
        await asyncio.sleep(0)
        if not prompt_ids:
            raise ValueError(f"request {request_id}: empty prompt")
        return prompt_ids[::-1]

    async def send(self, requests):
        self.sends.append([rid for _, _, rid in requests])
        packed = await serve_request_batch(pack_batch(requests), None, BatchRendezvous(), gather_each(self.generate))
        return unpack_batch(packed)


def test_one_send_per_turn_and_each_caller_gets_its_own_result():
    engine, coalescer = Engine(), RequestCoalescer()

    async def run():
        first = await asyncio.gather(
            *(coalescer.submit(([i, i + 1], {}, f"a{i}"), engine.send) for i in range(3)),
            coalescer.submit(([], {}, "bad"), engine.send),
            return_exceptions=True,
        )
        later = await coalescer.submit(([7], {}, "b0"), engine.send)
        return first, later

    first, later = asyncio.run(run())
    assert engine.sends == [["a0", "a1", "a2", "bad"], ["b0"]]
    assert first[:3] == [[1, 0], [2, 1], [3, 2]] and later == [7]
    assert isinstance(first[3], ValueError) and "request bad: empty prompt" in str(first[3])
    assert list(coalescer.batch_sizes) == [4, 1]


def test_a_failed_send_fails_every_request_of_that_call_only():
    coalescer, calls = RequestCoalescer(), []

    async def send(requests):
        calls.append(len(requests))
        if len(calls) == 1:
            raise ConnectionError("replica 0 died")
        return [ids for ids, _, _ in requests]

    async def run():
        failed = await asyncio.gather(
            *(coalescer.submit(([i], {}, f"r{i}"), send) for i in range(2)), return_exceptions=True
        )
        return failed, await coalescer.submit(([9], {}, "next"), send)

    failed, next_result = asyncio.run(run())
    assert [type(f) for f in failed] == [ConnectionError, ConnectionError] and next_result == [9]


def test_a_caller_that_gives_up_does_not_disturb_the_others():
    coalescer = RequestCoalescer()

    async def slow_send(requests):
        await asyncio.sleep(0.05)
        return [rid for _, _, rid in requests]

    async def run():
        impatient = asyncio.ensure_future(asyncio.wait_for(coalescer.submit(([1], {}, "x"), slow_send), 0.01))
        patient = asyncio.ensure_future(coalescer.submit(([2], {}, "y"), slow_send))
        with pytest.raises(TimeoutError):
            await impatient
        return await patient

    assert asyncio.run(run()) == "y"


def test_requests_from_two_event_loops_never_share_a_send():
    import threading

    coalescer, seen = RequestCoalescer(), []

    async def send(requests):
        seen.append(sorted(rid for _, _, rid in requests))
        await asyncio.sleep(0.02)
        return [rid for _, _, rid in requests]

    both_queued = threading.Barrier(2, timeout=10)

    async def burst(tag):
        first = asyncio.ensure_future(coalescer.submit(([0], {}, f"{tag}0"), send))
        await asyncio.sleep(0)  # the first request is queued and its send scheduled, not yet run
        both_queued.wait()  # the other loop has queued its first request too
        return await asyncio.wait_for(asyncio.gather(first, coalescer.submit(([1], {}, f"{tag}1"), send)), 5)

    results = {}
    thread = threading.Thread(target=lambda: results.setdefault("t", asyncio.run(burst("t"))), daemon=True)
    thread.start()
    results["m"] = asyncio.run(burst("m"))
    thread.join(10)
    assert results == {"t": ["t0", "t1"], "m": ["m0", "m1"]}
    assert sorted(seen) == [["m0", "m1"], ["t0", "t1"]]
