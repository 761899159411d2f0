"""``ray`` and ``collective`` backends: a trainer actor pushes perturbed weights to standalone replica actors."""

from __future__ import annotations

import asyncio

import pytest
import torch
from _ckpt_helpers import TrainerActor, reference_greedy, rollout_config

from verl.checkpoint_engine import (
    CheckpointEngineManager,
    WeightSyncError,
    combine_bucket_checksums,
    iter_weight_buckets,
)
from verl.utils.weight_checksum import weight_checksum
from verl.workers.rollout import StandaloneReplica

pytestmark = pytest.mark.ray

PROMPTS = [[3, 4, 5], [7, 8], [10, 11, 12, 13]]
BUCKET_MB = 0.01  # ~10 KB: the tiny model travels in a dozen buckets


@pytest.fixture(scope="module")
def actors(ray_cluster, tiny_model_dir, tmp_path_factory):
    """The trainer, two healthy replicas, one of a wider model ('odd') and one serving bfloat16 ('half')."""
    import ray

    from verl.utils.tiny_model import build_tiny_model

    wide_dir = str(build_tiny_model(tmp_path_factory.mktemp("wide"), hidden_size=96))
    trainer = ray.remote(TrainerActor).options(num_cpus=0).remote(str(tiny_model_dir))
    specs = {
        "alpha": (rollout_config(), tiny_model_dir),
        "beta": (rollout_config(), tiny_model_dir),
        "odd": (rollout_config(), wide_dir),
        "half": (rollout_config(dtype="bfloat16"), tiny_model_dir),
    }
    replicas = {
        name: StandaloneReplica(config, str(path), num_cpus=0, server_kwargs={"device": "cpu"}, call_timeout_s=120)
        for name, (config, path) in specs.items()
    }
    # wait out the actors' start-up (imports, model load) here, so the timed update calls measure updates only
    ray.get([trainer.state.remote()] + [r.actor.get_version.remote() for r in replicas.values()], timeout=300)
    yield trainer, replicas
    for replica in replicas.values():
        replica.kill()
    ray.kill(trainer)


def _generate_all(replicas, max_tokens=8):
    async def run():
        params = {"temperature": 0.0, "ignore_eos": True, "max_tokens": max_tokens}
        found = {}
        for name, replica in replicas.items():
            outs = await asyncio.gather(*(replica.generate(p, params, f"{name}{i}") for i, p in enumerate(PROMPTS)))
            found[name] = ([o.token_ids for o in outs], await replica.get_version())
        return found

    return asyncio.run(run())


@pytest.mark.parametrize(("backend", "seed", "version"), [("ray", 11, 1), ("collective", 12, 2)])
def test_update_reaches_every_replica_with_the_trainer_checksum(actors, tiny_lm, backend, seed, version):
    import ray

    trainer, all_replicas = actors
    replicas = {name: all_replicas[name] for name in ("alpha", "beta")}
    ray.get(trainer.perturb.remote(seed))
    state = ray.get(trainer.state.remote())
    manager = CheckpointEngineManager(backend, trainer, replicas, bucket_megabytes=BUCKET_MB, timeout_s=60)

    result = manager.update_weights(version)

    # the trainer's checksum is the one a third party computes over the same weights and buckets
    expected = combine_bucket_checksums(
        weight_checksum(b) for b in iter_weight_buckets(state.items(), manager.engine.bucket_bytes)
    )
    assert result["checksum"] == expected
    assert result["replicas"] == {name: {"version": version, "checksum": expected} for name in replicas}
    assert result["metrics"]["checkpoint_engine/num_buckets"] > 5
    reference_model = _load(tiny_lm, state)
    reference = [reference_greedy(reference_model, p, 8) for p in PROMPTS]
    for name, (outputs, replica_version) in _generate_all(replicas).items():
        assert replica_version == version, name
        assert outputs == reference, name


def _load(tiny_lm, state):
    import copy

    model = copy.deepcopy(tiny_lm)
    model.load_state_dict(state)
    return model.eval()


@pytest.mark.parametrize(("backend", "version"), [("ray", 7), ("collective", 8)])
def test_a_replica_of_another_model_is_named(actors, backend, version):
    trainer, replicas = actors
    manager = CheckpointEngineManager(
        backend, trainer, {name: replicas[name] for name in ("alpha", "odd")}, bucket_megabytes=BUCKET_MB, timeout_s=60
    )
    expected = r"(?s)replica 'odd' failed: ValueError: update_weights: .*has shape"
    with pytest.raises(WeightSyncError, match=expected) as info:
        manager.update_weights(version)
    assert list(info.value.failures) == ["odd"]


