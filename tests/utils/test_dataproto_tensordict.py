"""DataProto <-> plain TensorDict conversion."""

import pytest
import torch
from tensordict import TensorDict

from verl.protocol import DataProto
from verl.utils import tensordict_utils as tu


def test_round_trip_keeps_tensors_row_objects_and_meta():
    data = DataProto.from_dict(
        tensors={"ids": torch.arange(6).view(3, 2)},
        non_tensors={"scores": [[], [0.5], [0.1, 0.2]], "info": [{"a": 1}, {"a": 2}, {"a": 3}]},
        meta_info={"step": 7, "cfg": {"t": 0.5}},
    )
    td = data.to_tensordict()
    assert td.batch_size == torch.Size([3])
    assert tu.get(td, "scores") == [[], [0.5], [0.1, 0.2]] and tu.get(td, "cfg") == {"t": 0.5}
    back = DataProto.from_tensordict(td, meta_info={"extra": True})
    assert torch.equal(back.batch["ids"], data.batch["ids"])
    assert back.non_tensor_batch["info"].tolist() == [{"a": 1}, {"a": 2}, {"a": 3}]
    assert back.non_tensor_batch["scores"].shape == (3,)
    assert back.meta_info == {"extra": True, "step": 7, "cfg": {"t": 0.5}}


def test_row_objects_may_hold_tensors_and_meta_only_batches_convert():
    data = DataProto.from_dict(tensors={"x": torch.zeros(2)}, non_tensors={"mm": [{"pix": torch.ones(2)}, None]})
    back = DataProto.from_tensordict(data.to_tensordict())
    assert torch.equal(back.non_tensor_batch["mm"][0]["pix"], torch.ones(2)) and back.non_tensor_batch["mm"][1] is None
    meta_only = DataProto.from_tensordict(DataProto(meta_info={"cmd": "save"}).to_tensordict())
    assert meta_only.batch is None and meta_only.meta_info == {"cmd": "save"}


def test_conversion_errors_name_the_key():
    clash = DataProto.from_dict(tensors={"k": torch.zeros(2)})
    clash.non_tensor_batch["k"] = clash.batch["k"].numpy().astype(object)
    with pytest.raises(ValueError, match="key 'k' is both a batch key and a non_tensor_batch key"):
        clash.to_tensordict()
    with pytest.raises(AssertionError, match="exactly one batch dimension, got num_batch_dims=2"):
        DataProto.from_tensordict(TensorDict({"x": torch.zeros(2, 2)}, batch_size=[2, 2]), num_batch_dims=2)
