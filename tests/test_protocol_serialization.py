"""DataProto pickling: exact round trips, tensors out of band under protocol 5 (Ray's path), copies counted."""

import copy
import pickle
import warnings

import numpy as np
import pytest
import torch

from verl import DataProto
from verl.protocol import DataProtoFuture
from verl.utils.tensor_serialization import decode_tensor, encode_tensor

BIG_ROWS, BIG_COLS = 1024, 2048  # 8 MiB of float32


def buffer_address(buf: pickle.PickleBuffer) -> int:
    return np.frombuffer(buf.raw(), dtype=np.uint8).ctypes.data


def dumps_oob(obj) -> tuple[bytes, list[pickle.PickleBuffer]]:
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return payload, buffers


def mixed_dp(n: int = 4) -> DataProto:
    gen = torch.Generator().manual_seed(0)
    return DataProto.from_dict(
        tensors={
            "f32": torch.randn(n, 5, generator=gen),
            "bf16": torch.randn(n, 3, generator=gen).to(torch.bfloat16),
            "f16": torch.randn(n, 3, generator=gen).half(),
            "i64": torch.randint(-(2**40), 2**40, (n, 6), generator=gen),
            "u8": torch.randint(0, 255, (n,), generator=gen, dtype=torch.uint8),
            "mask": torch.rand(n, 7, generator=gen) > 0.5,
            "f8": torch.randn(n, 2, generator=gen).to(torch.float8_e4m3fn),
        },
        non_tensors={
            "uid": [f"u{i}" for i in range(n)],
            "reward_model": [{"ground_truth": [i, "x"]} for i in range(n)],
            "scores": np.arange(n, dtype=np.float64),
        },
        meta_info={"temperature": 0.7, "metrics": {"a": [1.0]}, "tensor_meta": torch.arange(3)},
    )


def assert_exact(a: DataProto, b: DataProto) -> None:
    assert len(a) == len(b) and sorted(a.batch.keys()) == sorted(b.batch.keys())
    for key in a.batch.keys():
        x, y = a.batch[key], b.batch[key]
        assert x.dtype == y.dtype and x.shape == y.shape, key
        assert torch.equal(x.view(torch.uint8), y.view(torch.uint8)), key  # bitwise, works for float8 too
    assert list(a.non_tensor_batch) == list(b.non_tensor_batch)
    for key, value in a.non_tensor_batch.items():
        assert value.dtype == b.non_tensor_batch[key].dtype, key
        assert value.tolist() == b.non_tensor_batch[key].tolist(), key
    assert a.meta_info.keys() == b.meta_info.keys()
    assert torch.equal(a.meta_info["tensor_meta"], b.meta_info["tensor_meta"])
    assert a.meta_info["metrics"] == b.meta_info["metrics"]


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_in_band_round_trip_is_exact(protocol):
    dp = mixed_dp()
    assert_exact(pickle.loads(pickle.dumps(dp, protocol=protocol)), dp)


def test_out_of_band_round_trip_is_exact_for_every_dtype():
    dp = mixed_dp()
    payload, buffers = dumps_oob(dp)
    assert len(buffers) == len(dp.batch.keys()) + 1  # one per tensor + the float64 non-tensor array
    assert_exact(pickle.loads(payload, buffers=buffers), dp)


def test_large_tensor_goes_out_of_band_without_a_sender_copy():
    big = torch.randn(BIG_ROWS, BIG_COLS)
    dp = DataProto.from_dict({"big": big, "ids": torch.arange(BIG_ROWS)}, {"uid": [str(i) for i in range(BIG_ROWS)]})
    payload, buffers = dumps_oob(dp)
    sizes = sorted(buf.raw().nbytes for buf in buffers)
    assert sizes == sorted([big.numel() * 4, BIG_ROWS * 8])
    assert len(payload) < 64 * 1024  # uid strings in-band, tensor bytes not: 8 MiB would be obvious
    big_buffer = next(buf for buf in buffers if buf.raw().nbytes == big.numel() * 4)
    assert buffer_address(big_buffer) == big.data_ptr()  # the buffer IS the tensor's memory: zero copies to send


