"""Registry errors, the checksum contract and the naive (same-process) backend with an in-process server."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch
from _ckpt_helpers import LocalTrainer, perturb, reference_greedy, rollout_config

from verl.checkpoint_engine import (
    CheckpointEngineManager,
    WeightSyncBackend,
    WeightSyncError,
    combine_bucket_checksums,
    get_checkpoint_engine_cls,
    iter_weight_buckets,
    register_checkpoint_engine,
)
from verl.checkpoint_engine.naive import NaiveCheckpointEngine
from verl.utils.weight_checksum import weight_checksum
from verl.workers.rollout import build_server

PROMPTS = [[3, 4, 5], [7, 8], [10, 11, 12, 13]]


def test_unknown_backend_lists_the_known_ones():
    expected = r"backend='nccl2' is not a known checkpoint engine; known: collective, naive, ray"
    with pytest.raises(ValueError, match=expected):
        get_checkpoint_engine_cls("nccl2")
    assert get_checkpoint_engine_cls("naive") is NaiveCheckpointEngine


def test_registering_a_non_engine_or_a_taken_name_fails():
    with pytest.raises(TypeError, match="is not a WeightSyncBackend subclass"):
        register_checkpoint_engine("bogus")(int)

    class Other(WeightSyncBackend):
        def sync(self, call_trainer, replicas, version):
            raise NotImplementedError

        @classmethod
        def send(cls, module, request, rank, local_replicas, loop):
            raise NotImplementedError

    with pytest.raises(ValueError, match="'ray' is already registered to RayCheckpointEngine"):
        register_checkpoint_engine("ray")(Other)


def test_combined_checksum_depends_on_every_bucket_and_their_order():
    assert combine_bucket_checksums(["a", "b"]) == combine_bucket_checksums(["a", "b"])
    assert combine_bucket_checksums(["a", "b"]) != combine_bucket_checksums(["b", "a"])
    assert combine_bucket_checksums(["a", "b"]) != combine_bucket_checksums(["a", "c"])


def _expected_checksum(state, bucket_bytes):
    return combine_bucket_checksums(weight_checksum(b) for b in iter_weight_buckets(state.items(), bucket_bytes))


def _generate(replica, prompts, max_tokens=8):
    async def run():
        params = {"temperature": 0.0, "ignore_eos": True, "max_tokens": max_tokens}
        outs = await asyncio.gather(*(replica.generate(p, params, f"r{i}") for i, p in enumerate(prompts)))
        return [o.token_ids for o in outs], await replica.get_version()

    return asyncio.run(run())


def test_naive_backend_loads_the_trainer_weights_into_the_local_engine(tiny_lm):
    replica = build_server(rollout_config(), model=copy.deepcopy(tiny_lm))
    trainer_model = copy.deepcopy(tiny_lm)
    perturb(trainer_model, seed=1)
    before, _ = _generate(replica, PROMPTS)

    manager = CheckpointEngineManager("naive", LocalTrainer(trainer_model, [replica]), bucket_megabytes=0.01)
    result = manager.update_weights(4)

    expected = _expected_checksum(trainer_model.state_dict(), manager.engine.bucket_bytes)
    assert result["version"] == 4 and result["checksum"] == expected
    assert result["replicas"] == {"rank0/local0": {"version": 4, "checksum": expected}}
    assert result["metrics"]["checkpoint_engine/num_buckets"] > 1  # really streamed in several buckets
    assert result["metrics"]["timing_s/update_weights"] > 0
    after, version = _generate(replica, PROMPTS)
    reference = [reference_greedy(trainer_model, p, 8) for p in PROMPTS]
    assert version == 4 and after == reference and before != reference


def test_naive_reports_a_local_engine_that_loads_other_bytes(tiny_lm):
    replica = build_server(rollout_config(dtype="bfloat16"), model=copy.deepcopy(tiny_lm).to(torch.bfloat16))
    manager = CheckpointEngineManager("naive", LocalTrainer(copy.deepcopy(tiny_lm), [replica]), bucket_megabytes=1)
    with pytest.raises(WeightSyncError, match=r"version 2: replica 'rank0/local0' checksum \w+ differs") as info:
        manager.update_weights(2)
    assert list(info.value.failures) == ["rank0/local0"]
    # telling the engine the rollout dtype makes the same update succeed
    manager = CheckpointEngineManager(
        "naive", LocalTrainer(copy.deepcopy(tiny_lm), [replica]), bucket_megabytes=1, dtype="bfloat16"
    )
    assert manager.update_weights(3)["replicas"]["rank0/local0"]["version"] == 3


def test_naive_needs_a_local_engine_and_no_standalone_replicas(tiny_lm):
    manager = CheckpointEngineManager("naive", LocalTrainer(tiny_lm, None), bucket_megabytes=1)
    with pytest.raises(ValueError, match="trainer rank 0 hosts no rollout engine"):
        manager.update_weights(1)
    manager = CheckpointEngineManager("naive", LocalTrainer(tiny_lm, None), replicas={"far": object()})
    with pytest.raises(ValueError, match=r"cannot reach the separate replicas \['far'\]"):
        manager.update_weights(1)


def test_manager_rejects_bad_arguments(tiny_lm):
    with pytest.raises(ValueError, match="update_weights_bucket_megabytes must be > 0"):
        CheckpointEngineManager("naive", LocalTrainer(tiny_lm), bucket_megabytes=0)
    with pytest.raises(ValueError, match="not a known checkpoint engine"):
        CheckpointEngineManager("carrier-pigeon", LocalTrainer(tiny_lm))
    manager = CheckpointEngineManager("naive", LocalTrainer(tiny_lm))
    with pytest.raises(ValueError, match="version must be an int, got '3'"):
        manager.update_weights("3")
    with pytest.raises(ValueError, match="dtype='bf17' is not a torch dtype"):
        CheckpointEngineManager("naive", LocalTrainer(tiny_lm), dtype="bf17")
    with pytest.raises(TypeError, match="trainer object has no send_weights"):
        CheckpointEngineManager("naive", object()).update_weights(1)


def test_manager_reads_the_rollout_config(tiny_lm):
    from verl.workers.config import CheckpointEngineConfig, RolloutConfig

    config = RolloutConfig(checkpoint_engine=CheckpointEngineConfig(backend="ray", bucket_megabytes=8, timeout_s=30.0))
    manager = CheckpointEngineManager.from_config(config, LocalTrainer(tiny_lm), replicas=[object()])
    assert manager.backend == "ray" and manager.engine.bucket_bytes == 8 << 20 and manager.engine.timeout_s == 30.0
    assert list(manager.replicas) == ["replica0"]
    with pytest.raises(TypeError, match=r"replica 'replica0' \(object\) is not a Ray actor"):
        manager.update_weights(1)
