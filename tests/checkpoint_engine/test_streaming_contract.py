"""verl's streaming checkpoint-engine contract: registry, the colocated (naive) engine, byte chunking, the
receiving CheckpointEngineWorker over one of our rollout servers, the engine worker's update_weights, and the
manager built the verl way. No Ray."""

import asyncio
from types import SimpleNamespace

import pytest
import torch

from verl.checkpoint_engine import (
    BucketPacker,
    CheckpointEngine,
    CheckpointEngineManager,
    CheckpointEngineRegistry,
    CheckpointEngineWorker,
    ColocatedCheckpointEngine,
)
from verl.checkpoint_engine.streaming import merge_weight_chunks, split_weight_chunks
from verl.checkpoint_engine.worker import RolloutServerWeightAdapter
from verl.workers.config import CheckpointEngineConfig
from verl.workers.engine_workers import ActorRolloutRefWorker


def _weights():
    return [
        ("a", torch.arange(6, dtype=torch.float32).reshape(2, 3)),
        ("b", torch.ones(40, dtype=torch.int64)),
        ("c", torch.zeros(0)),
    ]


def test_registry_knows_naive_and_lists_what_it_has():
    assert CheckpointEngineRegistry.get("naive") is ColocatedCheckpointEngine
    with pytest.raises(ValueError, match=r"'nixl' is not registered; registered: \[.*'naive'"):
        CheckpointEngineRegistry.get("nixl")
    with pytest.raises(TypeError, match="is not a CheckpointEngine"):
        CheckpointEngineRegistry.register("bogus")(dict)


def test_colocated_engine_replays_the_stream_once():
    engine = CheckpointEngineRegistry.new("naive", bucket_size=1 << 20, is_master=True)
    assert engine.prepare() == {} and engine.build_topology(1, 1, [{}]) == ({}, {})
    engine.send_weights(iter(_weights()), global_steps=3)
    assert [name for name, _ in engine.receive_weights(global_steps=3)] == ["a", "b", "c"]
    with pytest.raises(RuntimeError, match="before send_weights"):
        list(engine.receive_weights())


def test_chunks_split_and_merge_back_to_the_same_tensors():
    async def round_trip(bucket_size):
        chunks = [item async for item in split_weight_chunks(_weights(), bucket_size)]
        assert all(chunk.numel() <= bucket_size for _, chunk in chunks)
        return [item async for item in merge_weight_chunks(chunks, bucket_size)], chunks

    merged, chunks = asyncio.run(round_trip(64))
    assert [meta.name for meta, _ in chunks].count("b") == 5  # 320 bytes in 64-byte chunks
    for (name, tensor), (want_name, want) in zip(merged, _weights()):
        assert name == want_name and torch.equal(tensor, want)


class _Server:
    def __init__(self):
        self.loads = []

    async def update_weights(self, bucket, version):
        self.loads.append(([name for name, _ in bucket], version))
        return {"version": version}


def test_checkpoint_engine_worker_loads_the_stream_into_a_server_in_buckets():
    server = _Server()
    worker = CheckpointEngineWorker.__new__(CheckpointEngineWorker)
    worker.checkpoint_engine = ColocatedCheckpointEngine(bucket_size=100)
    worker.server_adapter = RolloutServerWeightAdapter(server, bucket_bytes=100)
    worker.checkpoint_engine.send_weights(_weights())
    reports = asyncio.run(CheckpointEngineWorker.update_weights.__wrapped__(worker, global_steps=4))
    assert server.loads == [(["a"], 4), (["b"], 4), (["c"], 4)]  # 24 bytes; 320 travels alone
    assert reports == [{"version": 4}] * 3


def test_bucket_packer_holds_fusion_groups_together():
    packer = BucketPacker(100, fusion_groups=((".q", ".kv"),))
    out = packer.add("x", torch.zeros(20, dtype=torch.uint8))
    out += packer.add("l0.q", torch.zeros(50, dtype=torch.uint8))  # waits for its partner
    out += packer.add("l0.kv", torch.zeros(50, dtype=torch.uint8))
    out += packer.finish()
    assert [[name for name, _ in bucket] for bucket in out] == [["x"], ["l0.q", "l0.kv"]]
    packer.add("l1.q", torch.zeros(1))
    with pytest.raises(ValueError, match="never completed"):
        packer.finish()


class _RecordingEngine(CheckpointEngine):
    def __init__(self):
        self.sent = None

    def prepare(self):
        return {}

    @classmethod
    def build_topology(cls, actor_wg_world_size, rollout_world_size, metadata):
        return {}, {}

    def init_process_group(self, **kwargs):
        pass

    def finalize(self):
        pass

    async def send_weights(self, weights, global_steps=None):
        self.sent = ([name for name, _ in weights], global_steps)
        return {"sent": 1.0}

    def receive_weights(self, global_steps=None):
        return iter(())


def test_engine_worker_sends_the_fsdp_module_weights_through_its_engine():
    worker = ActorRolloutRefWorker.__new__(ActorRolloutRefWorker)
    worker.config = SimpleNamespace(rollout=SimpleNamespace(checkpoint_engine=SimpleNamespace(backend="custom")))
    worker.actor = object()  # our actor has no verl training engine: weights come from the FSDP module
    worker.actor_module_fsdp = torch.nn.Linear(2, 1)
    worker.checkpoint_engine = _RecordingEngine()
    metrics = asyncio.run(ActorRolloutRefWorker.update_weights.__wrapped__(worker, global_steps=9))
    assert metrics == {"sent": 1.0} and worker.checkpoint_engine.sent == (["weight", "bias"], 9)
    worker.checkpoint_engine = None
    with pytest.raises(RuntimeError, match="no streaming checkpoint engine named 'custom'"):
        asyncio.run(ActorRolloutRefWorker.update_weights.__wrapped__(worker, global_steps=9))


class _Trainer:
    def send_weights(self, request):
        return None


def test_manager_accepts_verls_constructor_and_replica_helpers():
    config = CheckpointEngineConfig(backend="ray", bucket_megabytes=2, timeout_s=30.0)
    first, second = object(), object()
    manager = CheckpointEngineManager(config, _Trainer(), [first])
    assert manager.backend == "ray" and manager.actor_wg is manager.trainer
    assert manager.engine.bucket_bytes == 2 << 20 and manager.engine.timeout_s == 30.0
    manager.add_replicas([second])
    assert list(manager.replicas) == ["replica0", "replica1"]
    manager.remove_replicas([first])
    assert list(manager.replicas.values()) == [second]
    keyword = CheckpointEngineManager(config=config, actor_wg=_Trainer())
    assert keyword.replicas == {} and keyword.backend == "ray"