def test_writable_buffers_are_wrapped_read_only_buffers_copied_once():
    big = torch.randn(BIG_ROWS, BIG_COLS)
    dp = DataProto.from_dict({"big": big})
    payload, buffers = dumps_oob(dp)
    # Writable buffers (e.g. a receiver that owns the bytes): no copy at all.
    shared = pickle.loads(payload, buffers=buffers)
    assert shared.batch["big"].data_ptr() == big.data_ptr()
    # Read-only buffers, as Ray's object store hands out: exactly one private copy, writable, no numpy warning.
    store = [bytes(buf.raw()) for buf in buffers]
    views = [memoryview(b) for b in store]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        received = pickle.loads(payload, buffers=views)
    tensor = received.batch["big"]
    addresses = {np.frombuffer(v, dtype=np.uint8).ctypes.data for v in views}
    assert tensor.data_ptr() not in addresses and tensor.data_ptr() != big.data_ptr()
    assert torch.equal(tensor, big)
    tensor[0, 0] = 123.0  # writable, and writing does not touch the "store"
    assert np.frombuffer(store[0], dtype=np.float32)[0] == big[0, 0].item()


def test_read_only_numeric_non_tensor_arrays_become_writable():
    dp = DataProto.from_dict(non_tensors={"scores": np.arange(4, dtype=np.float32)})
    payload, buffers = dumps_oob(dp)
    received = pickle.loads(payload, buffers=[memoryview(bytes(b.raw())) for b in buffers])
    received.non_tensor_batch["scores"][0] = 9.0
    assert received.non_tensor_batch["scores"].tolist() == [9.0, 1.0, 2.0, 3.0]


