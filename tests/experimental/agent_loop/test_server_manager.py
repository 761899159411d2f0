"""AsyncLLMServerManager over two real in-process hf replicas: least-loaded and sticky routing, LRU bound,
timeouts, retry when a replica's process died."""

from __future__ import annotations

import asyncio

import pytest
from _agent_loop_helpers import make_config

from verl.experimental.agent_loop import AsyncLLMServerManager
from verl.experimental.agent_loop.server_manager import AllReplicasDeadError, ReplicaDiedError

LONG = {"temperature": 0.0, "ignore_eos": True, "max_tokens": 480}
SHORT = {"temperature": 0.0, "ignore_eos": True, "max_tokens": 2}


@pytest.fixture
def two_replicas(tiny_model_dir, make_replica):
    config = make_config(tiny_model_dir, prompt_length=8, response_length=490, max_model_len=500)
    return [make_replica(config["rollout"]), make_replica(config["rollout"])]


def test_least_loaded_sends_new_requests_to_the_idle_replica(two_replicas):
    manager = AsyncLLMServerManager(two_replicas)

    async def run():
        long = asyncio.ensure_future(manager.generate("long", prompt_ids=[1, 2], sampling_params=LONG))
        await asyncio.sleep(0)  # let "long" be routed first
        await manager.generate("short", prompt_ids=[1, 3], sampling_params=SHORT)
        assert manager.stats().routed == [1, 1]  # first to replica 0, second to the idle replica 1
        # replica 0 still works on "long": round robin would now pick it, least-loaded keeps using replica 1
        await manager.generate("c", prompt_ids=[1, 4], sampling_params=SHORT)
        await manager.generate("d", prompt_ids=[1, 5], sampling_params=SHORT)
        assert not long.done(), "the long request finished too early for this test to observe routing"
        stats = manager.stats()
        await long
        return stats

    stats = asyncio.run(run())
    assert stats.routed == [1, 3] and stats.in_flight == [1, 0] and stats.sticky_hits == 0


def test_sticky_sessions_return_to_their_replica_even_when_busier(two_replicas):
    manager = AsyncLLMServerManager(two_replicas)

    async def run():
        first = {}
        for i in range(5):  # first turns, one at a time: replicas 0, 1, 0, 1, 0 (fewest served wins ties)
            first[i] = await manager.generate(f"s{i}", prompt_ids=[1, 2 + i], sampling_params=SHORT)
        assert manager.stats().routed == [3, 2]
        # second turns of s2 and s4 stick to replica 0 and keep it busy
        busy = [
            asyncio.ensure_future(
                manager.generate(f"s{i}", prompt_ids=[1, 2 + i, *first[i].token_ids], sampling_params=LONG)
            )
            for i in (2, 4)
        ]
        await asyncio.sleep(0)
        assert manager.stats().in_flight == [2, 0]
        # s0's second turn goes back to replica 0 although replica 1 is idle
        second = await manager.generate("s0", prompt_ids=[1, 2, *first[0].token_ids], sampling_params=SHORT)
        after_sticky = manager.stats()
        await manager.generate("fresh", prompt_ids=[1, 9], sampling_params=SHORT)  # least loaded: replica 1
        after_fresh = manager.stats()
        assert not all(task.done() for task in busy), "the busy requests finished too early for this test"
        await asyncio.gather(*busy)
        return after_sticky, after_fresh, second

    after_sticky, after_fresh, second = asyncio.run(run())
    assert after_sticky.routed == [6, 2] and after_sticky.sticky_hits == 3
    assert after_fresh.routed == [6, 3] and after_fresh.sticky_hits == 3
    assert len(second.token_ids) == 2


def test_session_map_is_a_bounded_lru(two_replicas):
    manager = AsyncLLMServerManager(two_replicas, max_sessions=2)

    async def run():
        for rid in ("a", "b", "c"):
            await manager.generate(rid, prompt_ids=[1, 2], sampling_params=SHORT)
        await manager.generate("b", prompt_ids=[1, 2], sampling_params=SHORT)

    asyncio.run(run())
    stats = manager.stats()
    assert stats.sessions == 2 and stats.sticky_hits == 1
    assert list(manager._sessions) == ["c", "b"]  # "a" was evicted, "b" is the most recent


class _DeadReplica:
    """A handle whose process is gone: every call fails the way a killed Ray actor does."""

    def __init__(self):
        self.calls = 0

    async def generate(self, prompt_ids, sampling_params, request_id):
        self.calls += 1
        raise ReplicaDiedError("replica process exited")


class _HungReplica:
    async def generate(self, prompt_ids, sampling_params, request_id):
        await asyncio.sleep(30)


def test_dead_replica_is_dropped_and_requests_retried(two_replicas):
    dead = _DeadReplica()
    manager = AsyncLLMServerManager([dead, two_replicas[0]])

    async def run():
        return await asyncio.gather(
            *(manager.generate(f"r{i}", prompt_ids=[1, 2], sampling_params=SHORT) for i in range(4))
        )

    outputs = asyncio.run(run())
    stats = manager.stats()
    assert [len(o.token_ids) for o in outputs] == [2, 2, 2, 2]
    assert stats.dead == [0] and stats.retries >= 1 and dead.calls == stats.retries
    assert stats.routed[1] == 4


def test_all_replicas_dead_and_timeouts_raise_with_names():
    manager = AsyncLLMServerManager([_DeadReplica()])
    with pytest.raises(AllReplicasDeadError, match=r"request r: every rollout replica has died \(1 of 1\): replica 0"):
        asyncio.run(manager.generate("r", prompt_ids=[1], sampling_params={}))
    with pytest.raises(AllReplicasDeadError, match="every rollout replica has died"):  # later requests too
        asyncio.run(manager.generate("r2", prompt_ids=[1], sampling_params={}))
    slow = AsyncLLMServerManager([_HungReplica()], request_timeout_s=0.05)
    with pytest.raises(TimeoutError, match="request slow: rollout replica 0 gave no answer within 0.05s"):
        asyncio.run(slow.generate("slow", prompt_ids=[1], sampling_params={}))
    with pytest.raises(ValueError, match="needs at least one rollout replica"):
        AsyncLLMServerManager([])
