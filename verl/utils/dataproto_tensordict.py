"""Converting between a DataProto and one plain TensorDict (see :mod:`verl.utils.tensordict_utils`).

The mapping is one to one: ``batch`` tensors stay tensors, each ``non_tensor_batch`` array becomes a per-row
stack (one Python object per row, nested lists and dicts included) and each ``meta_info`` entry a batch-wide
value. So ``DataProto.from_tensordict(dp.to_tensordict())`` gives back ``dp``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.tensorclass import NonTensorData, NonTensorStack

from verl.utils import tensordict_utils as tu
from verl.utils.protocol_errors import DataProtoError

if TYPE_CHECKING:
    from verl.protocol import DataProto

__all__ = ["dataproto_to_tensordict", "tensordict_to_dataproto_parts"]


def dataproto_to_tensordict(data: DataProto) -> TensorDict:
    """One TensorDict holding the tensors, the per-row objects and the meta info of ``data``."""
    tensors: dict[str, Any] = {}
    sub_dicts: dict[str, TensorDictBase] = {}
    if data.batch is not None:
        for key, value in data.batch.items():
            (sub_dicts if isinstance(value, TensorDictBase) else tensors)[key] = value
    for key in data.non_tensor_batch:
        if key in tensors or key in sub_dicts:
            raise DataProtoError(f"key {key!r} is both a batch key and a non_tensor_batch key")
    # Stacks are built here, not from lists by get_tensordict: a row object may legitimately hold a tensor.
    rows = {
        key: NonTensorStack.from_list([NonTensorData(item) for item in value])
        for key, value in data.non_tensor_batch.items()
    }
    out = tu.get_tensordict({**tensors, **rows}, non_tensor_dict=data.meta_info)
    for key, value in sub_dicts.items():
        out.set(key, value)
    return out


def _object_rows(values: list) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        array[i] = value
    return array


def tensordict_to_dataproto_parts(
    tensor_dict: TensorDict, meta_info: dict[str, Any] | None = None, num_batch_dims: int = 1
) -> tuple[TensorDict | None, dict[str, np.ndarray], dict[str, Any]]:
    """Split a TensorDict into DataProto's ``(batch, non_tensor_batch, meta_info)``; ``meta_info`` entries are
    kept and the TensorDict's batch-wide values added to them."""
    if num_batch_dims != 1:
        raise DataProtoError(f"a DataProto keeps exactly one batch dimension, got num_batch_dims={num_batch_dims}")
    meta = dict(meta_info or {})
    tensors: dict[str, Any] = {}
    non_tensor: dict[str, np.ndarray] = {}
    for key, value in tensor_dict.items():
        if isinstance(value, NonTensorStack):
            non_tensor[key] = _object_rows(value.tolist())
        elif tu.is_batch_wide(value):
            meta[key] = value.data
        elif isinstance(value, (torch.Tensor, TensorDictBase)):
            tensors[key] = value
        else:
            raise TypeError(f"from_tensordict: entry {key!r} is a {type(value).__name__}, not a tensor or row stack")
    batch = None
    if tensors:
        first = next(iter(tensors.values()))
        rows = tensor_dict.batch_size[:1] if tensor_dict.batch_dims else first.shape[:1]
        batch = TensorDict(tensors, batch_size=rows, device=tensor_dict.device)
    return batch, non_tensor, meta