def test_chunk_pickles_only_its_own_rows():
    big = torch.randn(BIG_ROWS, BIG_COLS)
    chunk = DataProto.from_dict({"big": big}).chunk(4)[1]
    payload, buffers = dumps_oob(chunk)
    assert sum(buf.raw().nbytes for buf in buffers) == big.numel() * 4 // 4
    assert buffer_address(buffers[0]) == chunk.batch["big"].data_ptr()
    assert torch.equal(pickle.loads(payload, buffers=buffers).batch["big"], big[BIG_ROWS // 4 : BIG_ROWS // 2])


def test_awkward_tensors_round_trip():
    base = torch.arange(24, dtype=torch.float32).view(4, 6)
    grad = torch.ones(4, 2, requires_grad=True)
    dp = DataProto.from_dict(
        {"transposed": base.t().contiguous().t(), "strided": base[:, ::2], "grad": grad, "empty": torch.zeros(4, 0)}
    )
    assert not dp.batch["strided"].is_contiguous()
    out = pickle.loads(*dumps_oob(dp)[:1], buffers=dumps_oob(dp)[1])
    assert torch.equal(out.batch["strided"], base[:, ::2])
    assert torch.equal(out.batch["transposed"], base)
    assert not out.batch["grad"].requires_grad and torch.equal(out.batch["grad"], torch.ones(4, 2))
    assert out.batch["empty"].shape == (4, 0)
    empty = DataProto.from_dict({"x": torch.zeros(0, 3)}, {"uid": []})
    assert len(pickle.loads(pickle.dumps(empty, protocol=5))) == 0


def test_nested_batch_keys_and_batchless_dataprotos_round_trip():
    dp = mixed_dp(2)
    dp.batch.set(("nested", "x"), torch.ones(2, 2))
    out = pickle.loads(pickle.dumps(dp, protocol=5))
    assert torch.equal(out.batch["nested", "x"], torch.ones(2, 2))
    objs = DataProto.from_dict(non_tensors={"uid": ["a", "b"]}, meta_info={"k": 1})
    back = pickle.loads(pickle.dumps(objs, protocol=5))
    assert back.batch is None and back.non_tensor_batch["uid"].tolist() == ["a", "b"] and back.meta_info == {"k": 1}


def test_deepcopy_is_independent():
    dp = mixed_dp(2)
    clone = copy.deepcopy(dp)
    clone.batch["f32"][0, 0] = 42.0
    clone.non_tensor_batch["reward_model"][0]["ground_truth"] = None
    assert dp.batch["f32"][0, 0] != 42.0
    assert dp.non_tensor_batch["reward_model"][0]["ground_truth"] == [0, "x"]


def test_bad_states_are_rejected():
    dp = DataProto.from_dict({"x": torch.zeros(2)})
    state = dp.__getstate__()
    state["version"] = 99
    with pytest.raises(ValueError, match="unsupported DataProto pickle version 99; expected 1"):
        DataProto.__new__(DataProto).__setstate__(state)
    _, _, shape, array = encode_tensor(torch.zeros(2))
    with pytest.raises(ValueError, match="unknown torch dtype 'nonsense'"):
        decode_tensor(("raw", "nonsense", shape, array))
    with pytest.raises(ValueError, match="unknown encoded tensor kind 'zip'"):
        decode_tensor(("zip", None))
    sparse = torch.eye(3).to_sparse()
    assert encode_tensor(sparse)[0] == "obj"
    assert torch.equal(decode_tensor(encode_tensor(sparse)).to_dense(), torch.eye(3))


@pytest.mark.ray
def test_ray_object_store_round_trip_and_future(ray_cluster):
    ray = ray_cluster
    big = torch.randn(BIG_ROWS, BIG_COLS).to(torch.bfloat16)
    dp = DataProto.from_dict({"big": big, "ids": torch.arange(BIG_ROWS)}, {"uid": list(range(BIG_ROWS))}, {"t": 1.0})
    got = ray.get(ray.put(dp))
    assert torch.equal(got.batch["big"], big) and got.non_tensor_batch["uid"].tolist() == list(range(BIG_ROWS))
    got.batch["big"][0, 0] = 1.0  # writable after leaving the object store
    refs = [ray.put(part) for part in dp.chunk(2)]
    future = DataProtoFuture.concat(refs)
    assert torch.equal(future.get(timeout=60).batch["ids"], torch.arange(BIG_ROWS))
    assert future.chunk(4)[3].get(timeout=60).batch["ids"].tolist() == list(range(768, BIG_ROWS))
    with pytest.raises(TypeError, match="ref 0 resolved to a int, not a DataProto"):
        DataProtoFuture.concat([ray.put(1)]).get(timeout=60)
    never = ray.remote(num_cpus=0)(lambda: __import__("time").sleep(60)).remote()
    with pytest.raises(TimeoutError, match="DataProtoFuture timed out after 0.2s waiting on 1 object refs"):
        DataProtoFuture.concat([never]).get(timeout=0.2)
    ray.cancel(never, force=True)


# -------------------------------------------------------------------- upstream verl's tuple format


def test_tuple_format_round_trips_every_dtype_and_accepts_plain_bytes():
    from verl.protocol import (
        deserialize_single_tensor,
        deserialize_tensordict,
        serialize_single_tensor,
        serialize_tensordict,
    )

    batch = mixed_dp().batch
    size, device, items = serialize_tensordict(batch)
    assert size == (4,) and device is None and items["bf16"][0] == "bfloat16"
    back = deserialize_tensordict((size, device, items))
    for key in batch.keys():
        assert torch.equal(back[key].view(torch.uint8), batch[key].view(torch.uint8)), key
    dtype, shape, data = serialize_single_tensor(torch.arange(6).view(2, 3).T)  # non-contiguous input
    from_bytes = deserialize_single_tensor((dtype, shape, bytes(data)))
    assert torch.equal(from_bytes, torch.arange(6).view(2, 3).T)
    from_bytes += 1  # a read-only buffer was copied, so the result is writable


def test_tuple_format_handles_nested_tensors_and_reports_bad_entries():
    from verl.protocol import deserialize_tensordict, serialize_tensordict
    from verl.utils.tensordict_utils import get_tensordict

    ids = torch.nested.as_nested_tensor([torch.arange(2), torch.arange(5)], layout=torch.jagged)
    size, device, items = serialize_tensordict(get_tensordict({"ids": ids}).to("cpu"))
    assert device == "cpu" and items["ids"][0] == "jagged" and len(items["ids"][1]) == 2
    back = deserialize_tensordict((size, device, items))
    assert back.device == torch.device("cpu") and back["ids"].layout == torch.jagged
    assert [row.tolist() for row in back["ids"].unbind(0)] == [[0, 1], [0, 1, 2, 3, 4]]
    with pytest.raises(ValueError, match="serialized entry 'x' must be a .* got 4 fields"):
        deserialize_tensordict(((1,), None, {"x": (1, 2, 3, 4)}))
    with pytest.raises(ValueError, match="serialized nested tensor 'x' names unknown layout 'zigzag'"):
        deserialize_tensordict(((1,), None, {"x": ("zigzag", [])}))
