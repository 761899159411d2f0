"""Samples cross the MessageQueue actor by reference: serialized once by the producer, never unpickled by the queue."""

from __future__ import annotations

import asyncio
import os

import pytest
import ray
import torch

from verl.experimental.fully_async_policy.message_queue import (
    CoalescingQueueWriter,
    MessageQueue,
    SampleRef,
    by_reference,
    by_reference_many,
    resolve_refs,
)
from verl.protocol import DataProto

pytestmark = pytest.mark.ray


class OnlyInDriver:
    """Payload that refuses to be unpickled outside the process that made it."""

    def __init__(self, value: int) -> None:
        self.pid, self.value = os.getpid(), value

    def __setstate__(self, state: dict) -> None:
        if state["pid"] != os.getpid():
            raise RuntimeError(f"payload unpickled in process {os.getpid()}")
        self.__dict__.update(state)


def test_queue_moves_references_not_payloads(ray_cluster):
    queue = ray.remote(MessageQueue).options(num_cpus=0).remote(4)
    batch = DataProto.from_dict({"x": torch.arange(6).reshape(2, 3)})
    ray.get(queue.put.remote(by_reference(OnlyInDriver(7), 0), 5.0))
    ray.get(queue.put.remote(by_reference(batch, 1), 5.0))
    items = ray.get(queue.get.remote(2, 5.0))
    assert all(isinstance(item, SampleRef) for item in items) and [i.index for i in items] == [0, 1]
    payload, got = resolve_refs(items, timeout_s=30)
    assert payload.value == 7
    assert torch.equal(got.batch["x"], batch.batch["x"])
    stats = ray.get(queue.get_statistics.remote())
    assert (stats["queue/total_put"], stats["queue/total_get"], stats["queue/size"]) == (2, 2, 0)


def test_samples_put_together_share_one_entry_and_resolve_each_to_its_own(ray_cluster):
    batches = [DataProto.from_dict({"x": torch.full((1, 3), i)}) for i in range(3)]
    refs = by_reference_many(batches, [10, 11, 12])
    assert len({ref.ref for ref in refs}) == 1 and [ref.position for ref in refs] == [0, 1, 2]
    mixed = [refs[2], "plain", by_reference(OnlyInDriver(5), 13), refs[0]]
    got = resolve_refs(mixed, timeout_s=30)
    assert got[1] == "plain" and got[2].value == 5
    assert torch.equal(got[0].batch["x"], batches[2].batch["x"])
    assert torch.equal(got[3].batch["x"], batches[0].batch["x"])
    with pytest.raises(ValueError, match="3 samples but 2 indices"):
        by_reference_many(batches, [1, 2])


def test_writer_sends_the_puts_of_one_turn_in_one_call_and_fails_each_caller_on_a_closed_queue(ray_cluster):
    queue = ray.remote(MessageQueue).options(num_cpus=0, max_concurrency=16).remote(16)
    writer = CoalescingQueueWriter(queue, timeout_s=5.0)

    async def put_all(values: list[int]) -> list:
        return await asyncio.gather(
            *(writer.put(OnlyInDriver(v), f"group {v}", index=v) for v in values), return_exceptions=True
        )

    assert asyncio.run(put_all([0, 1, 2, 3])) == [None] * 4
    assert list(writer.call_sizes) == [4], "four puts of one turn travel in one put_many call"
    items = ray.get(queue.get.remote(4, 5.0))
    assert [item.index for item in items] == [0, 1, 2, 3] and len({item.ref for item in items}) == 1
    assert [payload.value for payload in resolve_refs(items, timeout_s=30)] == [0, 1, 2, 3]

    ray.get(queue.close.remote("trainer stopped"))
    errors = asyncio.run(put_all([4, 5]))
    assert len(errors) == 2 and all(isinstance(e, Exception) and "trainer stopped" in str(e) for e in errors)