def test_dtype_mismatch_and_a_dead_replica_are_named(actors):
    import ray

    trainer, replicas = actors
    pair = {name: replicas[name] for name in ("beta", "half")}
    manager = CheckpointEngineManager("ray", trainer, pair, bucket_megabytes=BUCKET_MB, timeout_s=60)
    with pytest.raises(WeightSyncError, match=r"replica 'half' checksum \w+ differs from the trainer's") as other:
        manager.update_weights(9)
    assert other.value.lost_replicas == []  # other bytes: a restart would not help
    replicas["half"].kill()
    with pytest.raises(WeightSyncError, match=r"(?s)replica 'half' failed: .*Actor") as info:
        manager.update_weights(10)
    assert list(info.value.failures) == ["half"]
    # a dead replica: a restart may help, once the cluster has marked its actor dead
    assert info.value.lost_replicas == ["half"]
    assert info.value.lost_actor_ids == [replicas["half"].actor._actor_id.hex()]
    assert ray.get(replicas["beta"].actor.get_version.remote()) == 10  # the healthy replica was still updated
    collective = CheckpointEngineManager("collective", trainer, pair, bucket_megabytes=BUCKET_MB, timeout_s=10)
    with pytest.raises(RuntimeError, match=r"cannot start receiving on replica 'half'"):
        collective.update_weights(11)


def test_scratch_buffer_reuses_its_memory_and_grows_to_the_largest_bucket():
    from verl.checkpoint_engine.collective import ScratchBuffer

    scratch = ScratchBuffer("cpu")
    first = scratch.take(1024)
    assert first.numel() == 1024 and first.dtype == torch.uint8
    smaller = scratch.take(100)
    assert smaller.numel() == 100 and smaller.data_ptr() == first.data_ptr()  # no new memory per bucket
    larger = scratch.take(4096)
    assert larger.numel() == 4096
    assert scratch.take(2048).data_ptr() == larger.data_ptr()


def _live_groups(replicas):
    import ray

    def names(actor_self):
        return sorted(actor_self.__dict__.get("_verl_checkpoint_engine_groups", {}))

    return {name: ray.get(r.actor.__ray_call__.remote(names), timeout=60) for name, r in replicas.items()}


def test_collective_keeps_its_group_across_healthy_versions_and_rebuilds_it_after_a_failure(actors):
    import ray

    trainer, all_replicas = actors
    healthy = {name: all_replicas[name] for name in ("alpha", "beta")}
    manager = CheckpointEngineManager("collective", trainer, healthy, bucket_megabytes=BUCKET_MB, timeout_s=60)
    manager.update_weights(20)
    first = _live_groups(healthy)
    assert len(first["alpha"]) == 1 and first["alpha"] == first["beta"]
    ray.get(trainer.perturb.remote(21))
    result = manager.update_weights(21)  # the same group carries the next version, and it still checks out
    assert result["replicas"] == {name: {"version": 21, "checksum": result["checksum"]} for name in healthy}
    assert _live_groups(healthy) == first

    mixed = {name: all_replicas[name] for name in ("alpha", "odd")}
    failing = CheckpointEngineManager("collective", trainer, mixed, bucket_megabytes=BUCKET_MB, timeout_s=60)
    groups = []
    for version in (22, 23):
        with pytest.raises(WeightSyncError, match="replica 'odd' failed"):
            failing.update_weights(version)
        groups.append(_live_groups(mixed)["alpha"])
    assert groups[0] != groups[1] and groups[0] != first["alpha"]  # a failed version's group is never reused


def test_a_group_that_is_not_live_in_this_process_is_named():
    from verl.checkpoint_engine.collective import joined_group

    with pytest.raises(RuntimeError, match=r"broadcast group 'verl_ckpt/x' is not live in this process"):
        joined_group({}, {"group": "verl_ckpt/x", "fresh": False}, 1)


def test_a_local_handoff_passes_the_tensors_themselves_once_and_only_within_its_process():
    import pickle

    from verl.checkpoint_engine.collective import LocalHandoff

    bucket = [("w", torch.randn(256, 256)), ("b", torch.arange(4))]
    handoff = LocalHandoff(bucket)
    payload = pickle.dumps(handoff)
    assert len(payload) < 512  # a key, not 256 KiB of weights
    received = pickle.loads(payload)
    assert [name for name, _ in received] == ["w", "b"]
    assert all(got is sent for (_, got), (_, sent) in zip(received, bucket, strict=True))  # no copy at all
    with pytest.raises(RuntimeError, match="already taken"):
        pickle.loads(payload)
    take, (key, pid) = LocalHandoff(bucket).__reduce__()
    with pytest.raises(RuntimeError, match=f"made by process {pid + 1} was unpickled in process {pid}"):
        take(key, pid + 1)  # as if another process had made it
    assert take(key, pid)[0][1] is bucket[0][1]
