"""The checksum trainer and rollout both compute over named tensors."""

from __future__ import annotations

import pytest
import torch

from verl.utils.weight_checksum import weight_checksum


def _weights():
    gen = torch.Generator().manual_seed(0)
    return {"a.weight": torch.randn(3, 4, generator=gen), "b.bias": torch.randn(4, generator=gen)}


def test_order_and_container_independent():
    w = _weights()
    assert weight_checksum(w) == weight_checksum(list(reversed(list(w.items()))))
    assert weight_checksum(w) == weight_checksum({k: v.t().contiguous().t() for k, v in w.items()})


def test_any_change_changes_the_digest():
    w = _weights()
    base = weight_checksum(w)
    changed = {k: v.clone() for k, v in w.items()}
    changed["b.bias"][2] += 1e-6
    assert weight_checksum(changed) != base
    assert weight_checksum({"A.weight" if k == "a.weight" else k: v for k, v in w.items()}) != base
    assert weight_checksum({k: v.reshape(-1) for k, v in w.items()}) != base


def test_dtype_canonicalisation_matches_the_converting_side():
    w = _weights()
    as_bf16 = {k: v.to(torch.bfloat16) for k, v in w.items()}
    assert weight_checksum(w, dtype=torch.bfloat16) == weight_checksum(as_bf16)
    assert weight_checksum(w) != weight_checksum(as_bf16)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="'x' appears twice"):
        weight_checksum([("x", torch.zeros(1)), ("x", torch.zeros(1))])
    with pytest.raises(ValueError, match="value for 'y' is list"):
        weight_checksum([("y", [1.0])])


def test_chunked_parallel_hash_equals_serial_and_sees_every_chunk(monkeypatch):
    import verl.utils.weight_checksum as checksum_module

    monkeypatch.setattr(checksum_module, "CHUNK_BYTES", 256)  # a 4 KiB tensor spans 16 chunks
    gen = torch.Generator().manual_seed(1)
    w = {"big.weight": torch.randn(32, 32, generator=gen), "small.bias": torch.randn(3, generator=gen)}
    monkeypatch.setattr(checksum_module, "_PARALLEL_MIN_BYTES", 0)
    parallel = weight_checksum(w)
    monkeypatch.setattr(checksum_module, "_PARALLEL_MIN_BYTES", 1 << 60)
    assert weight_checksum(w) == parallel
    for flat_index in (0, 63, 64, 1023):  # first chunk, chunk edges, last chunk
        changed = {k: v.clone() for k, v in w.items()}
        changed["big.weight"].view(-1)[flat_index] += 1.0
        assert weight_checksum(changed) != parallel, flat_index
