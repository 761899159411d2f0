"""Human-readable summaries of a DataProto for logs: memory footprint and the shape/type of every entry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from verl.protocol import DataProto

__all__ = ["data_info", "size_summary", "type_info"]

_GB = 1024**3


def _tensor_bytes(tensor: torch.Tensor) -> int:
    if tensor.is_nested:
        return sum(row.numel() * row.element_size() for row in tensor.unbind(0))
    return tensor.numel() * tensor.element_size()


def size_summary(data: DataProto) -> str:
    """Tensor bytes and numpy bytes in GB (object arrays count their pointers, not the objects)."""
    tensor_bytes = 0
    if data.batch is not None:
        tensor_bytes = sum(_tensor_bytes(t) for t in data.batch.values(include_nested=True, leaves_only=True))
    numpy_bytes = sum(array.nbytes for array in data.non_tensor_batch.values())
    return f"Size of tensordict: {tensor_bytes / _GB} GB, size of non_tensor_batch: {numpy_bytes / _GB} GB"


def type_info(value: Any) -> str:
    """A short type description that looks inside containers (first items only), e.g. ``list[int|str]``."""
    if isinstance(value, list):
        inner = sorted({type_info(item) for item in value[:3]})
        return f"list[{'|'.join(inner) if inner else '...'}]"
    if isinstance(value, tuple):
        return f"tuple({', '.join(type_info(item) for item in value)})"
    if isinstance(value, dict):
        if not value:
            return "dict"
        key, item = next(iter(value.items()))
        return f"dict[{type_info(key)}: {type_info(item)}]"
    if isinstance(value, np.ndarray):
        return f"ndarray{value.shape} ({value.dtype})"
    return type(value).__name__


def data_info(data: DataProto) -> str:
    """One line per entry: tensors with shape, dtype and device; arrays with shape and dtype; meta types."""
    lines = ["batch"]
    if data.batch is not None:
        for key, tensor in data.batch.items(include_nested=True, leaves_only=True):
            lines.append(f"  {key}: {tuple(tensor.shape)} ({tensor.dtype}) {tensor.device}")
    lines.append("non_tensor_batch")
    for key, array in data.non_tensor_batch.items():
        lines.append(f"  {key}: ndarray{array.shape} ({array.dtype})")
    lines.append("meta_info")
    for key, value in data.meta_info.items():
        lines.append(f"  {key}: {type_info(value)}")
    return "\n".join(lines)
