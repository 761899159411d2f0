"""Buckets from an FSDP2-sharded model on a 2-process gloo group equal the unsharded weights, on every rank."""

from __future__ import annotations

import os

import pytest
import torch
import torch.multiprocessing as mp


def _worker(rank: int, world_size: int, model_dir: str, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    from verl.checkpoint_engine import iter_weight_buckets

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        mesh = init_device_mesh("cpu", (world_size,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        sharded = type(model.model.layers[0].mlp.up_proj.weight).__name__
        buckets = list(iter_weight_buckets(model, 8192))
        # Groups are unsharded one at a time and resharded at the end: training goes on from sharded parameters.
        resharded = all(type(p).__name__ == "DTensor" for p in model.parameters())
        ids = torch.arange(1, 9).unsqueeze(0)
        model(input_ids=ids, labels=ids).loss.backward()
        stepped = all(p.grad is not None for p in model.parameters())
        torch.save(
            {"sharded": sharded, "buckets": buckets, "resharded": resharded, "stepped": stepped},
            os.path.join(out_dir, f"rank{rank}.pt"),
        )
    finally:
        dist.destroy_process_group()


def test_fsdp2_sharded_model_streams_full_tensors(tiny_model_dir, tiny_lm, tmp_path):
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        pytest.skip("this torch has no FSDP2 (fully_shard)")
    mp.spawn(_worker, args=(2, str(tiny_model_dir), str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    expected = list(iter_weight_buckets_reference(tiny_lm))
    for rank in range(2):
        result = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        assert result["sharded"] == "DTensor"  # the test really ran on shards
        assert result["resharded"] and result["stepped"], rank
        got = result["buckets"]
        assert [[n for n, _ in b] for b in got] == [[n for n, _ in b] for b in expected]
        for bucket_got, bucket_ref in zip(got, expected):
            for (name, tensor), (_, ref) in zip(bucket_got, bucket_ref):
                assert type(tensor) is torch.Tensor and torch.equal(tensor, ref), (rank, name)


def iter_weight_buckets_reference(model):
    from verl.checkpoint_engine import iter_weight_buckets

    return iter_weight_buckets(model, 8192)
