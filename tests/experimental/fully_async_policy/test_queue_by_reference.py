"""Samples cross the MessageQueue actor by reference: serialized once by the producer, never unpickled by the queue."""

from __future__ import annotations

import os

import pytest
import ray
import torch

from verl.experimental.fully_async_policy.message_queue import MessageQueue, SampleRef, by_reference, resolve_refs
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
