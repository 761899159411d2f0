"""The bucket iterator: plain HF names, exact bytes, bounded buckets, LoRA merged, sharded params gathered."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from verl.checkpoint_engine import bucket_nbytes, iter_named_weights, iter_weight_buckets, normalize_weight_name
from verl.checkpoint_engine.buckets import megabytes_to_bytes


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


@pytest.mark.parametrize("limit", [4096, 20_000, 10**9])
def test_buckets_round_trip_the_state_dict_within_the_limit(tiny_lm, limit):
    state = tiny_lm.state_dict()
    buckets = list(iter_weight_buckets(tiny_lm, limit))
    flat = [pair for bucket in buckets for pair in bucket]
    assert [name for name, _ in flat] == list(state)
    for name, tensor in flat:
        assert tensor.device.type == "cpu" and torch.equal(tensor, state[name]), name
    for bucket in buckets:
        assert bucket_nbytes(bucket) <= limit or len(bucket) == 1
    # greedy packing: a bucket is closed only when the next tensor would not fit
    for bucket, following in zip(buckets, buckets[1:]):
        assert bucket_nbytes(bucket) + _nbytes(following[0][1]) > limit
    if limit == 10**9:
        assert len(buckets) == 1


def test_an_oversized_tensor_travels_alone():
    pairs = [("a", torch.zeros(10)), ("big", torch.zeros(1000)), ("b", torch.zeros(10)), ("c", torch.zeros(10))]
    buckets = list(iter_weight_buckets(pairs, bucket_bytes=100))
    assert [[n for n, _ in b] for b in buckets] == [["a"], ["big"], ["b", "c"]]


def test_dtype_cast_happens_before_counting():
    pairs = [(f"w{i}", torch.ones(8, dtype=torch.float32)) for i in range(4)]
    buckets = list(iter_weight_buckets(pairs, bucket_bytes=32, dtype=torch.bfloat16))
    assert [len(b) for b in buckets] == [2, 2]
    assert all(t.dtype == torch.bfloat16 for b in buckets for _, t in b)


@pytest.mark.parametrize("bad", [0, -5, 1.5, True])
def test_bad_bucket_size_is_refused(bad):
    with pytest.raises(ValueError, match="bucket_bytes must be a positive int"):
        list(iter_weight_buckets([("a", torch.zeros(1))], bad))


def test_bucket_megabytes_must_be_positive():
    assert megabytes_to_bytes(2) == 2 * 1024 * 1024
    with pytest.raises(ValueError, match="update_weights_bucket_megabytes must be > 0, got 0"):
        megabytes_to_bytes(0)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.weight"),
        ("_orig_mod.model.norm.weight", "model.norm.weight"),
        ("module.model.norm.weight", "model.norm.weight"),
        (
            "model._fsdp_wrapped_module.layers.0._checkpoint_wrapped_module.mlp.up_proj.weight",
            "model.layers.0.mlp.up_proj.weight",
        ),
        (
            "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight",
            "model.layers.0.self_attn.q_proj.weight",
        ),
        ("base_model.model.lm_head.modules_to_save.default.weight", "lm_head.weight"),
        ("model.submodule.norm.weight", "model.submodule.norm.weight"),
    ],
)
def test_wrapper_prefixes_are_stripped(raw, expected):
    assert normalize_weight_name(raw) == expected


def test_names_colliding_after_normalisation_are_named():
    class Twin(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 2)
            self._orig_mod = nn.Module()
            self._orig_mod.layer = nn.Linear(2, 2)

    with pytest.raises(ValueError, match=r"'layer.weight' and '_orig_mod.layer.weight' both map to 'layer.weight'"):
        list(iter_named_weights(Twin()))


def test_tied_weights_are_sent_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(5, 3)
            self.head = nn.Linear(3, 5, bias=False)
            self.head.weight = self.embed.weight

    assert [n for n, _ in iter_named_weights(Tied())] == ["embed.weight"]


def test_lora_adapters_are_merged_into_base_weights(tiny_lm):
    peft = pytest.importorskip("peft")
    lora = peft.get_peft_model(
        copy.deepcopy(tiny_lm),
        peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    sent = dict(pair for bucket in iter_weight_buckets(lora, 8192) for pair in bucket)
    merged = copy.deepcopy(lora).merge_and_unload().state_dict()
    assert list(sent) == list(merged) == list(tiny_lm.state_dict())
    for name, tensor in merged.items():
        torch.testing.assert_close(sent[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    q_name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(sent[q_name], tiny_lm.state_dict()[q_name])  # the adapter really moved it


def test_device_none_keeps_tensors_where_they_were_gathered():
    pairs = [("w", torch.empty(4, device="meta"))]
    assert next(iter(iter_weight_buckets(pairs, 64, device=None)))[0][1].device.type == "meta"
    assert next(iter(iter_weight_buckets([("w", torch.ones(4))], 64)))[0][1].device.type == "cpu"


def test_out_of_band_bucket_ships_tensor_bytes_outside_the_pickle_and_unpickles_as_a_list():
    import pickle
    import warnings

    from verl.checkpoint_engine.buckets import OutOfBandBucket

    bucket = [
        ("a.weight", torch.randn(64, 64)),
        ("b.bias", torch.randn(64).to(torch.bfloat16)),
        ("c.weight", torch.randn(8, 16).t()),
    ]  # bfloat16 and a non-contiguous view
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(OutOfBandBucket(bucket), protocol=5, buffer_callback=buffers.append)
    assert len(payload) < 4096  # names, dtypes and shapes only: the 16 KiB of weights went out of band
    assert sum(memoryview(b).nbytes for b in buffers) == sum(t.numel() * t.element_size() for _, t in bucket)
    # Ray's store hands out read-only buffers: the receiver reads the weights in place, without a private copy.
    readonly = [memoryview(b).toreadonly() for b in buffers]
    addresses = [np.frombuffer(view, dtype=np.uint8).ctypes.data for view in readonly]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy/torch warning about the read-only memory
        loaded = pickle.loads(payload, buffers=readonly)
    assert isinstance(loaded, list) and [name for name, _ in loaded] == [name for name, _ in bucket]
    for (_, sent), (_, got), address in zip(bucket, loaded, addresses, strict=True):
        assert got.dtype == sent.dtype and got.shape == sent.shape and torch.equal(got, sent)
        assert got.data_ptr() == address
