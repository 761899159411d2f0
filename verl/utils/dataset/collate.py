"""collate_fn: a list of dataset items -> one dict ready for ``DataProto.from_single_dict``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["collate_fn"]


def _object_array(values: list[Any]) -> np.ndarray:
    # np.array(values, dtype=object) would build a 2-D array from equal-length lists (raw_prompt_ids, messages);
    # filling a 1-D object array keeps one Python object per sample.
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        array[i] = value
    return array


def collate_fn(data_list: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack tensors along a new batch dim; every other value becomes a 1-D numpy object array.

    A key missing from some items is filled with ``None`` for those items, so rows from files with different columns
    can share a batch.
    """
    if not data_list:
        raise ValueError("collate_fn got an empty list of items")
    keys: list[str] = []
    for item in data_list:
        keys.extend(k for k in item if k not in keys)
    out: dict[str, Any] = {}
    for key in keys:
        values = [item.get(key) for item in data_list]
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        if tensors and len(tensors) != len(values):
            raise ValueError(f"collate_fn: key {key!r} is a tensor in some items but not in others")
        if tensors:
            out[key] = torch.stack(tensors, dim=0)
        else:
            out[key] = _object_array(values)
    return out
