"""Reshaping a DataProto's rows: folding groups of rows into one row and back, and unfolding column chunks.

WHY: group-wise operations (GRPO groups, a prompt with its n responses) are easiest to express as one row per
group: fold ``[bsz, ...]`` into ``[groups, bsz // groups, ...]``, shuffle or balance the groups with ordinary
row operations (``reorder``, ``chunk``), then unfold back to ``[bsz, ...]`` keeping each group contiguous.
Tensors, non-tensor arrays and meta_info move together; the input DataProto is not modified.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict

from verl.utils.protocol_errors import DataProtoError

if TYPE_CHECKING:
    from verl.protocol import DataProto

__all__ = ["fold_batch_dim", "unfold_batch_dim", "unfold_column_chunks"]


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def fold_batch_dim(data: DataProto, new_batch_size: int) -> DataProto:
    """Rows ``[bsz, ...]`` -> ``[new_batch_size, bsz // new_batch_size, ...]``: consecutive rows become one row."""
    new_batch_size = _positive(new_batch_size, "new_batch_size")
    rows = len(data)
    if rows % new_batch_size:
        raise DataProtoError(f"cannot fold {rows} rows into {new_batch_size} rows: {rows} % {new_batch_size} != 0")
    batch = None
    if data.batch is not None:
        batch = data.batch.reshape(new_batch_size, -1)
        batch.batch_size = torch.Size([new_batch_size])
    non_tensor = {
        key: value.reshape(new_batch_size, -1, *value.shape[1:]) for key, value in data.non_tensor_batch.items()
    }
    return type(data)(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(data.meta_info))


def unfold_batch_dim(data: DataProto, batch_dims: int = 2) -> DataProto:
    """Merge the leading ``batch_dims`` dims of every entry into one batch dim (the inverse of fold)."""
    batch_dims = _positive(batch_dims, "batch_dims")
    batch = None
    if data.batch is not None:
        expanded = data.batch.copy()
        expanded.auto_batch_size_(batch_dims=batch_dims)
        if expanded.batch_dims != batch_dims:
            raise DataProtoError(
                f"cannot unfold {batch_dims} batch dims: the batch entries share only the leading dims "
                f"{list(expanded.batch_size)}"
            )
        batch = expanded.reshape(-1)
    non_tensor = {}
    for key, value in data.non_tensor_batch.items():
        if value.ndim < batch_dims:
            raise DataProtoError(f"non_tensor_batch[{key!r}] has {value.ndim} dims, fewer than {batch_dims}")
        non_tensor[key] = value.reshape(-1, *value.shape[batch_dims:])
    return type(data)(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(data.meta_info))


def _rows_as_columns(key: str, values: np.ndarray) -> np.ndarray:
    """A 1-D array of equal-length sequences (one per row) as a 2-D object array, so its columns can be split."""
    lengths = {len(row) for row in values}
    if len(lengths) > 1:
        raise DataProtoError(f"non_tensor_batch[{key!r}] rows have different lengths {sorted(lengths)}; cannot split")
    table = np.empty((len(values), lengths.pop() if lengths else 0), dtype=object)
    for i, row in enumerate(values):
        for j, item in enumerate(row):
            table[i, j] = item
    return table


def unfold_column_chunks(data: DataProto, n_split: int, split_keys: Iterable[str] | None = None) -> DataProto:
    """Cut dim 1 of each ``split_keys`` entry into ``n_split`` chunks and make each chunk a row of its own;
    every other entry repeats each row ``n_split`` times so rows stay aligned (``[a, b]`` -> ``[a, a, b, b]``).

    Useful to ship grouped values as one row (so shuffles keep a group together) and unfold them later.
    """
    n_split = _positive(n_split, "n_split")
    split = set(split_keys or ())
    batch_keys = set(data.batch.keys()) if data.batch is not None else set()
    unknown = sorted(split - batch_keys - set(data.non_tensor_batch))
    if unknown:
        raise KeyError(f"unfold_column_chunks: split key {unknown[0]!r} is in neither batch nor non_tensor_batch")
    rows = len(data)

    def unfold(key: str, value: Any) -> Any:
        if value.ndim < 2 or value.shape[1] % n_split:
            raise DataProtoError(
                f"cannot split {key!r} of shape {list(value.shape)} into {n_split} column chunks along dim 1"
            )
        return value.reshape(rows * n_split, value.shape[1] // n_split, *value.shape[2:])

    batch = None
    if data.batch is not None:
        batch = TensorDict({}, batch_size=[rows * n_split], device=data.batch.device)
        for key, tensor in data.batch.items():
            batch.set(key, unfold(key, tensor) if key in split else tensor.repeat_interleave(n_split, dim=0))
    non_tensor = {}
    for key, value in data.non_tensor_batch.items():
        if key in split:
            non_tensor[key] = unfold(key, _rows_as_columns(key, value) if value.ndim == 1 else value)
        else:
            non_tensor[key] = np.repeat(value, n_split, axis=0)
    return type(data)(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(data.meta_info))
